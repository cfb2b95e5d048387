// Regression tests of issue 9: valid use that used to hang, ranks that
// disagree (an error on every rank, never a crash or mixed bytes), values
// that must be refused, and float results identical on every rank.
#include <atomic>
#include <cmath>
#include <cstring>
#include <latch>
#include <limits>
#include <thread>

#include "fake_member.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::check_error;
using test::expect_error;
using test::expect_usable;
using test::rank_log;

namespace {

/// Runs `body` on `world` ranks of a fresh Gloo group `name` whose
/// operations time out after `timeout`; the ranks leave together.
void run_short(int world, const std::string& name,
               const std::function<void(int, rank_log&)>& body,
               col::milliseconds timeout = 10s) {
  auto store = col::make_in_process_store();
  std::latch done{world};
  auto results = test::run_threads(world, [&](int rank, rank_log& log) {
    col::init_collective_group(world, rank, "gloo", name,
                               test::group_options(store, timeout));
    body(rank, log);
    done.arrive_and_wait();
    col::destroy_collective_group(name);
  });
  test::check_ranks(results);
}

std::vector<int64_t> iota_values(size_t n, int64_t first) {
  std::vector<int64_t> xs(n);
  for (size_t i = 0; i < n; ++i)
    xs[i] = first + static_cast<int64_t>(i);
  return xs;
}

} // namespace

// -- valid use that hung -----------------------------------------------------

TEST_CASE("a send/recv ring followed at once by a small allreduce completes") {
  for (int world : {3, 4}) {
    INFO("world " << world);
    run_short(world, "ring-then-allreduce", [world](int rank, rank_log& log) {
      // Sizes of the legacy algorithms' range: each is a fresh instance.
      for (size_t count : {2, 1024, 8192, 65536}) {
        std::vector<float> out(16, float(rank));
        std::vector<float> in(16, -1.0f);
        std::vector<float> x(count, 1.0f);
        auto s = col::send_async(col::view_of(out), (rank + 1) % world,
                                 "ring-then-allreduce");
        auto r = col::recv_async(col::view_of(in), (rank + world - 1) % world,
                                 "ring-then-allreduce");
        auto a = col::allreduce_async(col::view_of(x), "ring-then-allreduce");
        for (auto* w : {&s, &r, &a})
          if (auto err = w->wait())
            log.fail("count " + std::to_string(count) + ": " +
                     col::render(err));
        log.expect(in[0] == float((rank + world - 1) % world),
                   "recv got the wrong message");
        log.expect(x[0] == float(world) && x[count - 1] == float(world),
                   "allreduce sum is wrong at count " + std::to_string(count));
      }
    });
  }
}

// -- ranks that disagree -----------------------------------------------------

TEST_CASE("allgatherv with counts that differ between ranks fails with "
          "mismatch on every rank, naming them, and the group stays usable") {
  run_short(3, "agv-mismatch", [](int rank, rank_log& log) {
    // Rank 2 believes rank 0 contributes 4 elements, the others 2: same
    // total, so every rank's own buffers are consistent.
    std::vector<size_t> counts =
      rank == 2 ? std::vector<size_t>{4, 2, 2} : std::vector<size_t>{2, 2, 4};
    std::vector<int32_t> in(counts[rank], rank);
    std::vector<int32_t> out(8, -7);
    col::allgatherv_options opts;
    opts.counts = counts;
    expect_error(log, "allgatherv", col::errc::mismatch,
                 {"agv-mismatch", "allgatherv", "ranks [0, 1]", "ranks [2]",
                  "{2, 2, 4}", "{4, 2, 2}"},
                 [&] {
                   col::allgatherv(col::view_of(in), col::view_of(out),
                                   "agv-mismatch", opts);
                 });
    log.expect(out == std::vector<int32_t>(8, -7), "output was written");
    expect_usable(log, "agv-mismatch", 3, rank);
  });
}

TEST_CASE("alltoallv where a rank expects fewer or more elements than its "
          "peer sends fails with mismatch on every rank") {
  for (size_t expected : {size_t{1}, size_t{5}}) {
    INFO("rank 1 expects " << expected << " of rank 0's 3 elements");
    run_short(2, "a2av-mismatch", [expected](int rank, rank_log& log) {
      col::alltoallv_options opts;
      opts.send_counts = {3, 3};
      opts.recv_counts = {3, 3};
      if (rank == 1) opts.recv_counts[0] = expected;
      std::vector<int64_t> in(6, rank);
      std::vector<int64_t> out(opts.recv_counts[0] + opts.recv_counts[1], -7);
      expect_error(log, "alltoallv", col::errc::mismatch,
                   {"a2av-mismatch", "ranks [0, 1]",
                    "rank 0 sends 3 elements to rank 1, which expects " +
                      std::to_string(expected)},
                   [&] {
                     col::alltoallv(col::view_of(in), col::view_of(out),
                                    "a2av-mismatch", opts);
                   });
      log.expect(
        std::all_of(out.begin(), out.end(), [](int64_t x) { return x == -7; }),
        "output was written");
      expect_usable(log, "a2av-mismatch", 2, rank);
    });
  }
}

TEST_CASE("ops where one rank passes float32 and another int32 of the same "
          "byte size fail on every rank instead of mixing bytes") {
  std::atomic<int> timeouts{0};
  for (auto op : {col::op_kind::allgather, col::op_kind::broadcast,
                  col::op_kind::alltoall, col::op_kind::gather}) {
    INFO(col::to_string(op));
    run_short(
      2, "dtype-mismatch",
      [op, &timeouts](int rank, rank_log& log) {
        auto type = rank == 0 ? col::dtype::float32 : col::dtype::int32;
        auto in = test::make_tensor(type, 4);
        auto out = test::make_tensor(type, 8);
        float one_and_half = 1.5f;
        std::memcpy(in.data(), &one_and_half, sizeof(float));
        test::poison(out);
        auto run = [&] {
          switch (op) {
            case col::op_kind::allgather:
              return col::allgather(in, out, "dtype-mismatch");
            case col::op_kind::broadcast:
              return col::broadcast(in.view(), 0, "dtype-mismatch");
            case col::op_kind::gather:
              return col::gather(in, out, "dtype-mismatch");
            default:
              return col::alltoall(in, out.view().slice(0, 4),
                                   "dtype-mismatch");
          }
        };
        auto e = test::expect_throw(log, "mixed dtypes", run);
        // Gloo closes a pair on its first timeout, so the slower rank may
        // see the connection close instead; one of them times out.
        log.expect(e.code() == col::errc::timeout ||
                     e.code() == col::errc::peer_lost,
                   "unexpected error: " + std::string{e.what()});
        if (e.code() == col::errc::timeout) {
          ++timeouts;
          log.expect(std::string{e.what()}.find("other arguments") !=
                       std::string::npos,
                     "timeout does not say the ranks may disagree");
        }
      },
      500ms);
    CHECK(timeouts.exchange(0) >= 1);
  }
}

TEST_CASE("reductions whose ranks disagree on dtype or reduce op fail on "
          "every rank - never a crash or mixed data reported as success") {
  // Before (helper-63's fuzzing): the Gloo keys held the carrier type, not
  // the caller's dtype, and int64 avg's first pass looked like an int64
  // sum; the legacy algorithms' ready barrier held neither. int64 product
  // against float32 sum at 317 elements ended the process (Gloo matched
  // buffers of 2536 and 1268 bytes), int64 avg against sum returned the
  // summing rank a wrong sum as success, float16 against float32 sum
  // succeeded on both ranks.
  struct disagreement {
    const char* what;
    col::dtype type0;
    col::reduce_op op0;
    col::dtype type1;
    col::reduce_op op1;
    size_t count;
    col::op_kind kind;
  };
  using col::dtype;
  using col::reduce_op;
  for (auto d : {
         disagreement{"int64 product against float32 sum", dtype::int64,
                      reduce_op::product, dtype::float32, reduce_op::sum, 317,
                      col::op_kind::allreduce},
         disagreement{"uint8 bxor against int32 sum", dtype::uint8,
                      reduce_op::bxor, dtype::int32, reduce_op::sum, 198,
                      col::op_kind::allreduce},
         disagreement{"int64 avg against int64 sum", dtype::int64,
                      reduce_op::avg, dtype::int64, reduce_op::sum, 5,
                      col::op_kind::allreduce},
         disagreement{"int64 avg against int64 sum, options API", dtype::int64,
                      reduce_op::avg, dtype::int64, reduce_op::sum, 70000,
                      col::op_kind::allreduce},
         disagreement{"float16 sum against float32 sum", dtype::float16,
                      reduce_op::sum, dtype::float32, reduce_op::sum, 5,
                      col::op_kind::allreduce},
         disagreement{"float32 avg against float32 sum", dtype::float32,
                      reduce_op::avg, dtype::float32, reduce_op::sum, 5,
                      col::op_kind::allreduce},
         // The root sums: its one pass met the other rank's first.
         disagreement{"int64 sum against int64 avg, reduce", dtype::int64,
                      reduce_op::sum, dtype::int64, reduce_op::avg, 4,
                      col::op_kind::reduce},
         disagreement{"int64 avg against int64 sum, reduce_scatter",
                      dtype::int64, reduce_op::avg, dtype::int64,
                      reduce_op::sum, 4, col::op_kind::reduce_scatter},
       }) {
    INFO(std::string{d.what});
    std::atomic<int> failed{0};
    run_short(
      2, "reduce-disagree",
      [&](int rank, rank_log& log) {
        auto type = rank == 0 ? d.type0 : d.type1;
        auto op = rank == 0 ? d.op0 : d.op1;
        auto in = test::make_tensor(type, d.count * 2);
        auto out = test::make_tensor(type, d.count * 2);
        try {
          if (d.kind == col::op_kind::allreduce) {
            col::allreduce_options opts;
            opts.op = op;
            col::allreduce(in.view().slice(0, d.count), "reduce-disagree",
                           opts);
          } else if (d.kind == col::op_kind::reduce) {
            col::reduce_options opts;
            opts.op = op;
            col::reduce(in.view().slice(0, d.count), 0, "reduce-disagree",
                        opts);
          } else {
            col::reduce_scatter_options opts;
            opts.op = op;
            col::reduce_scatter(in, out.view().slice(0, d.count),
                                "reduce-disagree", opts);
          }
          // A rank whose peers' messages never match its own may not
          // succeed: it would have reduced what nobody sent it. (A reduce's
          // non-root only sends: it may be done before the root fails.)
          if (d.kind != col::op_kind::reduce || rank == 0)
            log.fail(std::string{"rank "} + std::to_string(rank) +
                     " succeeded although its peer disagreed");
        } catch (const col::collective_error& e) {
          ++failed;
          log.expect(e.code() == col::errc::timeout ||
                       e.code() == col::errc::peer_lost,
                     "unexpected error: " + std::string{e.what()});
        }
      },
      500ms);
    // A rooted reduce: the root fails; a non-root may have sent and gone.
    CHECK(failed.load() >= (d.kind == col::op_kind::reduce ? 1 : 2));
    // The name forms again and reduces right.
    run_short(2, "reduce-disagree", [](int rank, rank_log& log) {
      std::vector<float> x(8, float(rank + 1));
      col::allreduce(col::view_of(x), "reduce-disagree");
      log.expect(x[7] == 3.0f,
                 "allreduce after re-forming gave " + std::to_string(x[7]));
    });
  }
}

TEST_CASE("an op one rank calls with no elements while its peer calls it "
          "with data fails on both ranks") {
  // Gloo returned success at once on the empty rank, and with a legacy
  // allreduce its next op then paired with the peer's pending one.
  auto with = [](size_t count) {
    return test::make_tensor(col::dtype::float32, count);
  };
  for (auto op : {col::op_kind::allreduce, col::op_kind::reduce,
                  col::op_kind::reduce_scatter, col::op_kind::allgather,
                  col::op_kind::broadcast, col::op_kind::gather,
                  col::op_kind::scatter, col::op_kind::alltoall}) {
    INFO(col::to_string(op));
    run_short(
      2, "empty-one-side",
      [&](int rank, rank_log& log) {
        size_t n = rank == 0 ? 0 : 4;
        auto in = with(op == col::op_kind::reduce_scatter ? 2 * n : n);
        auto out = with(
          op == col::op_kind::allgather || op == col::op_kind::gather ? 2 * n
                                                                      : n);
        auto whole = with(2 * n);
        auto run = [&] {
          switch (op) {
            case col::op_kind::allreduce:
              return col::allreduce(in, "empty-one-side");
            case col::op_kind::reduce:
              return col::reduce(in, 0, "empty-one-side");
            case col::op_kind::reduce_scatter:
              return col::reduce_scatter(in, out, "empty-one-side");
            case col::op_kind::allgather:
              return col::allgather(in, out, "empty-one-side");
            case col::op_kind::broadcast:
              return col::broadcast(in, 0, "empty-one-side");
            case col::op_kind::gather:
              return col::gather(in, out, "empty-one-side");
            case col::op_kind::scatter:
              return col::scatter(whole, out, "empty-one-side");
            default: return col::alltoall(in, out, "empty-one-side");
          }
        };
        auto e = test::expect_throw(log, "one side empty", run);
        log.expect(e.code() == col::errc::timeout ||
                     e.code() == col::errc::peer_lost,
                   "unexpected error: " + std::string{e.what()});
      },
      500ms);
  }
}

TEST_CASE("after a legacy allreduce that one rank called empty, no rank's "
          "next allreduce mixes data with the peer's earlier one") {
  // A legacy Gloo allreduce runs on slots fixed when it was built: were the
  // empty rank to go on, its next op would meet the peer's first.
  col::allreduce_options ring;
  ring.algorithm = col::allreduce_algorithm::ring;
  run_short(
    2, "empty-legacy",
    [&](int rank, rank_log& log) {
      auto warm = test::make_tensor(col::dtype::float32, 4);
      col::allreduce(warm, "empty-legacy", ring);
      auto first = test::make_tensor(col::dtype::float32, rank == 0 ? 0 : 4);
      auto second = test::make_tensor(col::dtype::float32, 4);
      for (size_t i = 0; i < 4; ++i) {
        if (rank == 1) static_cast<float*>(first.data())[i] = 5;
        static_cast<float*>(second.data())[i] = rank == 0 ? 100.0f : 7.0f;
      }
      test::expect_throw(log, "first allreduce, rank 0 empty",
                         [&] { col::allreduce(first, "empty-legacy", ring); });
      // The timeout broke the group: the second op is refused, never paired
      // with the peer's first.
      test::expect_throw(log, "second allreduce after the mismatch",
                         [&] { col::allreduce(second, "empty-legacy", ring); });
    },
    500ms);
}

TEST_CASE("a forced legacy Gloo allreduce refuses an op timeout it cannot "
          "keep and the group stays usable") {
  // Gloo's legacy algorithms wait with the group's timeout. Before: a
  // forced one with an op timeout of its own ran and ended at the group's.
  auto store = col::make_in_process_store();
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "gloo", "legacy-timeout",
                               test::group_options(store, 5s));
    for (auto algorithm : {col::allreduce_algorithm::ring,
                           col::allreduce_algorithm::ring_chunked,
                           col::allreduce_algorithm::halving_doubling}) {
      col::allreduce_options opts;
      opts.algorithm = algorithm;
      opts.timeout = 2s;
      std::vector<float> x(4, 1.0f);
      expect_error(
        log, "forced legacy", col::errc::invalid_argument,
        {"legacy-timeout", "allreduce", "group's timeout (5000 ms)", "2000 ms"},
        [&] { col::allreduce(col::view_of(x), "legacy-timeout", opts); });
      log.expect(x[0] == 1.0f, "the refused op wrote its buffer");
      // The group's own timeout, given or not, still runs it.
      opts.timeout = 5s;
      col::allreduce(col::view_of(x), "legacy-timeout", opts);
      log.expect(x[0] == 2.0f, "legacy allreduce with the group's timeout");
    }
    expect_usable(log, "legacy-timeout", 2, rank);
    col::destroy_collective_group("legacy-timeout");
  });
  test::check_ranks(results);
}

TEST_CASE("after an op refused on one rank only no rank's next op pairs "
          "with its peers' - on every CPU backend") {
  // Rank 0 passes a bad argument at step 1, rank 1 runs the op. Before: the
  // refused op took no sequence number, so rank 0's step 2 met rank 1's
  // step 1 and both returned mixed data as success (gather: [200, 101]).
  for (std::string backend : {"gloo", "shm"}) {
    for (auto op : {col::op_kind::allreduce, col::op_kind::gather}) {
      CAPTURE(backend);
      CAPTURE(std::string{col::to_string(op)});
      auto name = "one-sided-" + backend + "-" + std::string{to_string(op)};
      auto store = col::make_in_process_store();
      auto results = test::run_threads(2, [&](int rank, rank_log& log) {
        col::init_collective_group(2, rank, backend, name,
                                   test::group_options(store, 1s));
        std::vector<std::string> outcomes;
        for (int step = 1; step <= 3; ++step) {
          bool refuse = rank == 0 && step == 1;
          int32_t mine = 100 * step + rank;
          std::vector<int32_t> in{mine};
          std::vector<int32_t> out(
            refuse ? 3 : (op == col::op_kind::gather ? 2 : 1));
          try {
            if (op == col::op_kind::allreduce)
              col::allreduce(col::view_of(in), col::view_of(out), name);
            else
              col::gather(col::view_of(in), col::view_of(out), name);
            // Success must be right: step's own values only.
            bool right = op == col::op_kind::allreduce
                           ? out[0] == 200 * step + 1
                           : rank != 0 || (out[0] == 100 * step &&
                                           out[1] == 100 * step + 1);
            log.expect(right, "step " + std::to_string(step) +
                                " returned another step's data as success");
            outcomes.push_back("ok");
          } catch (const col::collective_error& e) {
            outcomes.push_back(std::string{col::to_string(e.code())} + ": " +
                               e.what());
          }
        }
        // Rank 0 refused step 1 itself; rank 1's step 1 and rank 0's step
        // 2 never met.
        log.expect(outcomes[0] != "ok", "step 1 succeeded");
        if (rank == 0)
          log.expect(outcomes[1] != "ok", "rank 0's step 2 succeeded");
        // shm sees it: each op that meets another's fails at once, saying
        // so (rank 1's step 3 has no partner left and times out).
        if (backend == "shm")
          for (int step = rank == 0 ? 2 : 1; step <= (rank == 0 ? 3 : 2);
               ++step)
            log.expect(outcomes[size_t(step - 1)].find("out of step") !=
                         std::string::npos,
                       "rank " + std::to_string(rank) + " step " +
                         std::to_string(step) + ": " +
                         outcomes[size_t(step - 1)]);
        col::destroy_collective_group(name);
      });
      test::check_ranks(results);
    }
  }
}

TEST_CASE("an op that fails because another op of its Gloo group timed out "
          "says so instead of reporting a timeout of its own") {
  // Gloo closes every connection of a group when one wait times out. Before:
  // the send in flight then said "not finished within 20000 ms" after 300.
  auto store = col::make_in_process_store();
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "gloo", "closed-by-other",
                               test::group_options(store, 20s));
    if (rank == 0) {
      // Nobody receives this send; nobody sends what the recv waits for.
      std::vector<float> out(1 << 16, 1.0f), in(4);
      col::send_options so;
      so.tag = 5;
      auto sending =
        col::send_async(col::view_of(out), 1, "closed-by-other", so);
      std::this_thread::sleep_for(100ms);
      col::recv_options ro;
      ro.tag = 6;
      ro.timeout = 300ms;
      expect_error(
        log, "recv", col::errc::timeout, {"not finished within 300"},
        [&] { col::recv(col::view_of(in), 1, "closed-by-other", ro); });
      auto err = sending.wait();
      log.expect(col::code_of(err) == col::errc::aborted,
                 "send: " + col::render(err));
      log.expect(col::render(err).find("another op") != std::string::npos,
                 "send: " + col::render(err));
    }
    // Rank 1 only keeps its connections open until rank 0 is through.
    std::this_thread::sleep_for(1500ms);
    col::destroy_collective_group("closed-by-other");
  });
  test::check_ranks(results);
}

TEST_CASE("a Gloo op ends at its own timeout even when each of its waits "
          "is shorter") {
  // Gloo bounds each wait inside an op, not the op: a gather's root waits
  // for its peers one after the other, each wait with the whole timeout.
  // Before: with peers arriving at 0.6 and 1.3 times the op's timeout the
  // root's gather returned success after 1.3 timeouts (its second wait ran
  // from 0.6 to 1.6). Each margin is 0.3 timeouts.
  auto store = col::make_in_process_store();
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    col::init_collective_group(3, rank, "gloo", "op-deadline",
                               test::group_options(store, 20s));
    // Every rank starts its clock when the others do.
    col::barrier("op-deadline");
    std::vector<float> in(4, float(rank)), out(12);
    col::gather_options opts;
    opts.timeout = 1000ms;
    if (rank == 0) {
      expect_error(log, "gather on the root", col::errc::timeout,
                   {"not finished within 1000 ms"}, [&] {
                     col::gather(col::view_of(in), col::view_of(out),
                                 "op-deadline", opts);
                   });
    } else {
      std::this_thread::sleep_for(rank == 1 ? 600ms : 1300ms);
      try {
        col::gather(col::view_of(in), col::view_of(out), "op-deadline", opts);
      } catch (const col::collective_error&) {
        // Rank 2 comes after the root gave up: any error will do.
        log.expect(rank == 2, "rank 1 came in time and failed");
      }
    }
    std::this_thread::sleep_for(1800ms - (rank == 2 ? 1300ms : 0ms));
    col::destroy_collective_group("op-deadline");
  });
  test::check_ranks(results);
}

TEST_CASE("a transfer half through when its Gloo group's other op reaches "
          "its deadline fails as aborted by that timeout") {
  // The watchdog wakes the backend's own half-done transfers, which Gloo
  // leaves asleep. Before: the woken send reported backend_error ("the
  // wait was woken by an abort"), which could become the group's broken
  // reason in place of the timeout. 1 GiB takes 0.6 s or more here (Gloo
  // moves 1.2-1.6 GB/s); the barrier's watchdog rings at 0.25 s.
  auto store = col::make_in_process_store();
  std::vector<std::byte> big(size_t{1} << 30);
  std::vector<std::byte> landing(size_t{1} << 30);
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "gloo", "half-through",
                               test::group_options(store, 20s));
    auto view = [](std::vector<std::byte>& v) {
      return col::tensor_view{v.data(), col::dtype::uint8, v.size()};
    };
    if (rank == 0) {
      col::send_options so;
      so.tag = 9;
      auto sending = col::send_async(view(big), 1, "half-through", so);
      std::this_thread::sleep_for(100ms);
      log.expect(!sending.ready(), "the message was through within 100 ms");
      col::barrier_options bo;
      bo.timeout = 100ms; // rank 1 never joins it
      expect_error(log, "barrier", col::errc::timeout,
                   {"not finished within 100 ms"},
                   [&] { col::barrier("half-through", bo); });
      auto err = sending.wait();
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
      // A sanitizer build's network thread may finish the message before
      // it lets go of the failed connections.
      if (!err) return col::destroy_collective_group("half-through");
#endif
      expect_error_of(log, "send", err, col::errc::aborted,
                      {"another op of this rank's group timed out"});
    } else {
      col::recv_options ro;
      ro.tag = 9;
      try {
        col::recv(view(landing), 0, "half-through", ro);
        log.fail("the recv got a message rank 0 failed to send");
      } catch (const col::collective_error& e) {
        log.expect(e.code() == col::errc::peer_lost ||
                     e.code() == col::errc::timeout,
                   std::string{"recv: "} + e.what());
      }
    }
    col::destroy_collective_group("half-through");
  });
  test::check_ranks(results);
}

TEST_CASE("a small allreduce with the automatic algorithm runs Gloo's "
          "legacy algorithm as docs/algorithms.md says") {
  // Formation shrank the connections' timeout to the formation's time left,
  // and the automatic choice takes a legacy algorithm only for ops whose
  // timeout is the connections': it never did. A legacy allreduce waits
  // in Gloo's bound buffers (tcp/buffer.cc), the options API in unbound
  // ones (tcp/unbound_buffer.cc); a peer that stays away shows which.
  run_short(
    2, "auto-legacy",
    [&](int rank, rank_log& log) {
      auto x = test::make_tensor(col::dtype::float32, 16);
      col::allreduce(x, "auto-legacy"); // both: builds the cached instance
      if (rank == 1) return;
      auto e = test::expect_throw(log, "allreduce without the peer",
                                  [&] { col::allreduce(x, "auto-legacy"); });
      std::string text = e.what();
      log.expect(text.find("tcp/buffer.cc") != std::string::npos,
                 "not Gloo's legacy allreduce: " + text);
    },
    500ms);
}

// -- values that must be refused ---------------------------------------------

TEST_CASE("a reduce op or algorithm outside its enum is refused and the "
          "group stays usable") {
  run_short(2, "bad-enum", [](int rank, rank_log& log) {
    std::vector<float> x(4, 1.0f);
    col::allreduce_options opts;
    opts.op = static_cast<col::reduce_op>(77);
    expect_error(log, "allreduce op 77", col::errc::invalid_argument,
                 {"reduce op 77"},
                 [&] { col::allreduce(col::view_of(x), "bad-enum", opts); });
    col::reduce_options ropts;
    ropts.op = static_cast<col::reduce_op>(77);
    expect_error(log, "reduce op 77", col::errc::invalid_argument,
                 {"reduce op 77"},
                 [&] { col::reduce(col::view_of(x), 0, "bad-enum", ropts); });
    col::reduce_scatter_options rsopts;
    rsopts.op = static_cast<col::reduce_op>(77);
    std::vector<float> half(2);
    expect_error(log, "reduce_scatter op 77", col::errc::invalid_argument,
                 {"reduce op 77"}, [&] {
                   col::reduce_scatter(col::view_of(x), col::view_of(half),
                                       "bad-enum", rsopts);
                 });
    col::allreduce_options aopts;
    aopts.algorithm = static_cast<col::allreduce_algorithm>(42);
    expect_error(log, "algorithm 42", col::errc::invalid_argument,
                 {"algorithm 42"},
                 [&] { col::allreduce(col::view_of(x), "bad-enum", aopts); });
    expect_usable(log, "bad-enum", 2, rank);
  });
}

TEST_CASE("counts whose sum wraps around are refused and the group stays "
          "usable") {
  run_short(2, "wrapping-counts", [](int rank, rank_log& log) {
    std::vector<uint8_t> in(8);
    std::vector<uint8_t> out(16);
    col::allgatherv_options gopts;
    gopts.counts = {std::numeric_limits<size_t>::max(), 8};
    expect_error(log, "allgatherv", col::errc::invalid_argument,
                 {"does not fit"}, [&] {
                   col::allgatherv(col::view_of(in), col::view_of(out),
                                   "wrapping-counts", gopts);
                 });
    col::alltoallv_options vopts;
    vopts.send_counts = {std::numeric_limits<size_t>::max() - 3, 12};
    vopts.recv_counts = {4, 4};
    expect_error(log, "alltoallv", col::errc::invalid_argument,
                 {"send_counts", "does not fit"}, [&] {
                   col::alltoallv(col::view_of(in), col::view_of(out),
                                  "wrapping-counts", vopts);
                 });
    // Sums that fit in elements but not in bytes: 2^62 float64 elements.
    std::vector<double> d_in(1);
    std::vector<double> d_out(2);
    col::allgatherv_options bytes_wrap;
    bytes_wrap.counts = {size_t{1} << 62, 1};
    expect_error(log, "allgatherv bytes", col::errc::invalid_argument,
                 {"do not fit"}, [&] {
                   col::allgatherv(col::view_of(d_in), col::view_of(d_out),
                                   "wrapping-counts", bytes_wrap);
                 });
    expect_usable(log, "wrapping-counts", 2, rank);
  });
}

TEST_CASE("malformed views are refused instead of moving nothing") {
  run_short(2, "malformed-views", [](int rank, rank_log& log) {
    std::vector<float> buf(16, 1.0f);
    struct bad_view {
      const char* what;
      col::tensor_view view;
      const char* says;
    };
    std::vector<bad_view> cases{
      {"count (size_t)-5",
       col::tensor_view{buf.data(), col::dtype::float32, size_t(-5)},
       "INT64_MAX"},
      {"shape {-3, 4}",
       col::tensor_view{buf.data(), col::dtype::float32,
                        col::shape_type{-3, 4}},
       "negative extent"},
      {"shape {2^32, 2^32}",
       col::tensor_view{buf.data(), col::dtype::float32,
                        col::shape_type{int64_t{1} << 32, int64_t{1} << 32}},
       "more elements than size_t"},
      {"float64 x 2^61",
       col::tensor_view{buf.data(), col::dtype::float64, size_t{1} << 61},
       "more bytes than size_t"},
      {"dtype 77",
       col::tensor_view{buf.data(), static_cast<col::dtype>(77), size_t{4}},
       "dtype 77"},
    };
    for (auto& c : cases) {
      log.expect(c.view.numel() == 0, std::string{c.what} + " has elements");
      expect_error(log, std::string{"allreduce on "} + c.what,
                   col::errc::invalid_argument, {"malformed", c.says},
                   [&] { col::allreduce(c.view, "malformed-views"); });
      expect_error(log, std::string{"broadcast from "} + c.what,
                   col::errc::invalid_argument, {"malformed"},
                   [&] { col::broadcast(c.view, 0, "malformed-views"); });
      expect_error(log, std::string{"send of "} + c.what,
                   col::errc::invalid_argument, {"malformed"},
                   [&] { col::send(c.view, 1 - rank, "malformed-views"); });
    }
    check_error(col::errc::invalid_argument, {"negative extent"}, [] {
      auto t = col::tensor::empty(col::dtype::float32, {-3, 4});
      if (!t) throw col::collective_error{t.error()};
    });
    expect_usable(log, "malformed-views", 2, rank);
  });
}

// -- float results identical on every rank -----------------------------------

TEST_CASE("float allreduce gives bitwise the same result on every rank") {
  // {1, 1e8, -1e8} sums to 0 or 1 in float32 depending on the order.
  for (int world : {3, 4, 5, 7}) {
    for (size_t count :
         {size_t{3}, size_t{4096}, size_t{60000}, size_t{300000}}) {
      INFO("world " << world << ", " << count << " float32");
      std::vector<std::vector<float>> results(static_cast<size_t>(world));
      run_short(world, "identical", [&](int rank, rank_log& log) {
        std::vector<float> x(count);
        const float values[] = {1.0f, 1e8f, -1e8f, 3.0f, -7e7f, 0.25f, 5e7f};
        for (size_t i = 0; i < count; ++i)
          x[i] = values[(static_cast<size_t>(rank) + i) % 7];
        try {
          col::allreduce(col::view_of(x), "identical");
        } catch (const std::exception& e) {
          log.fail(e.what());
        }
        results[static_cast<size_t>(rank)] = std::move(x);
      });
      for (int r = 1; r < world; ++r)
        CHECK(std::memcmp(results[0].data(), results[r].data(),
                          count * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("int64 allgather keeps its values when ranks agree") {
  // A control for the tests above: agreeing ranks move their bytes exactly.
  run_short(3, "control", [](int rank, rank_log& log) {
    auto in = iota_values(3, 10 * rank);
    std::vector<int64_t> out(9);
    col::allgather(col::view_of(in), col::view_of(out), "control");
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 3; ++i)
        log.expect(out[3 * r + i] == 10 * r + i, "allgather value");
  });
}

TEST_CASE("a group destroyed and formed again on the same store forms when "
          "its ranks come back at different times - on every CPU backend") {
  // The first formation leaves its keys in the store (addresses, host
  // identities, confirmations, the name of a shm segment already
  // unlinked); the second must read only its own. Either rank comes late.
  for (std::string backend : {"gloo", "shm", "auto"}) {
    for (int late : {0, 1}) {
      CAPTURE(backend);
      CAPTURE(late);
      auto name = "formed-again-" + backend + "-" + std::to_string(late);
      auto store = col::make_in_process_store();
      auto results = test::run_threads(2, [&](int rank, rank_log& log) {
        for (int round = 0; round < 3; ++round) {
          if (rank == late && round > 0) std::this_thread::sleep_for(300ms);
          col::init_collective_group(2, rank, backend, name,
                                     test::group_options(store, 10s));
          expect_usable(log, name, 2, rank);
          col::destroy_collective_group(name);
        }
      });
      test::check_ranks(results);
      CHECK(test::shm_leftovers(name).empty());
    }
  }
}

TEST_CASE("groups given one store form at the same time without taking "
          "each other's ranks - on every CPU backend") {
  // init_options::store is the user's: nothing in the keys told two groups'
  // formations apart, so a follower could join the other group's.
  for (std::string backend : {"gloo", "shm", "auto"}) {
    CAPTURE(backend);
    auto store = col::make_in_process_store();
    for (int round = 0; round < 3; ++round) {
      auto results = test::run_threads(4, [&](int thread, rank_log& log) {
        auto name = "one-store-" + backend + "-" + std::to_string(thread / 2);
        int rank = thread % 2;
        // Both rank 0s publish their formations first: a follower that
        // could read the other group's would, whichever wrote last.
        if (rank == 1) std::this_thread::sleep_for(300ms);
        col::init_collective_group(2, rank, backend, name,
                                   test::group_options(store, 10s));
        expect_usable(log, name, 2, rank);
        col::destroy_collective_group(name);
      });
      test::check_ranks(results);
    }
  }
}

TEST_CASE("ranks given different world sizes for one group fail formation "
          "naming the sizes - on every CPU backend") {
  // Before: the shm group formed and allreduce returned wrong sums as
  // success; a rank given the smaller size sized shared arrays for it.
  for (std::string backend : {"gloo", "shm", "auto"}) {
    for (int odd : {0, 1, 2}) {
      CAPTURE(backend);
      CAPTURE(odd);
      auto name = "sizes-" + backend + "-" + std::to_string(odd);
      auto store = col::make_in_process_store();
      auto results = test::run_threads(3, [&](int rank, rank_log& log) {
        int world = rank == odd ? 4 : 3;
        // A rank told it is in a group of 4 waits for a rank 3 that never
        // comes only if rank 0 has not refused it first: keep it short.
        expect_error(log, "init", col::errc::invalid_argument,
                     {"disagree on its world size", name}, [&] {
                       col::init_collective_group(
                         world, rank, backend, name,
                         test::group_options(store, 5s));
                     });
      });
      test::check_ranks(results);
      CHECK(test::shm_leftovers(name).empty());
    }
  }
}

TEST_CASE("ranks asking for different backends for one group fail formation "
          "naming the backends - not a timeout blaming a running peer") {
  // Before: each backend waited for its peers under keys of its own after
  // the formation round, and every rank timed out naming another rank as
  // "did not join" although all of them had come.
  using pair = std::pair<std::string, std::string>;
  for (auto [usual, odd_one] :
       {pair{"auto", "shm"}, pair{"gloo", "shm"}, pair{"gloo", "auto"}}) {
    for (int odd : {0, 2}) {
      CAPTURE(usual);
      CAPTURE(odd_one);
      CAPTURE(odd);
      auto name =
        "backends-" + usual + "-" + odd_one + "-" + std::to_string(odd);
      auto store = col::make_in_process_store();
      auto results = test::run_threads(3, [&](int rank, rank_log& log) {
        auto backend = rank == odd ? odd_one : usual;
        auto rank0 = odd == 0 ? odd_one : usual;
        auto other = odd == 0 ? usual : odd_one;
        expect_error(log, "init", col::errc::invalid_argument,
                     {"disagree on its backend", "'" + rank0 + "'",
                      "'" + other + "'", name},
                     [&] {
                       col::init_collective_group(
                         3, rank, backend, name,
                         test::group_options(store, 10s));
                     });
      });
      test::check_ranks(results);
      CHECK(test::shm_leftovers(name).empty());
    }
  }
}

TEST_CASE("ranks that joined a formation rank 0 gave up on fail at once "
          "naming the rank that never came - a later one names it too") {
  // Rank 2 never comes; rank 0 gives up after 1 s. Before: rank 1, which
  // had joined, waited for its own 5 s deadline; a rank that came after
  // rank 0 had given up blamed rank 0 ("rank 0 never joined").
  auto store = col::make_in_process_store();
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    if (rank == 2) return;
    auto start = std::chrono::steady_clock::now();
    expect_error(log, "init", col::errc::timeout, {"rank 2 never joined"}, [&] {
      col::init_collective_group(
        3, rank, "gloo", "given-up",
        test::group_options(store, rank == 0 ? 1s : 5s));
    });
    auto took = std::chrono::steady_clock::now() - start;
    if (rank == 1) {
      log.expect(took < 3s, "rank 1 waited for its own deadline");
      // Rank 1 again, after rank 0 gave up: rank 0's reason, not rank 0.
      expect_error(log, "late init", col::errc::timeout,
                   {"ended at rank 0's deadline", "rank 2 never joined"}, [&] {
                     col::init_collective_group(
                       3, 1, "gloo", "given-up",
                       test::group_options(store, 500ms));
                   });
    }
  });
  test::check_ranks(results);
}

TEST_CASE("a follower that timed out and tries again while rank 0 still "
          "waits is admitted with its new token") {
  // Rank 1 gives up after 300 ms and tries again at once; rank 2 comes at
  // 1 s. Before: rank 0 admitted the token rank 1 had joined with first,
  // which nobody waited for any more: rank 1's second try timed out
  // naming rank 2, and rank 0 waited in Gloo for rank 1.
  auto store = col::make_in_process_store();
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    if (rank == 2) std::this_thread::sleep_for(1s);
    if (rank == 1)
      expect_error(log, "first init", col::errc::timeout, {"retried"}, [&] {
        col::init_collective_group(3, 1, "gloo", "retried",
                                   test::group_options(store, 300ms));
      });
    col::init_collective_group(3, rank, "gloo", "retried",
                               test::group_options(store, 10s));
    expect_usable(log, "retried", 3, rank);
    col::destroy_collective_group("retried");
  });
  test::check_ranks(results);
}

TEST_CASE("a Gloo rank that joined the formation and went no further is the "
          "one rank its peers name - not the ranks above it") {
  // Gloo reads the hostname keys of the lower ranks first. Before: rank 2
  // waited on rank 1's key without meeting its peers first, so rank 0
  // named ranks [1, 2] as never joined although rank 2 was there.
  auto store = col::make_in_process_store();
  auto fake = test::join_as_fake(store, "stalled-gloo", 1, 3, "gloo", 10s);
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    if (rank == 1) return; // the stand-in
    auto err = test::expect_throw(log, "init", [&] {
                 col::init_collective_group(3, rank, "gloo", "stalled-gloo",
                                            test::group_options(store, 2s));
               }).error();
    auto text = col::render(err);
    log.expect(text.find("[1]") != std::string::npos &&
                 text.find("[1, 2]") == std::string::npos &&
                 text.find("rank_1") == std::string::npos,
               "rank " + std::to_string(rank) + ": " + text);
  });
  test::check_ranks(results);
  fake.wait();
}

TEST_CASE("a Gloo rank whose hostname does not resolve fails its peers' "
          "formation at once, naming it") {
  // Before: it failed alone after the formation round, and its peers
  // waited until their deadline. Rank 1 comes 1 s late, once its peers
  // joined: a rank that comes after a refusal cannot tell it from an
  // earlier attempt's and waits for its deadline, and a refusal made
  // before rank 0 published its formation reaches nobody.
  auto store = col::make_in_process_store();
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    auto opts = test::group_options(store, 20s);
    if (rank == 1) {
      opts.hostname = "no-such-host.invalid";
      std::this_thread::sleep_for(1s);
    }
    auto start = std::chrono::steady_clock::now();
    auto err =
      test::expect_throw(log, "init", [&] {
        col::init_collective_group(3, rank, "gloo", "unresolved", opts);
      }).error();
    auto took = std::chrono::steady_clock::now() - start;
    auto text = col::render(err);
    log.expect(text.find("no-such-host.invalid") != std::string::npos, text);
    if (rank != 1) log.expect(text.find("rank 1") != std::string::npos, text);
    log.expect(took < 10s, "rank " + std::to_string(rank) +
                             " waited for its deadline: " + text);
  });
  test::check_ranks(results);
}

namespace {

/// Forms `name` of `world` ranks over `store` with rank 0 500 ms after the
/// others (which read whatever an earlier formation left first), checks it
/// works and destroys it.
void forms_with_rank_0_last(const col::rendezvous_store_ptr& store,
                            const std::string& backend, const std::string& name,
                            int world) {
  auto results = test::run_threads(world, [&](int rank, rank_log& log) {
    if (rank == 0) std::this_thread::sleep_for(500ms);
    col::init_collective_group(world, rank, backend, name,
                               test::group_options(store, 10s));
    expect_usable(log, name, world, rank);
    col::destroy_collective_group(name);
  });
  test::check_ranks(results);
}

} // namespace

TEST_CASE("a group formed again with another world size on the same store "
          "forms even when its followers come first") {
  // The current formation's name outlives the group: a follower that read
  // the earlier formation of size 2 must wait for rank 0's new one instead
  // of refusing at once.
  for (std::string backend : {"gloo", "shm"}) {
    CAPTURE(backend);
    auto name = "resized-" + backend;
    auto store = col::make_in_process_store();
    auto first = test::run_threads(2, [&](int rank, rank_log& log) {
      col::init_collective_group(2, rank, backend, name,
                                 test::group_options(store, 10s));
      expect_usable(log, name, 2, rank);
      col::destroy_collective_group(name);
    });
    test::check_ranks(first);
    forms_with_rank_0_last(store, backend, name, 3);
  }
}

TEST_CASE("a group formed again after a refused formation forms even when "
          "its follower comes first") {
  // The refusal of the first formation stays in the store: the follower of
  // the second must not take it for its own.
  for (std::string backend : {"gloo", "shm"}) {
    CAPTURE(backend);
    auto name = "refused-then-" + backend;
    auto store = col::make_in_process_store();
    auto first = test::run_threads(2, [&](int rank, rank_log& log) {
      expect_error(log, "init", col::errc::invalid_argument,
                   {"disagree on its world size"}, [&] {
                     col::init_collective_group(rank == 0 ? 2 : 3, rank,
                                                backend, name,
                                                test::group_options(store, 5s));
                   });
    });
    test::check_ranks(first);
    forms_with_rank_0_last(store, backend, name, 2);
  }
}

namespace {

/// Three ranks of `name` over `store`: `refusing` asks for an unknown backend
/// once the others wait in formation (rank 0 publishes its formation at once, a
/// follower looks at once), the others must fail within 5 s, not at their
/// 10 s deadline, with invalid_argument naming the group, `expected` and
/// the refusing rank's reason.
void one_rank_refuses_alone(const col::rendezvous_store_ptr& store,
                            const std::string& backend, const std::string& name,
                            int refusing, const std::string& expected) {
  std::latch others_started{2};
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    if (rank == refusing) {
      others_started.wait();
      std::this_thread::sleep_for(1s);
      expect_error(log, "the refusing rank", col::errc::invalid_argument,
                   {"unknown backend 'bogus'"}, [&] {
                     col::init_collective_group(
                       3, rank, "bogus", name, test::group_options(store, 10s));
                   });
      return;
    }
    auto start = std::chrono::steady_clock::now();
    others_started.count_down();
    expect_error(log, "rank " + std::to_string(rank),
                 col::errc::invalid_argument,
                 {name, expected, "unknown backend 'bogus'"}, [&] {
                   col::init_collective_group(3, rank, backend, name,
                                              test::group_options(store, 10s));
                 });
    log.expect(std::chrono::steady_clock::now() - start < 5s,
               "waited for the deadline");
  });
  test::check_ranks(results);
  CHECK(test::shm_leftovers(name).empty());
}

} // namespace

TEST_CASE("ranks waiting for rank 0 learn at once that it refused the group "
          "on its own and a later attempt still forms") {
  // Rank 0 refuses before the formation round (here an unknown backend; on
  // a GPU machine also an NCCL device it lacks). Before: it published
  // nothing, and the others failed at their deadline with "rank 0 never
  // joined".
  for (std::string backend : {"gloo", "shm"}) {
    CAPTURE(backend);
    auto name = "refused-alone-" + backend;
    auto store = col::make_in_process_store();
    one_rank_refuses_alone(store, backend, name, 0, "rank 0 could not create");
    // One that comes after the refusal cannot tell it from one left by an
    // earlier attempt: it waits for a formation, and quotes it at the end.
    auto late = test::run_threads(1, [&](int, rank_log& log) {
      expect_error(log, "late follower", col::errc::invalid_argument,
                   {"rank 0 could not create the group", "no other came"}, [&] {
                     col::init_collective_group(2, 1, backend, name,
                                                test::group_options(store, 1s));
                   });
    });
    test::check_ranks(late);
    // And a corrected attempt forms, its follower coming first.
    forms_with_rank_0_last(store, backend, name, 2);
  }
}

TEST_CASE("ranks forming a group learn at once that another rank refused it "
          "on its own") {
  // Rank 1 refuses alone after rank 0 published its formation. Before:
  // rank 0 and rank 2 waited for it until their deadline ("rank 1 never
  // joined").
  for (std::string backend : {"gloo", "shm"}) {
    CAPTURE(backend);
    auto name = "follower-refused-" + backend;
    auto store = col::make_in_process_store();
    one_rank_refuses_alone(store, backend, name, 1, "rank 1 could not create");
  }
}

TEST_CASE("a per-op timeout longer than the group's holds for a small "
          "allreduce: a rank 3 s late within a 6 s op timeout is in time") {
  // The group's 2 s would have ended the op; small allreduces run Gloo's
  // legacy algorithms, which wait with the group's timeout.
  auto store = col::make_in_process_store();
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "gloo", "long-op",
                               test::group_options(store, 2s));
    col::allreduce_options opts;
    opts.timeout = 6s;
    // The first op in time (it sets up what the algorithm keeps), the
    // second with rank 1 late.
    for (int round = 0; round < 2; ++round) {
      if (rank == 1 && round == 1) std::this_thread::sleep_for(3s);
      std::vector<float> x(64, float(rank + 1));
      col::allreduce(col::view_of(x), "long-op", opts);
      log.expect(x[0] == 3.0f && x[63] == 3.0f,
                 "allreduce gave " + std::to_string(x[0]));
    }
    col::destroy_collective_group("long-op");
  });
  test::check_ranks(results);
}

TEST_CASE("a handle kept from get_group refuses every op after "
          "destroy_collective_group") {
  auto store = col::make_in_process_store();
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "gloo", "kept-handle",
                               test::group_options(store, 10s));
    auto kept = col::get_group("kept-handle");
    col::destroy_collective_group("kept-handle");
    log.expect(kept->closed(), "handle not marked closed");
    std::vector<float> x(4, 1.0f);
    auto err = kept->allreduce(col::view_of(x), col::view_of(x)).wait();
    log.expect(col::code_of(err) == col::errc::aborted &&
                 col::render(err).find("destroyed") != std::string::npos,
               "allreduce on a destroyed group: " + col::render(err));
    log.expect(x[0] == 1.0f, "allreduce on a destroyed group wrote data");
  });
  test::check_ranks(results);
}

TEST_CASE("a peer or root given both as argument and in the options must "
          "agree") {
  run_short(2, "given-twice", [](int rank, rank_log& log) {
    std::vector<float> x(4, float(rank));
    col::send_options sopts;
    sopts.peer = 0;
    // Named like every other refusal: group, op and this rank.
    expect_error(
      log, "send", col::errc::invalid_argument,
      {"group 'given-twice' send rank " + std::to_string(rank) + "/2",
       "dst_rank 1 conflicts with options.peer 0"},
      [&] { col::send(col::view_of(x), 1, "given-twice", sopts); });
    // An unknown name is unknown_group, as for every op.
    expect_error(log, "send", col::errc::unknown_group, {"no-such-group"}, [&] {
      col::send(col::view_of(x), 1, "no-such-group", sopts);
    });
    col::broadcast_options bopts;
    bopts.root = 1;
    expect_error(log, "broadcast", col::errc::invalid_argument,
                 {"src_rank 0 conflicts with options.root 1"}, [&] {
                   col::broadcast(col::view_of(x), 0, "given-twice", bopts);
                 });
    col::reduce_options ropts;
    ropts.root = 1;
    expect_error(log, "reduce", col::errc::invalid_argument,
                 {"dst_rank 0 conflicts with options.root 1"}, [&] {
                   col::reduce(col::view_of(x), 0, "given-twice", ropts);
                 });
    // The same value twice is no conflict.
    bopts.root = 1;
    col::broadcast(col::view_of(x), 1, "given-twice", bopts);
    log.expect(x[0] == 1.0f, "broadcast from rank 1 did not arrive");
    expect_usable(log, "given-twice", 2, rank);
  });
}

TEST_CASE("absurd world sizes are refused up front") {
  check_error(col::errc::invalid_argument, {"world size 100000", "limit"}, [] {
    col::member_scope scope;
    col::init_collective_group(
      100000, 0, "gloo", "huge",
      test::group_options(col::make_in_process_store(), 2s));
  });
}

TEST_CASE("a lost connection names the rank behind it") {
  auto store = col::make_in_process_store();
  std::latch started{2};
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "gloo", "lost-peer",
                               test::group_options(store, 20s));
    auto g = col::get_group("lost-peer");
    if (rank == 1) {
      started.arrive_and_wait();
      std::this_thread::sleep_for(200ms);
      g->abort("the test lets rank 1 go"); // closes its connections
      return;
    }
    std::vector<float> x(1 << 20, 1.0f);
    started.arrive_and_wait();
    auto err = g->allreduce(col::view_of(x), col::view_of(x)).wait();
    log.expect(col::code_of(err) == col::errc::peer_lost,
               "expected peer_lost: " + col::render(err));
    log.expect(col::render(err).find("connection to rank 1 (") !=
                 std::string::npos,
               "peer_lost does not name rank 1: " + col::render(err));
  });
  test::check_ranks(results);
}

TEST_CASE("int64 avg is exact even when the sum does not fit in int64") {
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  constexpr int64_t min = std::numeric_limits<int64_t>::min();
  const std::vector<std::vector<int64_t>> inputs{
    {max, max - 1, min, -7, max, min + 1},
    {max, max - 1, min, 9, max - 2, min + 3},
    {max, 2, min, 5, -1, max},
  };
  for (int world : {2, 3}) {
    INFO("world " << world);
    // Expected: the exact sum / world, truncated toward zero.
    std::vector<int64_t> expected(6);
    for (size_t i = 0; i < 6; ++i) {
      __int128 sum = 0;
      for (int r = 0; r < world; ++r)
        sum += inputs[r][i];
      expected[i] = static_cast<int64_t>(sum / world);
    }
    run_short(world, "exact-avg", [&](int rank, rank_log& log) {
      // 6 elements (legacy path) and 6 x 20000 (options API ring).
      for (size_t repeat : {size_t{1}, size_t{20000}}) {
        std::vector<int64_t> x;
        std::vector<int64_t> want;
        for (size_t k = 0; k < repeat; ++k) {
          x.insert(x.end(), inputs[rank].begin(), inputs[rank].end());
          want.insert(want.end(), expected.begin(), expected.end());
        }
        auto what = " of " + std::to_string(x.size()) + " int64";
        col::allreduce_options aopts;
        aopts.op = col::reduce_op::avg;
        auto a = x;
        col::allreduce(col::view_of(a), "exact-avg", aopts);
        log.expect(a == want, "allreduce avg" + what);
        col::reduce_options ropts;
        ropts.op = col::reduce_op::avg;
        ropts.root = world - 1;
        auto b = x;
        col::reduce(col::view_of(b), world - 1, "exact-avg", ropts);
        if (rank == world - 1) log.expect(b == want, "reduce avg" + what);
        // reduce_scatter: every rank contributes world blocks of x.
        std::vector<int64_t> blocks;
        for (int r = 0; r < world; ++r)
          blocks.insert(blocks.end(), x.begin(), x.end());
        std::vector<int64_t> mine(x.size());
        col::reduce_scatter_options sopts;
        sopts.op = col::reduce_op::avg;
        col::reduce_scatter(col::view_of(blocks), col::view_of(mine),
                            "exact-avg", sopts);
        log.expect(mine == want, "reduce_scatter avg" + what);
      }
    });
  }
}
