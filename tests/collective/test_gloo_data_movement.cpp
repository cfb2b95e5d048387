// Operations that move data over Gloo (send/recv, broadcast, allgather,
// allgatherv, gather, scatter, alltoall, alltoallv, barrier) for every
// dtype, world size and count, every root, against what each rank sent.
#include <algorithm>
#include <atomic>
#include <numeric>
#include <set>
#include <utility>

#include "test_support.hpp"

namespace col = caf_collective;
using test::rank_log;

namespace {

constexpr size_t counts[] = {0, 1, 5, 1000, 65537};

std::vector<int> roots_of(int world) {
  std::set<int> rs{0, world / 2, world - 1};
  return {rs.begin(), rs.end()};
}

/// What rank `rank` contributes at global indices [offset, offset + n).
col::tensor pattern(col::dtype t, int rank, size_t offset, size_t n,
                    uint64_t seed = 0) {
  auto x = test::make_tensor(t, n);
  test::fill_pattern(x, rank, offset, seed);
  return x;
}

size_t total(const std::vector<size_t>& xs) {
  return std::accumulate(xs.begin(), xs.end(), size_t{0});
}

void send_recv_ring(int world) {
  test::run_group(world, "ring-" + std::to_string(world),
                  [&](int rank, rank_log& log) {
                    auto name = "ring-" + std::to_string(world);
                    if (world == 1) { // nobody to talk to
                      ++log.checks;
                      return;
                    }
                    int next = (rank + 1) % world;
                    int prev = (rank + world - 1) % world;
                    for (auto t : col::all_dtypes)
                      for (auto n : counts) {
                        auto what = test::case_name("send/recv", t, world, n);
                        auto in = pattern(t, rank, 0, n);
                        auto out = test::make_tensor(t, n);
                        test::poison(out);
                        auto sent = col::send_async(in, next, name);
                        col::recv(out, prev, name);
                        log.expect(!sent.wait(), what + ": send failed");
                        log.expect_equal(what, out, pattern(t, prev, 0, n));
                        ++log.checks;
                      }
                  });
}

void broadcast_matrix(int world) {
  auto name = "broadcast-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto n : counts)
        for (int root : roots_of(world)) {
          auto what = test::case_name("broadcast", t, world, n) + " root " +
                      std::to_string(root);
          auto expected = pattern(t, root, 0, n);
          // In place.
          auto x = test::make_tensor(t, n);
          if (rank == root)
            test::fill_pattern(x, rank);
          else
            test::poison(x);
          col::broadcast(x, root, name);
          log.expect_equal(what + " in place", x, expected);
          // Out of place; off the root the input may be empty (root 0) or
          // any full-sized buffer (other roots).
          bool empty_in = rank != root && root == 0;
          auto in = test::make_tensor(t, empty_in ? 0 : n);
          if (rank == root) test::fill_pattern(in, rank);
          auto out = test::make_tensor(t, n);
          test::poison(out);
          col::broadcast_options opts;
          opts.root = root;
          col::broadcast(in, out, name, opts);
          log.expect_equal(what + " out of place", out, expected);
          if (rank == root)
            log.expect_equal(what + " (input modified)", in, expected);
          ++log.checks;
        }
    log.expect(log.checks == 8 * std::size(counts) * roots_of(world).size(),
               "broadcast: not every case ran");
  });
}

/// One allgather of `n` elements per rank, checked block by block.
void allgather_once(rank_log& log, const std::string& name, col::dtype t,
                    int rank, int world, size_t n) {
  auto what = test::case_name("allgather", t, world, n);
  auto in = pattern(t, rank, 0, n);
  auto out = test::make_tensor(t, static_cast<size_t>(world) * n);
  test::poison(out);
  col::allgather(in, out, name);
  for (int r = 0; r < world; ++r)
    log.expect_equal(what + " block " + std::to_string(r),
                     out.view().slice(r * n, n), pattern(t, r, 0, n));
}

/// One alltoall of `n` elements per block, checked block by block; the
/// input must stay intact. `in_place`: one buffer as input and output.
void alltoall_once(rank_log& log, const std::string& name, col::dtype t,
                   int rank, int world, size_t n, bool in_place = false) {
  auto what =
    test::case_name(in_place ? "alltoall in place" : "alltoall", t, world, n);
  auto w = static_cast<size_t>(world);
  // Block j of the input goes to rank j; block i of the output came from
  // rank i.
  auto in = pattern(t, rank, 0, w * n);
  auto out =
    in_place ? pattern(t, rank, 0, w * n) : test::make_tensor(t, w * n);
  if (in_place)
    col::alltoall(out, out, name);
  else {
    test::poison(out);
    col::alltoall(in, out, name);
  }
  for (int r = 0; r < world; ++r)
    log.expect_equal(what + " block from " + std::to_string(r),
                     out.view().slice(r * n, n), pattern(t, r, rank * n, n));
  log.expect_equal(what + " (input modified)", in, pattern(t, rank, 0, w * n));
}

void allgather_matrix(int world) {
  auto name = "allgather-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto n : counts) {
        allgather_once(log, name, t, rank, world, n);
        ++log.checks;
      }
    log.expect(log.checks == 8 * std::size(counts),
               "allgather: not every case ran");
  });
}

/// Uneven counts per rank, zeros included: variant 0 gives every rank
/// 1 in 3 a zero, variant 1 leaves only the last rank non-empty.
std::vector<size_t> uneven_counts(int world, size_t n, int variant) {
  std::vector<size_t> cs(world);
  for (int r = 0; r < world; ++r) {
    if (variant == 0)
      cs[r] = r % 3 == 1 ? 0 : n + static_cast<size_t>(r);
    else
      cs[r] = r == world - 1 ? n : 0;
  }
  return cs;
}

void allgatherv_matrix(int world) {
  auto name = "allgatherv-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto n : counts)
        for (int variant : {0, 1}) {
          auto what = test::case_name("allgatherv", t, world, n) + " variant " +
                      std::to_string(variant);
          col::allgatherv_options opts;
          opts.counts = uneven_counts(world, n, variant);
          auto in = pattern(t, rank, 0, opts.counts[rank]);
          auto out = test::make_tensor(t, total(opts.counts));
          test::poison(out);
          col::allgatherv(in, out, name, opts);
          size_t offset = 0;
          for (int r = 0; r < world; ++r) {
            auto c = opts.counts[r];
            log.expect_equal(what + " block " + std::to_string(r),
                             out.view().slice(offset, c), pattern(t, r, 0, c));
            offset += c;
          }
          ++log.checks;
        }
    log.expect(log.checks == 8 * std::size(counts) * 2,
               "allgatherv: not every case ran");
  });
}

void gather_matrix(int world) {
  auto w = static_cast<size_t>(world);
  auto name = "gather-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto n : counts)
        for (int root : roots_of(world)) {
          auto what = test::case_name("gather", t, world, n) + " root " +
                      std::to_string(root);
          col::gather_options opts;
          opts.root = root;
          auto in = pattern(t, rank, 0, n);
          bool empty_out = rank != root && root == 0;
          auto out = test::make_tensor(t, empty_out ? 0 : w * n);
          test::poison(out);
          col::gather(in, out, name, opts);
          if (rank == root)
            for (int r = 0; r < world; ++r)
              log.expect_equal(what + " block " + std::to_string(r),
                               out.view().slice(r * n, n), pattern(t, r, 0, n));
          ++log.checks;
        }
    log.expect(log.checks == 8 * std::size(counts) * roots_of(world).size(),
               "gather: not every case ran");
  });
}

void scatter_matrix(int world) {
  auto w = static_cast<size_t>(world);
  auto name = "scatter-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto n : counts)
        for (int root : roots_of(world)) {
          auto what = test::case_name("scatter", t, world, n) + " root " +
                      std::to_string(root);
          col::scatter_options opts;
          opts.root = root;
          bool empty_in = rank != root && root == 0;
          auto in = test::make_tensor(t, empty_in ? 0 : w * n);
          if (rank == root)
            test::fill_pattern(in, root);
          else
            test::poison(in);
          auto out = test::make_tensor(t, n);
          test::poison(out);
          col::scatter(in, out, name, opts);
          log.expect_equal(what, out, pattern(t, root, rank * n, n));
          ++log.checks;
        }
    log.expect(log.checks == 8 * std::size(counts) * roots_of(world).size(),
               "scatter: not every case ran");
  });
}

void alltoall_matrix(int world) {
  auto name = "alltoall-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (bool in_place : {false, true})
      for (auto t : col::all_dtypes)
        for (auto n : counts) {
          alltoall_once(log, name, t, rank, world, n, in_place);
          ++log.checks;
        }
    log.expect(log.checks == 2 * 8 * std::size(counts),
               "alltoall: not every case ran");
  });
}

/// Elements rank `from` sends to rank `to` in alltoallv, zeros included.
size_t v_count(int from, int to, size_t n) {
  if ((from * 3 + to) % 4 == 0) return 0;
  return n + static_cast<size_t>((from + 2 * to) % 3);
}

void alltoallv_matrix(int world) {
  auto name = "alltoallv-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto n : counts) {
        auto what = test::case_name("alltoallv", t, world, n);
        col::alltoallv_options opts;
        for (int r = 0; r < world; ++r) {
          opts.send_counts.push_back(v_count(rank, r, n));
          opts.recv_counts.push_back(v_count(r, rank, n));
        }
        auto sent = total(opts.send_counts);
        auto received = total(opts.recv_counts);
        auto in = pattern(t, rank, 0, sent);
        auto out = test::make_tensor(t, received);
        test::poison(out);
        col::alltoallv(in, out, name, opts);
        // In place: one buffer, the input at its start, the output over it.
        auto one = pattern(t, rank, 0, std::max(sent, received));
        col::alltoallv(one.view().slice(0, sent), one.view().slice(0, received),
                       name, opts);
        for (auto [result, how] :
             {std::pair{out.view(), ""}, std::pair{one.view(), " in place"}}) {
          size_t offset = 0;
          for (int r = 0; r < world; ++r) {
            // Rank r's block for us starts after its blocks for ranks < us.
            size_t src_offset = 0;
            for (int k = 0; k < rank; ++k)
              src_offset += v_count(r, k, n);
            auto c = opts.recv_counts[r];
            log.expect_equal(what + how + " block from " + std::to_string(r),
                             result.slice(offset, c),
                             pattern(t, r, src_offset, c));
            offset += c;
          }
          ++log.checks;
        }
      }
    log.expect(log.checks == 2 * 8 * std::size(counts),
               "alltoallv: not every case ran");
  });
}

void barrier_rounds(int world) {
  constexpr int rounds = 20;
  std::atomic<int> arrived{0};
  auto name = "barrier-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (int k = 0; k < rounds; ++k) {
      // Stagger the ranks so a barrier that does not wait would show.
      if ((rank + k) % world == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds{2});
      ++arrived;
      col::barrier(name);
      auto seen = arrived.load();
      log.expect(seen >= world * (k + 1), "barrier round " + std::to_string(k) +
                                            ": passed after only " +
                                            std::to_string(seen) + " arrivals");
      // Nobody may run ahead into the next round's increment before all
      // of this round's checks are done.
      col::barrier(name);
      ++log.checks;
    }
    log.expect(log.checks == rounds, "barrier: not every round ran");
  });
  CHECK(arrived.load() == world * rounds);
}

/// Every contribution size from 1 to 72 bytes. The shm backend carries an
/// input of up to 40 bytes on the rank's sync line and a larger one in its
/// small slot: both sides of that limit must copy alike.
void small_contributions(int world) {
  constexpr size_t max_bytes = 72;
  auto name = "small-contributions-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    size_t cases = 0;
    for (auto t : {col::dtype::uint8, col::dtype::int32})
      for (size_t n = 1; n * col::size_of(t) <= max_bytes; ++n) {
        allgather_once(log, name, t, rank, world, n);
        auto what = test::case_name("broadcast", t, world, n);
        int root = world - 1;
        auto x =
          rank == root ? pattern(t, root, 0, n) : test::make_tensor(t, n);
        if (rank != root) test::poison(x);
        col::broadcast(x, root, name);
        log.expect_equal(what, x, pattern(t, root, 0, n));
        // alltoall publishes its whole input: w * n elements.
        alltoall_once(log, name, t, rank, world, n);
        ++cases;
      }
    log.expect(cases == 72 + 18, "small contributions: not every case ran");
    ++log.checks;
  });
}

} // namespace

#define CAF_COLLECTIVE_PER_WORLD(title, fn) \
  TEST_CASE(title " with 1 rank") {         \
    fn(1);                                  \
  }                                         \
  TEST_CASE(title " with 2 ranks") {        \
    fn(2);                                  \
  }                                         \
  TEST_CASE(title " with 3 ranks") {        \
    fn(3);                                  \
  }                                         \
  TEST_CASE(title " with 4 ranks") {        \
    fn(4);                                  \
  }                                         \
  TEST_CASE(title " with 7 ranks") {        \
    fn(7);                                  \
  }

CAF_COLLECTIVE_PER_WORLD("send and recv pass data around a ring",
                         send_recv_ring)
CAF_COLLECTIVE_PER_WORLD("broadcast copies the root's tensor to every rank",
                         broadcast_matrix)
CAF_COLLECTIVE_PER_WORLD("allgather concatenates every rank's tensor",
                         allgather_matrix)
CAF_COLLECTIVE_PER_WORLD("allgatherv concatenates uneven tensors",
                         allgatherv_matrix)
CAF_COLLECTIVE_PER_WORLD("gather concatenates every rank's tensor at the root",
                         gather_matrix)
CAF_COLLECTIVE_PER_WORLD("scatter hands each rank its block of the root's "
                         "tensor",
                         scatter_matrix)
CAF_COLLECTIVE_PER_WORLD("alltoall exchanges blocks between all ranks",
                         alltoall_matrix)
CAF_COLLECTIVE_PER_WORLD("alltoallv exchanges uneven blocks between all ranks",
                         alltoallv_matrix)
CAF_COLLECTIVE_PER_WORLD("barrier lets no rank pass before all arrived",
                         barrier_rounds)

// Sends of one group complete in issue order (a Gloo send completes only
// when its receive is posted), so tagged messages are received in that
// order too; tags keep messages of different channels apart.
CAF_COLLECTIVE_PER_WORLD("allgather broadcast and alltoall are right at every "
                         "contribution size from 1 to 72 bytes",
                         small_contributions)

TEST_CASE("recv takes tagged sends in the order they were issued") {
  auto name = std::string{"tags"};
  test::run_group(
    2, name,
    [&](int rank, rank_log& log) {
      auto t = col::dtype::int32;
      if (rank == 0) {
        auto a = pattern(t, 0, 0, 100, 1);
        auto b = pattern(t, 0, 0, 100, 2);
        col::send_options o1;
        o1.tag = 1;
        col::send_options o2;
        o2.tag = 2;
        auto w1 = col::send_async(a, 1, name, o1);
        auto w2 = col::send_async(b, 1, name, o2);
        log.expect(!w1.wait(), "send tag 1 failed");
        log.expect(!w2.wait(), "send tag 2 failed");
      } else {
        auto x = test::make_tensor(t, 100);
        auto y = test::make_tensor(t, 100);
        col::recv_options o1;
        o1.tag = 1;
        col::recv_options o2;
        o2.tag = 2;
        col::recv(x, 0, name, o1);
        col::recv(y, 0, name, o2);
        log.expect_equal("tag 1", x, pattern(t, 0, 0, 100, 1));
        log.expect_equal("tag 2", y, pattern(t, 0, 0, 100, 2));
      }
    },
    std::chrono::seconds{5});
}

TEST_CASE("a recv whose size differs from the send fails instead of "
          "crashing or writing") {
  auto name = std::string{"sizes"};
  std::vector<std::string> errors(2);
  std::vector<bool> untouched(2, false);
  test::run_group(
    2, name,
    [&](int rank, rank_log&) {
      auto t = col::dtype::int32;
      auto buf = test::make_tensor(t, rank == 0 ? 100 : 300);
      if (rank == 1) test::poison(buf);
      col::send_options so;
      so.timeout = std::chrono::milliseconds{300};
      col::recv_options ro;
      ro.timeout = std::chrono::milliseconds{300};
      try {
        if (rank == 0)
          col::send(buf, 1, name, so);
        else
          col::recv(buf, 0, name, ro);
      } catch (const col::collective_error& ex) {
        errors[rank] = ex.what();
      }
      if (rank == 1) {
        auto poisoned = test::make_tensor(t, 300);
        test::poison(poisoned);
        untouched[1] =
          std::memcmp(buf.data(), poisoned.data(), buf.nbytes()) == 0;
      }
    },
    std::chrono::seconds{5});
  CHECK(untouched[1]);
  if (std::string_view{test::backend_under_test} == "shm") {
    // The shm mailbox holds the message: the sender is done, the receiver
    // sees the size at once and names it; the message stays for a
    // matching recv.
    INFO(errors[1]);
    CHECK(errors[0].empty());
    CHECK(errors[1].find("collective.mismatch") != std::string::npos);
    CHECK(errors[1].find("rank 0 sent 400 bytes") != std::string::npos);
    return;
  }
  // Gloo: the first rank to time out makes Gloo close its connections
  // (Context::signalException), so the other rank may learn of it as a lost
  // connection before its own deadline: each side fails, at least one of
  // them with the timeout.
  int timeouts = 0;
  for (const auto& e : errors) {
    INFO(e);
    bool timed_out = e.find("collective.timeout") != std::string::npos;
    bool lost = e.find("collective.peer_lost") != std::string::npos;
    CHECK((timed_out || lost));
    timeouts += timed_out ? 1 : 0;
  }
  CHECK(timeouts >= 1);
}

TEST_CASE("consecutive sends between two ranks arrive in order") {
  auto name = std::string{"p2p-order"};
  test::run_group(2, name, [&](int rank, rank_log& log) {
    auto t = col::dtype::float64;
    constexpr int messages = 50;
    if (rank == 0) {
      std::vector<col::tensor> sent;
      std::vector<col::work> handles;
      for (int i = 0; i < messages; ++i) {
        sent.push_back(pattern(t, 0, 0, 17 + i, i));
        handles.push_back(col::send_async(sent.back(), 1, name));
      }
      for (auto& h : handles)
        log.expect(!h.wait(), "a send failed");
    } else {
      for (int i = 0; i < messages; ++i) {
        auto x = test::make_tensor(t, 17 + i);
        col::recv(x, 0, name);
        log.expect_equal("message " + std::to_string(i), x,
                         pattern(t, 0, 0, 17 + i, i));
      }
    }
  });
}

// Ranks outside a send/recv pair must not fall out of step with the pair:
// a collective after a point-to-point exchange between two of three ranks
// runs (it timed out when sends and recvs consumed a collective sequence
// number that the bystander never took).
TEST_CASE("a collective after a send between two of three ranks") {
  auto name = std::string{"p2p-bystander"};
  test::run_group(
    3, name,
    [&](int rank, rank_log& log) {
      auto t = col::dtype::int64;
      col::allreduce_options ao;
      ao.timeout = std::chrono::milliseconds{5000};
      for (int round = 0; round < 3; ++round) {
        if (rank == 0) {
          col::send(pattern(t, 0, 0, 64, round), 1, name);
        } else if (rank == 1) {
          auto x = test::make_tensor(t, 64);
          col::recv(x, 0, name);
          log.expect_equal("round " + std::to_string(round), x,
                           pattern(t, 0, 0, 64, round));
        }
        auto sum = pattern(t, rank, 0, 8, round);
        col::allreduce(sum, name, ao);
        auto expected = test::make_tensor(t, 8);
        auto* e = static_cast<int64_t*>(expected.data());
        for (int r = 0; r < 3; ++r) {
          auto part = pattern(t, r, 0, 8, round);
          auto* p = static_cast<const int64_t*>(part.data());
          for (size_t i = 0; i < 8; ++i) // unsigned: the sum wraps
            e[i] = int64_t((r == 0 ? 0 : uint64_t(e[i])) + uint64_t(p[i]));
        }
        log.expect_equal("allreduce after p2p, round " + std::to_string(round),
                         sum, expected);
        ++log.checks;
      }
    },
    std::chrono::seconds{30});
}

// An op that cannot run at once is queued with copies of the caller's views
// (group::submit borrows them only while the op runs inside the call): a
// caller may reuse its view objects as soon as the call returned.
TEST_CASE("a queued op keeps the views it was called with when the caller "
          "reuses them") {
  auto name = std::string{"queued-views"};
  std::latch reused{1};
  test::run_group(2, name, [&](int rank, rank_log& log) {
    std::vector<float> first(4, float(rank + 1));
    std::vector<float> second(4, float(10 * (rank + 1)));
    std::vector<float> decoy(4, -1.0f);
    if (rank == 0) {
      // Rank 1 has not called yet: the first op waits for it and the second
      // queues behind it.
      auto first_done = col::allreduce_async(col::view_of(first), name);
      auto view = std::make_unique<col::tensor_view>(col::view_of(second));
      auto second_done = col::allreduce_async(*view, name);
      *view = col::view_of(decoy);
      reused.count_down();
      log.expect(!first_done.wait(), "the first allreduce failed");
      log.expect(!second_done.wait(), "the second allreduce failed");
      log.expect(second == std::vector<float>(4, 30.0f),
                 "the queued allreduce did not reduce the buffer it was "
                 "called with");
      log.expect(decoy == std::vector<float>(4, -1.0f),
                 "the queued allreduce wrote through the reused view");
    } else {
      reused.wait();
      col::allreduce(col::view_of(first), name);
      col::allreduce(col::view_of(second), name);
    }
    log.expect(first == std::vector<float>(4, 3.0f), "first allreduce");
  });
}

TEST_CASE("a recv of another dtype than its send's never reads the bytes as "
          "its own") {
  // Before: send and recv matched on tag and byte count alone, so rank 1
  // took rank 0's float32 bits for int32 values and returned success.
  test::run_group(2, "p2p-dtype", [](int rank, rank_log& log) {
    if (rank == 0) {
      std::vector<float> sent{1.5f, 2.5f, 3.5f, 4.5f};
      col::send_options so;
      so.tag = 3;
      so.timeout = std::chrono::milliseconds{2000};
      // Gloo: no recv matches, and the send fails once rank 1's recv timed
      // out (Gloo then closes the connections); shm posts it at once.
      (void)col::send_async(col::view_of(sent), 1, "p2p-dtype", so).wait();
      return;
    }
    std::vector<int32_t> got(4, -7);
    col::recv_options ro;
    ro.tag = 3;
    ro.timeout = std::chrono::milliseconds{500};
    auto err = col::recv_async(col::view_of(got), 0, "p2p-dtype", ro).wait();
    log.expect(static_cast<bool>(err), "the recv of int32 took float32 bytes");
    if (err)
      log.expect(col::code_of(err) == col::errc::timeout ||
                   col::code_of(err) == col::errc::mismatch ||
                   col::code_of(err) == col::errc::peer_lost,
                 "recv: " + col::render(err));
    log.expect(got == std::vector<int32_t>(4, -7), "the recv wrote its buffer");
    log.checks += 1;
  });
}
