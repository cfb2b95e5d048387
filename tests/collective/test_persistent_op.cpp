// Persistent ops (group::prepare_*): every collective, and send and recv,
// run and started many times on the same buffers, against the group's one-off
// call on the same inputs; arguments refused once at preparation; overlapping
// starts, mismatched ranks and destroyed groups. Built for Gloo and for shm.
#include <atomic>
#include <latch>
#include <numeric>
#include <thread>

#include <pthread.h>
#include <sched.h>

#include "test_support.hpp"

namespace col = caf_collective;
using test::rank_log;

namespace {

constexpr size_t block = 5;

int64_t first_of(const col::tensor& x) {
  return static_cast<const int64_t*>(x.data())[0];
}
constexpr int rounds = 4;

/// One collective in its persistent and its one-off form over the same
/// input and two outputs of the same size.
struct op_case {
  const char* name;
  size_t in_count;
  size_t out_count;
  bool result_at_root_only;
  std::function<caf::expected<col::persistent_op>(
    col::group&, const col::tensor_view&, const col::tensor_view&)>
    prepare;
  std::function<col::work(col::group&, const col::tensor_view&,
                          const col::tensor_view&)>
    once;
};

/// What rank r sends to rank j in the alltoallv case.
size_t alltoallv_count(int r, int j) {
  return size_t((r + 2 * j) % 3 + 1);
}

std::vector<op_case> cases_of(int world, int rank) {
  auto w = size_t(world);
  int root = world - 1;
  std::vector<op_case> cases;
  col::broadcast_options bopts;
  bopts.root = root;
  cases.push_back({"broadcast", block, block, false,
                   [=](auto& g, auto& in, auto& out) {
                     return g.prepare_broadcast(in, out, bopts);
                   },
                   [=](auto& g, auto& in, auto& out) {
                     return g.broadcast(in, out, bopts);
                   }});
  col::reduce_options ropts;
  ropts.root = root;
  cases.push_back(
    {"reduce", block, block, true,
     [=](auto& g, auto& in, auto& out) {
       return g.prepare_reduce(in, out, ropts);
     },
     [=](auto& g, auto& in, auto& out) { return g.reduce(in, out, ropts); }});
  col::allreduce_options aopts;
  aopts.op = col::reduce_op::max;
  cases.push_back({"allreduce", block, block, false,
                   [=](auto& g, auto& in, auto& out) {
                     return g.prepare_allreduce(in, out, aopts);
                   },
                   [=](auto& g, auto& in, auto& out) {
                     return g.allreduce(in, out, aopts);
                   }});
  cases.push_back(
    {"allgather", block, block * w, false,
     [](auto& g, auto& in, auto& out) { return g.prepare_allgather(in, out); },
     [](auto& g, auto& in, auto& out) { return g.allgather(in, out); }});
  col::allgatherv_options vopts;
  for (int r = 0; r < world; ++r)
    vopts.counts.push_back(size_t(r + 1));
  cases.push_back(
    {"allgatherv", size_t(rank + 1),
     std::accumulate(vopts.counts.begin(), vopts.counts.end(), size_t{0}),
     false,
     [=](auto& g, auto& in, auto& out) {
       return g.prepare_allgatherv(in, out, vopts);
     },
     [=](auto& g, auto& in, auto& out) {
       return g.allgatherv(in, out, vopts);
     }});
  col::gather_options gopts;
  gopts.root = root;
  cases.push_back(
    {"gather", block, block * w, true,
     [=](auto& g, auto& in, auto& out) {
       return g.prepare_gather(in, out, gopts);
     },
     [=](auto& g, auto& in, auto& out) { return g.gather(in, out, gopts); }});
  col::scatter_options sopts;
  sopts.root = root;
  cases.push_back(
    {"scatter", block * w, block, false,
     [=](auto& g, auto& in, auto& out) {
       return g.prepare_scatter(in, out, sopts);
     },
     [=](auto& g, auto& in, auto& out) { return g.scatter(in, out, sopts); }});
  col::reduce_scatter_options rsopts;
  rsopts.op = col::reduce_op::sum;
  cases.push_back({"reduce_scatter", block * w, block, false,
                   [=](auto& g, auto& in, auto& out) {
                     return g.prepare_reduce_scatter(in, out, rsopts);
                   },
                   [=](auto& g, auto& in, auto& out) {
                     return g.reduce_scatter(in, out, rsopts);
                   }});
  cases.push_back(
    {"alltoall", block * w, block * w, false,
     [](auto& g, auto& in, auto& out) { return g.prepare_alltoall(in, out); },
     [](auto& g, auto& in, auto& out) { return g.alltoall(in, out); }});
  col::alltoallv_options avopts;
  for (int j = 0; j < world; ++j) {
    avopts.send_counts.push_back(alltoallv_count(rank, j));
    avopts.recv_counts.push_back(alltoallv_count(j, rank));
  }
  auto sum = [](const std::vector<size_t>& xs) {
    return std::accumulate(xs.begin(), xs.end(), size_t{0});
  };
  cases.push_back({"alltoallv", sum(avopts.send_counts),
                   sum(avopts.recv_counts), false,
                   [=](auto& g, auto& in, auto& out) {
                     return g.prepare_alltoallv(in, out, avopts);
                   },
                   [=](auto& g, auto& in, auto& out) {
                     return g.alltoallv(in, out, avopts);
                   }});
  return cases;
}

/// Runs every case `rounds` times: new input contents each round, the
/// persistent op (run() on even rounds, start() on odd ones), then the
/// one-off call on the same input; both outputs must agree.
void persistent_against_one_off(int world) {
  auto name = "persistent-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    auto g = col::get_group(name);
    for (auto& c : cases_of(world, rank)) {
      auto what = std::string{c.name} + " world " + std::to_string(world);
      auto in = test::make_tensor(col::dtype::int64, c.in_count);
      auto got = test::make_tensor(col::dtype::int64, c.out_count);
      auto want = test::make_tensor(col::dtype::int64, c.out_count);
      auto op = c.prepare(*g, in, got);
      if (!op) {
        log.fail(what + ": prepare failed: " + col::render(op.error()));
        continue;
      }
      log.expect(col::to_string(op->op()) == c.name,
                 what + ": the prepared op says it is " +
                   std::string{col::to_string(op->op())});
      for (int round = 0; round < rounds; ++round) {
        test::fill_pattern(in, rank, 0, uint64_t(round + 1));
        test::poison(got);
        test::poison(want);
        auto err = round % 2 == 0 ? op->run() : op->start().wait();
        if (err) {
          log.fail(what + " round " + std::to_string(round) + ": " +
                   col::render(err));
          continue;
        }
        if (auto once_err = c.once(*g, in, want).wait()) {
          log.fail(what + ": one-off call failed: " + col::render(once_err));
          continue;
        }
        if (!c.result_at_root_only || rank == world - 1)
          log.expect_equal(what + " round " + std::to_string(round), got, want);
      }
    }
    // A barrier moves nothing: it must only run as often as asked.
    auto barrier = g->prepare_barrier();
    log.expect(bool{barrier}, "prepare_barrier failed");
    for (int round = 0; barrier && round < rounds; ++round)
      log.expect(!barrier->run(), "persistent barrier failed");
  });
}

} // namespace

TEST_CASE("every persistent collective gives its one-off call's result, "
          "run after run, as its input changes") {
  for (int world : {1, 2, 3})
    persistent_against_one_off(world);
}

TEST_CASE("persistent send and recv carry each run's message, in order, and "
          "pair with the peer's one-off calls") {
  test::run_group(2, "persistent-p2p", [](int rank, rank_log& log) {
    auto g = col::get_group("persistent-p2p");
    auto peer = 1 - rank;
    col::send_options to_peer;
    to_peer.peer = peer;
    to_peer.tag = 7 + rank; // one tag per direction
    col::recv_options from_peer;
    from_peer.peer = peer;
    from_peer.tag = 7 + peer;
    auto out = test::make_tensor(col::dtype::int64, block);
    auto in = test::make_tensor(col::dtype::int64, block);
    auto send = g->prepare_send(out, to_peer);
    auto recv = g->prepare_recv(in, from_peer);
    if (!send || !recv) {
      log.fail("prepare failed: " +
               col::render(!send ? send.error() : recv.error()));
      return;
    }
    log.expect(send->op() == col::op_kind::send &&
                 recv->op() == col::op_kind::recv,
               "the prepared ops name the wrong kinds");
    auto values = [](const col::tensor& x) {
      auto p = static_cast<const int64_t*>(x.data());
      return std::vector<int64_t>(p, p + x.numel());
    };
    // Rank 0 sends a new message each round; rank 1 answers with every
    // element plus one.
    for (int round = 0; round < rounds; ++round) {
      auto what = "round " + std::to_string(round);
      auto go = [&](col::persistent_op& op) {
        return round % 2 == 0 ? op.run() : op.start().wait();
      };
      test::poison(in);
      if (rank == 0) {
        test::fill_pattern(out, rank, 0, uint64_t(round + 1));
        log.expect(!go(*send), what + ": send failed");
        log.expect(!go(*recv), what + ": recv failed");
        auto want = values(out);
        for (auto& x : want) // unsigned: the pattern spans all 64 bits
          x = int64_t(uint64_t(x) + 1);
        log.expect(values(in) == want, what + ": wrong answer");
      } else {
        log.expect(!go(*recv), what + ": recv failed");
        auto got = values(in);
        auto mine = static_cast<int64_t*>(out.data());
        for (size_t i = 0; i < got.size(); ++i)
          mine[i] = int64_t(uint64_t(got[i]) + 1);
        log.expect(!go(*send), what + ": send failed");
      }
    }
    // A persistent recv takes a one-off send of the same tag.
    if (rank == 0) {
      auto note = col::tensor::from_vector(std::vector<int64_t>{5, 4, 3, 2, 1});
      log.expect(!g->send(note, to_peer).wait(), "one-off send failed");
    } else {
      log.expect(!recv->run(), "persistent recv of a one-off send failed");
      log.expect(values(in) == std::vector<int64_t>{5, 4, 3, 2, 1},
                 "persistent recv of a one-off send: wrong message");
    }
    // Bad peers are refused at preparation, naming what is wrong.
    auto refused = [&](const std::string& what,
                       const caf::expected<col::persistent_op>& made,
                       std::initializer_list<std::string> needles) {
      log.expect(!made, what + " was prepared");
      if (!made)
        test::expect_error_of(log, what, made.error(),
                              col::errc::invalid_argument, needles);
    };
    col::send_options self;
    self.peer = rank;
    refused("a send to oneself", g->prepare_send(out, self),
            {"persistent-p2p", "send", "oneself"});
    col::recv_options far;
    far.peer = 5;
    refused("a recv from rank 5 of 2", g->prepare_recv(in, far),
            {"persistent-p2p", "recv", "source rank"});
    test::expect_usable(log, "persistent-p2p", 2, rank);
  });
}

TEST_CASE("a persistent op's bad arguments are refused once, at "
          "preparation, and the group stays usable") {
  test::run_group(2, "persistent-bad", [](int rank, rank_log& log) {
    auto g = col::get_group("persistent-bad");
    auto in = test::make_tensor(col::dtype::float32, 4);
    auto out = test::make_tensor(col::dtype::float32, 3);
    auto sized = g->prepare_allreduce(in, out);
    log.expect(!sized, "an allreduce with a 3-element output was prepared");
    if (!sized)
      test::expect_error_of(log, "size", sized.error(),
                            col::errc::invalid_argument,
                            {"persistent-bad", "allreduce"});
    col::broadcast_options bad_root;
    bad_root.root = 7;
    auto rooted = g->prepare_broadcast(in, in, bad_root);
    log.expect(!rooted, "a broadcast from root 7 of 2 was prepared");
    col::allreduce_options slow;
    slow.timeout = std::chrono::hours{24 * 365};
    auto timed = g->prepare_allreduce(in, in, slow);
    log.expect(!timed, "a timeout of a year was accepted");
    if (!timed)
      test::expect_error_of(log, "timeout", timed.error(),
                            col::errc::invalid_argument, {"timeout"});
    log.expect(bool{col::persistent_op{}.run()}, "an empty op did not fail");
    test::expect_usable(log, "persistent-bad", 2, rank);
  });
}

TEST_CASE("a persistent op refuses a start while its previous start is in "
          "flight, and interleaves with one-off ops in sequence order") {
  std::latch refused{1};
  test::run_group(2, "persistent-order", [&](int rank, rank_log& log) {
    auto g = col::get_group("persistent-order");
    auto x = col::tensor::from_vector(std::vector<int64_t>{rank + 1});
    auto op = g->prepare_allreduce(x, x);
    if (!op) {
      log.fail("prepare failed: " + col::render(op.error()));
      return;
    }
    if (rank == 0) {
      // Rank 1 has not arrived: the first start cannot finish yet.
      auto first = op->start();
      auto second = op->start();
      test::expect_error_of(
        log, "second start", second.wait(), col::errc::invalid_argument,
        {"persistent-order", "allreduce", "previous start"});
      log.expect(!first.ready(), "the first start finished without rank 1");
      refused.count_down();
      log.expect(!first.wait(), "the first start failed");
    } else {
      refused.wait();
      log.expect(!op->run(), "rank 1's run failed");
    }
    log.expect(first_of(x) == 3, "first allreduce: wrong sum");
    // A one-off op between two runs takes the sequence number between
    // theirs on every rank.
    auto y = col::tensor::from_vector(std::vector<int64_t>{10 * (rank + 1)});
    log.expect(!g->allreduce(y, y).wait(), "one-off allreduce failed");
    log.expect(!op->run(), "second run failed");
    log.expect(first_of(y) == 30, "one-off allreduce: wrong sum");
    log.expect(first_of(x) == 6, "second run: wrong sum");
    // Queued behind an op still in flight, run() waits its turn.
    auto pending = g->allreduce(y, y);
    log.expect(!op->run(), "run behind a queued op failed");
    log.expect(!pending.wait() && first_of(y) == 60 && first_of(x) == 12,
               "ops around a run behind a queued one: wrong sums");
  });
}

TEST_CASE("a persistent op whose peer calls something else fails on both "
          "ranks (shm: mismatch, Gloo: timeout), and a destroyed group "
          "refuses its runs") {
  // shm compares every rank's agreement key. Gloo cannot: the op times out
  // with the same advice, and since Gloo closes a pair on its first
  // timeout, the slower rank may see the connection close instead
  // (docs/api.md, "Ranks that disagree").
  bool shm = std::string_view{test::backend_under_test} == "shm";
  std::atomic<int> expected_codes{0};
  auto store = col::make_in_process_store();
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(
      2, rank, test::backend_under_test, "persistent-mismatch",
      test::group_options(store, std::chrono::seconds{2}));
    auto g = col::get_group("persistent-mismatch");
    auto four = test::make_tensor(col::dtype::float32, 4);
    auto five = test::make_tensor(col::dtype::float32, 5);
    auto& mine = rank == 0 ? four : five;
    auto op = g->prepare_allreduce(mine, mine);
    if (!op) {
      log.fail("prepare failed: " + col::render(op.error()));
      return;
    }
    auto err = op->run();
    auto code = col::code_of(err);
    if (shm || code != col::errc::peer_lost) {
      auto expected = shm ? col::errc::mismatch : col::errc::timeout;
      test::expect_error_of(log, "mismatched run", err, expected,
                            {"persistent-mismatch", "allreduce"});
      if (code == expected) ++expected_codes;
    }
    col::destroy_collective_group("persistent-mismatch");
    test::expect_error_of(log, "run after destroy", op->run(),
                          col::errc::aborted, {"destroyed"});
  });
  test::check_ranks(results);
  CHECK(expected_codes.load() >= (shm ? 2 : 1));
}

TEST_CASE("aborting the group ends a persistent op's blocking run that "
          "waits for a peer and the broken group refuses the next run") {
  // Rank 1 joins but never runs the op; another thread aborts rank 0's
  // group while its op waits on rank 0's own thread. Both backends wake it
  // at once: shm's abort wakes its waiters, Gloo's fails its connections
  // (before 2026-11-27 a Gloo run returned only at its deadline).
  std::latch rank0_done{1};
  test::run_group(
    2, "persistent-abort",
    [&](int rank, rank_log& log) {
      if (rank == 1) {
        rank0_done.wait();
        return;
      }
      auto g = col::get_group("persistent-abort");
      auto x = col::tensor::from_vector(std::vector<int64_t>{1, 2, 3});
      auto op = g->prepare_allreduce(x, x);
      if (!op) {
        log.fail("prepare failed: " + col::render(op.error()));
        rank0_done.count_down();
        return;
      }
      std::thread aborter{[g] {
        std::this_thread::sleep_for(std::chrono::milliseconds{200});
        g->abort("test stops the run");
      }};
      auto started = std::chrono::steady_clock::now();
      auto err = op->run();
      auto took = std::chrono::steady_clock::now() - started;
      aborter.join();
      test::expect_error_of(log, "aborted op", err, col::errc::aborted,
                            {"persistent-abort", "test stops the run"});
      log.expect(took < std::chrono::seconds{2},
                 "the op waited for its 3 s deadline instead of the abort");
      test::expect_error_of(log, "run on the broken group", op->run(),
                            col::errc::aborted, {"broken"});
      rank0_done.count_down();
    },
    std::chrono::seconds{3});
}

// Built into the shm binary only: in the Gloo one it would pass with no
// assertion.
#if defined(CAF_COLLECTIVE_TEST_BACKEND_IS_SHM)
TEST_CASE("shm: an abort reaches a run that waits on a CPU shared with a "
          "busy thread and with the missing rank") {
  // Everything on one CPU: the waiting rank, the rank that never comes
  // (it last ran there, so the waiter yields on every spin) and a busy
  // loop that takes each yielded time slice. A spin that counted only
  // iterations took seconds here and saw no abort meanwhile.
  cpu_set_t one_cpu;
  CPU_ZERO(&one_cpu);
  CPU_SET(sched_getcpu(), &one_cpu);
  auto pin = [&one_cpu] {
    pthread_setaffinity_np(pthread_self(), sizeof one_cpu, &one_cpu);
  };
  std::latch rank0_done{1};
  test::run_group(
    2, "persistent-crowded",
    [&](int rank, rank_log& log) {
      pin();
      if (rank == 1) {
        rank0_done.wait();
        return;
      }
      std::atomic<bool> stop{false};
      std::thread busy{[&] {
        pin();
        while (!stop.load(std::memory_order_relaxed)) {
        }
      }};
      auto g = col::get_group("persistent-crowded");
      auto x = col::tensor::from_vector(std::vector<int64_t>{1});
      auto op = g->prepare_allreduce(x, x);
      std::thread aborter{[g] {
        std::this_thread::sleep_for(std::chrono::milliseconds{200});
        g->abort("test stops the run");
      }};
      auto started = std::chrono::steady_clock::now();
      auto err = op ? op->run() : op.error();
      auto took = std::chrono::steady_clock::now() - started;
      stop = true;
      busy.join();
      aborter.join();
      test::expect_error_of(log, "aborted op", err, col::errc::aborted,
                            {"test stops the run"});
      log.expect(took < std::chrono::seconds{2},
                 "the run took " +
                   std::to_string(
                     std::chrono::duration_cast<std::chrono::milliseconds>(took)
                       .count()) +
                   " ms, not ending at the abort");
      rank0_done.count_down();
    },
    std::chrono::seconds{3});
}
#endif
