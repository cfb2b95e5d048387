// Ops started without blocking on the shm backend (backend::start_*, shm
// ranks in one process): a caller that does not wait (here: a thread
// outside the blocking API, as an actor member is) publishes its op and
// returns; whoever completes the step finishes it for every such rank.
// These tests mix ranks that wait with ranks that do not, and check that a
// rank that never arrives, an abort, and ranks that disagree end every
// such op with a clear error instead of a hang.
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <latch>
#include <new>
#include <stdexcept>
#include <thread>

#include "backends/shm/shm_backend.hpp"
#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::expect_usable;
using test::rank_log;
using clock_type = std::chrono::steady_clock;

namespace {

/// test::run_shm_threads, checking that the group runs on shm.
void run_threads(int world, const std::string& name,
                 const std::function<void(int, rank_log&)>& body,
                 col::milliseconds timeout = 20s) {
  test::run_shm_threads(
    world, name,
    [&](int rank, rank_log& log) {
      auto used = col::get_group(name)->backend_in_use();
      log.expect(used == "shm", "the group runs on " + used);
      body(rank, log);
    },
    timeout);
}

/// The error the blocking API throws, or none.
template<class Fn>
caf::error blocking(Fn&& fn) {
  try {
    fn();
  } catch (const col::collective_error& e) {
    return e.error();
  }
  return {};
}

/// The error of `w`, which must end within `limit`.
caf::error outcome(rank_log& log, const col::work& w, col::milliseconds limit) {
  if (!w.wait_for(limit))
    log.fail("the op did not end within " + std::to_string(limit.count()) +
             " ms");
  return w.wait();
}

/// Rank `rank` of the 3-rank shm group `name` forms it; ranks 0 and 1 then
/// start an allreduce of `x` without waiting, with a 300 ms timeout, that
/// rank 2 does not join: it must end with timeout.
void join_and_time_out(const col::rendezvous_store_ptr& store,
                       const std::string& name, int rank, rank_log& log,
                       std::vector<float>& x) {
  col::init_collective_group(3, rank, "shm", name,
                             test::group_options(store, 20s));
  if (rank == 2) return;
  col::allreduce_options opts;
  opts.timeout = 300ms;
  auto g = col::get_group(name);
  auto err =
    outcome(log, g->allreduce(col::view_of(x), col::view_of(x), opts), 10s);
  log.expect(col::code_of(err) == col::errc::timeout,
             "started op: " + col::render(err));
}

} // namespace

TEST_CASE("shm starts: ranks that wait and ranks that do not get the same "
          "results, 300 rounds of allreduce, broadcast and barrier") {
  constexpr int world = 4;
  constexpr int rounds = 300;
  run_threads(world, "starts-mixed", [](int rank, rank_log& log) {
    auto g = col::get_group("starts-mixed");
    for (int i = 0; i < rounds; ++i) {
      // Which ranks wait changes every round: each of the 16 mixes of 4
      // ranks occurs, none and all included.
      bool waits = (((i % 16) >> rank) & 1) != 0;
      auto n = static_cast<size_t>(1 + (i % 7) * 37);
      std::vector<int64_t> x(n);
      for (size_t k = 0; k < n; ++k)
        x[k] = int64_t(rank + 1) * int64_t(k + 1) + i;
      col::allreduce_options sum;
      std::vector<int64_t> y(n, -1);
      caf::error err;
      if (waits)
        col::allreduce(col::view_of(x), col::view_of(y), "starts-mixed", sum);
      else
        err = g->allreduce(col::view_of(x), col::view_of(y), sum).wait();
      if (err) {
        log.fail("allreduce round " + std::to_string(i) + ": " +
                 col::render(err));
        return;
      }
      for (size_t k = 0; k < n; ++k) {
        auto want = int64_t(world * (world + 1) / 2) * int64_t(k + 1) +
                    int64_t(world) * i;
        if (y[k] != want) {
          log.fail("allreduce round " + std::to_string(i) + " element " +
                   std::to_string(k) + ": " + std::to_string(y[k]) +
                   ", expected " + std::to_string(want));
          return;
        }
      }
      // In place, float max.
      std::vector<float> m(n, float(rank * 10 + i % 5));
      col::allreduce_options max;
      max.op = col::reduce_op::max;
      err = g->allreduce(col::view_of(m), col::view_of(m), max).wait();
      log.expect(!err && m[0] == float((world - 1) * 10 + i % 5) &&
                   m[n - 1] == m[0],
                 "max round " + std::to_string(i) + ": " + col::render(err));
      col::broadcast_options from;
      from.root = i % world;
      std::vector<int32_t> b(n, rank == from.root ? 1000 + i : -7);
      err = waits ? blocking([&] {
        col::broadcast(col::view_of(b), from.root, "starts-mixed");
      })
                  : g->broadcast(col::view_of(b), col::view_of(b), from).wait();
      log.expect(!err && b[0] == 1000 + i && b[n - 1] == 1000 + i,
                 "broadcast round " + std::to_string(i) + ": " +
                   std::to_string(b[0]) + " " + col::render(err));
      err = waits ? blocking([] { col::barrier("starts-mixed"); })
                  : g->barrier().wait();
      log.expect(!err, "barrier round " + std::to_string(i) + ": " +
                         col::render(err));
      ++log.checks;
    }
    log.expect(log.checks == rounds, "not every round ran");
  });
}

namespace {

/// Runs one op on `g` for this rank, the blocking way (`waits`) or started
/// without blocking, into `out`.
using op_runner = std::function<caf::error(bool waits, const col::tensor_view&,
                                           const col::tensor_view&)>;

/// Compares the start path with the blocking path (whose results the
/// shared correctness suites check against references): same inputs, the
/// same bits out, on every rank.
void compare_paths(rank_log& log, const std::string& what, int rank,
                   const col::tensor& in, size_t out_count,
                   const op_runner& run) {
  auto blocking_out = test::make_tensor(in.type(), out_count);
  auto started_out = test::make_tensor(in.type(), out_count);
  test::poison(blocking_out.view());
  test::poison(started_out.view());
  if (auto err = run(true, in.view(), blocking_out.view())) {
    log.fail(what + " (blocking): " + col::render(err));
    return;
  }
  if (auto err = run(false, in.view(), started_out.view())) {
    log.fail(what + " (started): " + col::render(err));
    return;
  }
  if (log.expect_equal(what + " rank " + std::to_string(rank),
                       started_out.view(), blocking_out.view()))
    ++log.checks;
}

} // namespace

TEST_CASE("shm starts: every op, dtype and reduce op started without "
          "blocking gives the blocking path's bits, on 1, 2, 3, 4 and 7 "
          "ranks") {
  for (int world : {1, 2, 3, 4, 7}) {
    auto name = "starts-sweep-" + std::to_string(world);
    run_threads(world, name, [&](int rank, rank_log& log) {
      auto g = col::get_group(name);
      auto w = size_t(world);
      auto wait = [](col::work x) { return x.wait(); };
      for (size_t count : {size_t{1}, size_t{5}, size_t{100}}) {
        for (auto t : col::all_dtypes) {
          auto tag = std::string{col::to_string(t)} + " x" +
                     std::to_string(count) + " on " + std::to_string(world);
          for (auto op : col::all_reduce_ops) {
            if (!col::is_defined(op, t)) continue;
            auto in = test::make_tensor(t, count * w);
            test::fill_input(in.view(), op, rank);
            auto opname = std::string{col::to_string(op)};
            col::allreduce_options ar;
            ar.op = op;
            compare_paths(
              log, "allreduce " + opname + " " + tag, rank, in, count * w,
              [&](bool waits, const col::tensor_view& x,
                  const col::tensor_view& y) {
                return waits ? blocking([&] { col::allreduce(x, y, name, ar); })
                             : wait(g->allreduce(x, y, ar));
              });
            col::reduce_options rd;
            rd.op = op;
            rd.root = world - 1;
            compare_paths(
              log, "reduce " + opname + " " + tag, rank, in, count * w,
              [&](bool waits, const col::tensor_view& x,
                  const col::tensor_view& y) {
                // The output is defined on the root only.
                return waits ? blocking([&] { col::reduce(x, y, name, rd); })
                             : wait(g->reduce(x, y, rd));
              });
            col::reduce_scatter_options rs;
            rs.op = op;
            compare_paths(log, "reduce_scatter " + opname + " " + tag, rank, in,
                          count,
                          [&](bool waits, const col::tensor_view& x,
                              const col::tensor_view& y) {
                            return waits ? blocking([&] {
                              col::reduce_scatter(x, y, name, rs);
                            })
                                         : wait(g->reduce_scatter(x, y, rs));
                          });
          }
          auto in = test::make_tensor(t, count);
          test::fill_pattern(in.view(), rank);
          col::allgather_options ag;
          compare_paths(
            log, "allgather " + tag, rank, in, count * w,
            [&](bool waits, const col::tensor_view& x,
                const col::tensor_view& y) {
              return waits ? blocking([&] { col::allgather(x, y, name, ag); })
                           : wait(g->allgather(x, y, ag));
            });
          col::gather_options ga;
          ga.root = world / 2;
          compare_paths(log, "gather " + tag, rank, in, count * w,
                        [&](bool waits, const col::tensor_view& x,
                            const col::tensor_view& y) {
                          return waits ? blocking(
                                           [&] { col::gather(x, y, name, ga); })
                                       : wait(g->gather(x, y, ga));
                        });
          col::broadcast_options bc;
          bc.root = world - 1;
          compare_paths(
            log, "broadcast " + tag, rank, in, count,
            [&](bool waits, const col::tensor_view& x,
                const col::tensor_view& y) {
              return waits ? blocking([&] { col::broadcast(x, y, name, bc); })
                           : wait(g->broadcast(x, y, bc));
            });
          auto wide = test::make_tensor(t, count * w);
          test::fill_pattern(wide.view(), rank);
          col::scatter_options sc;
          sc.root = 0;
          compare_paths(
            log, "scatter " + tag, rank, wide, count,
            [&](bool waits, const col::tensor_view& x,
                const col::tensor_view& y) {
              return waits ? blocking([&] { col::scatter(x, y, name, sc); })
                           : wait(g->scatter(x, y, sc));
            });
          col::alltoall_options aa;
          compare_paths(
            log, "alltoall " + tag, rank, wide, count * w,
            [&](bool waits, const col::tensor_view& x,
                const col::tensor_view& y) {
              return waits ? blocking([&] { col::alltoall(x, y, name, aa); })
                           : wait(g->alltoall(x, y, aa));
            });
        }
      }
      log.expect(log.checks > 0, "no comparison ran");
    });
  }
}

TEST_CASE("shm starts: for every op, the last rank to arrive finishes it "
          "for every rank on its own thread, before its call returns") {
  constexpr int world = 3;
  constexpr size_t count = 5;
  using starter = std::function<col::work(col::group&, const col::tensor_view&,
                                          const col::tensor_view&)>;
  // Every op with a start form, on `count` elements per rank (in: world x
  // count where the op takes a block per rank).
  const std::vector<std::pair<std::string, starter>> ops{
    {"allreduce",
     [](col::group& g, auto in, auto out) {
       return g.allreduce(in.slice(0, count), out.slice(0, count));
     }},
    {"reduce",
     [](col::group& g, auto in, auto out) {
       return g.reduce(in.slice(0, count), out.slice(0, count), {});
     }},
    {"broadcast",
     [](col::group& g, auto in, auto out) {
       return g.broadcast(in.slice(0, count), out.slice(0, count), {});
     }},
    {"allgather",
     [](col::group& g, auto in, auto out) {
       return g.allgather(in.slice(0, count), out);
     }},
    {"gather", [](col::group& g, auto in,
                  auto out) { return g.gather(in.slice(0, count), out, {}); }},
    {"scatter",
     [](col::group& g, auto in, auto out) {
       return g.scatter(in, out.slice(0, count), {});
     }},
    {"reduce_scatter",
     [](col::group& g, auto in, auto out) {
       return g.reduce_scatter(in, out.slice(0, count));
     }},
    {"alltoall",
     [](col::group& g, auto in, auto out) { return g.alltoall(in, out); }},
    {"barrier", [](col::group& g, auto, auto) { return g.barrier(); }},
  };
  for (const auto& [what, start] : ops) {
    std::latch arrived{world - 1};
    std::latch reported{world}; // every rank's completion callback ran
    std::array<std::thread::id, world> finished_on{};
    std::thread::id last_thread;
    run_threads(world, "starts-last-" + what, [&](int rank, rank_log& log) {
      auto g = col::get_group("starts-last-" + what);
      std::vector<int32_t> x(count * world, rank + 1);
      std::vector<int32_t> y(count * world, 0);
      if (rank == world - 1) {
        arrived.wait();
        last_thread = std::this_thread::get_id();
      }
      auto w = start(*g, col::view_of(x), col::view_of(y));
      w.on_complete([&, rank](const caf::error&) {
        finished_on[size_t(rank)] = std::this_thread::get_id();
        reported.count_down();
      });
      if (rank == world - 1) {
        // No lane thread ran it: the op was over when the call returned.
        log.expect(w.ready(), what + ": the last rank's op was not over on "
                                     "return");
      } else {
        log.expect(!w.ready(),
                   what + ": an op was over before every rank arrived");
        arrived.count_down();
      }
      auto err = outcome(log, w, 10s);
      log.expect(!err, what + ": " + col::render(err));
      if (what == "allreduce")
        log.expect(y[0] == 6 && y[count - 1] == 6,
                   "allreduce: " + std::to_string(y[0]));
      reported.wait();
      for (int r = 0; r < world; ++r)
        log.expect(finished_on[size_t(r)] == last_thread,
                   what + ": rank " + std::to_string(r) +
                     "'s op was not finished on the last rank's thread");
    });
  }
}

TEST_CASE("shm starts: a rank that never arrives makes the ranks that did "
          "not wait time out naming it") {
  // The op's own timeout: the group forms with the default one, so a slow
  // formation on a loaded machine does not count.
  constexpr auto timeout = 500ms;
  run_threads(3, "starts-absent", [&](int rank, rank_log& log) {
    if (rank != 2) {
      auto g = col::get_group("starts-absent");
      std::vector<float> x(8, 1.0f);
      col::allreduce_options opts;
      opts.timeout = timeout;
      auto start = clock_type::now();
      auto w = g->allreduce(col::view_of(x), col::view_of(x), opts);
      auto err = outcome(log, w, 10s);
      auto elapsed = clock_type::now() - start;
      test::expect_error_of(log, "allreduce", err, col::errc::timeout,
                            {"starts-absent", "ranks [2] did not arrive"});
      // The watchdog looks every 20 ms; allow for a loaded machine.
      log.expect(elapsed >= timeout && elapsed < timeout + 3s,
                 "the timeout came after " + std::to_string(elapsed / 1ms) +
                   " ms");
      log.expect(g->broken(), "the group is not broken after a timeout");
    }
  });
}

TEST_CASE("shm starts: a rank whose started op timed out tells the peers "
          "it left on a timeout when it destroys its group") {
  auto store = col::make_in_process_store();
  std::latch timed_out{3};
  std::latch destroyed{1}; // rank 0 left first
  std::latch checked{1};   // rank 2 saw it; rank 1 leaves only then
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    std::vector<float> x(8, 1.0f);
    join_and_time_out(store, "starts-left", rank, log, x);
    timed_out.arrive_and_wait();
    if (rank == 0) {
      col::destroy_collective_group("starts-left");
      destroyed.count_down();
      return;
    }
    if (rank == 2) {
      destroyed.wait();
      auto err =
        blocking([&] { col::allreduce(col::view_of(x), "starts-left"); });
      // The group's abort mark names the first of ranks 0 and 1 whose
      // watchdog fired: both timed out at the same deadline, so either may
      // (rank 1 did in one full CTest run on 2026-11-28).
      auto text = col::render(err);
      log.expect(
        col::code_of(err) == col::errc::peer_lost &&
          (text.find("rank 0 left the group (timeout)") != std::string::npos ||
           text.find("rank 1 left the group (timeout)") != std::string::npos),
        "the rank that came late: " + text);
      checked.count_down();
    } else {
      checked.wait();
    }
    col::destroy_collective_group("starts-left");
  });
  test::check_ranks(results);
}

TEST_CASE("shm starts: a rank that comes after its peers' started ops timed "
          "out fails that op and the next at once - it does not complete "
          "what they reported as timed out") {
  // Before: the watchdog ended the started ops without telling anyone; the
  // late rank's allreduce returned success with the peers' inputs, and its
  // next op waited for its whole deadline.
  auto store = col::make_in_process_store();
  std::latch timed_out{3};
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    std::vector<float> x(8, 1.0f);
    join_and_time_out(store, "starts-late", rank, log, x);
    timed_out.arrive_and_wait();
    if (rank == 2) {
      for (int op = 0; op < 2; ++op) {
        auto start = clock_type::now();
        auto err =
          blocking([&] { col::allreduce(col::view_of(x), "starts-late"); });
        auto elapsed = clock_type::now() - start;
        log.expect(err && col::render(err).find("left the group (timeout)") !=
                            std::string::npos,
                   "op " + std::to_string(op) +
                     " of the rank that came late: " +
                     (err ? col::render(err) : std::string{"success"}));
        log.expect(elapsed < 5s, "it took " + std::to_string(elapsed / 1ms) +
                                   " ms (group timeout 20 s)");
      }
    }
    col::destroy_collective_group("starts-late");
  });
  test::check_ranks(results);
}

TEST_CASE("shm starts: abort from another rank ends the ops of every rank "
          "that did not wait at once") {
  std::latch started{3};
  std::latch done{3};
  run_threads(3, "starts-abort", [&](int rank, rank_log& log) {
    auto g = col::get_group("starts-abort");
    if (rank == 2) {
      started.arrive_and_wait();
      std::this_thread::sleep_for(200ms);
      g->abort("the test aborts");
      done.arrive_and_wait();
      return;
    }
    std::vector<float> x(8, 1.0f);
    auto start = clock_type::now();
    auto w = g->allreduce(col::view_of(x), col::view_of(x));
    started.arrive_and_wait();
    auto err = outcome(log, w, 10s);
    auto elapsed = clock_type::now() - start;
    test::expect_error_of(log, "allreduce", err, col::errc::peer_lost,
                          {"starts-abort", "rank 2 left the group"});
    log.expect(elapsed < 5s, "the abort took " + std::to_string(elapsed / 1ms) +
                               " ms to arrive (timeout 20 s)");
    done.arrive_and_wait();
  });
}

TEST_CASE("shm starts: a rank that does not wait and a rank that does, with "
          "other sizes, both fail with mismatch, and the group stays usable") {
  run_threads(2, "starts-disagree", [](int rank, rank_log& log) {
    auto g = col::get_group("starts-disagree");
    // Rank 0: 8 elements, started without waiting. Rank 1: too large for
    // a start, so it waits on the blocking path.
    std::vector<float> x(rank == 0 ? 8 : 100000, 1.0f);
    auto err =
      rank == 0
        ? outcome(log, g->allreduce(col::view_of(x), col::view_of(x)), 10s)
        : col::allreduce_async(col::view_of(x), "starts-disagree").wait();
    test::expect_error_of(
      log, "allreduce", err, col::errc::mismatch,
      {"ranks [0] called allreduce (sum) of 8 float32",
       "ranks [1] called allreduce (sum) of 100000 float32"});
    // Both without waiting, other dtypes.
    auto y =
      test::make_tensor(rank == 0 ? col::dtype::int32 : col::dtype::float32, 4);
    err = outcome(log, g->allreduce(y.view(), y.view()), 10s);
    test::expect_error_of(log, "allreduce of other dtypes", err,
                          col::errc::mismatch, {"of 4 int32", "of 4 float32"});
    expect_usable(log, "starts-disagree", 2, rank);
    std::vector<int64_t> z{rank + 1};
    err = outcome(log, g->allreduce(col::view_of(z), col::view_of(z)), 10s);
    log.expect(!err && z[0] == 3,
               "allreduce without waiting afterwards: " + col::render(err));
  });
}

TEST_CASE("shm starts: a rank that aborts while a peer's arrival finishes "
          "the step gets its own op back as aborted or done, never as the "
          "loss of itself") {
  // Rank 0 starts an op without waiting, then aborts at the instant rank 1
  // arrives: rank 1's thread may be finishing the step for both. Whoever
  // ends rank 0's op must say rank 0 aborted, not that rank 0 left.
  // The window is a few hundred nanoseconds wide: the rounds sweep the
  // delay of the abort against the arrival across it.
  constexpr int rounds = 3000;
  auto spin_for = [](std::chrono::nanoseconds delay) {
    auto until = clock_type::now() + delay;
    while (clock_type::now() < until) {
    }
  };
  for (int round = 0; round < rounds; ++round) {
    auto name = "starts-abort-race-" + std::to_string(round);
    auto delay = std::chrono::nanoseconds{(round % 50) * 40};
    std::latch go{2};
    run_threads(2, name, [&](int rank, rank_log& log) {
      auto g = col::get_group(name);
      std::vector<float> x(8, 1.0f);
      if (rank == 0) {
        auto w = g->allreduce(col::view_of(x), col::view_of(x));
        go.arrive_and_wait();
        spin_for(delay);
        g->abort("the test aborts");
        auto err = outcome(log, w, 10s);
        if (err)
          test::expect_error_of(log, "rank 0's own op", err, col::errc::aborted,
                                {name, "the test aborts"});
        return;
      }
      go.arrive_and_wait();
      auto err =
        outcome(log, g->allreduce(col::view_of(x), col::view_of(x)), 10s);
      if (err)
        test::expect_error_of(log, "rank 1's op", err, col::errc::peer_lost,
                              {name, "rank 0 left the group"});
    });
  }
}

namespace {

namespace shm = col::detail::shm;

// Two shm backends of one group, formed on threads of this process.
std::array<std::unique_ptr<col::backend>, 2>
form_pair(const std::string& name) {
  auto store = col::make_in_process_store();
  std::array<std::unique_ptr<col::backend>, 2> backends;
  std::array<std::thread, 2> forming;
  for (int rank = 0; rank < 2; ++rank)
    forming[size_t(rank)] = std::thread{[&, rank] {
      col::group_config cfg;
      cfg.name = name;
      cfg.world_size = 2;
      cfg.rank = rank;
      cfg.backend = "shm";
      cfg.store = store;
      cfg.timeout = 30s;
      if (auto be = shm::make_shm_backend(cfg))
        backends[size_t(rank)] = std::move(*be);
    }};
  for (auto& t : forming)
    t.join();
  return backends;
}

// The backend the window hook aborts (the hook is a plain function).
col::backend* window_victim = nullptr;

// Starts rank 0's allreduce of `backends` with the hook aborting
// `window_victim` between can_start and the publication; its outcome.
caf::error
start_through_window(std::array<std::unique_ptr<col::backend>, 2>& backends) {
  shm::arrival_test_hook = [](shm::shm_backend&) {
    window_victim->abort("aborted inside the window");
  };
  std::vector<float> x(8, 1.0f);
  // Shared: a late completion (the bug this test catches) must not touch a
  // promise that is gone.
  auto outcome = std::make_shared<std::promise<caf::error>>();
  col::op_completion done = [outcome](caf::error err) {
    outcome->set_value(std::move(err));
  };
  col::op_call call{1, 30s};
  auto started = backends[0]->start_allreduce(call, col::view_of(x),
                                              col::view_of(x), {}, done);
  shm::arrival_test_hook = nullptr;
  REQUIRE(started);
  auto result = outcome->get_future();
  REQUIRE(result.wait_for(5s) == std::future_status::ready);
  return result.get();
}

} // namespace

TEST_CASE("shm starts: an abort that lands after can_start and before the "
          "op is published still ends that op, as aborted") {
  // The abort's own sweep (fail_all) cannot see an op that is not yet
  // published: arrive() must notice the abort itself. The hook puts the
  // abort exactly there; rank 1 takes no part, so nobody else could end
  // rank 0's op before its 30 s deadline.
  auto backends = form_pair("starts-window");
  REQUIRE(backends[0]);
  REQUIRE(backends[1]);
  window_victim = backends[0].get();
  auto err = start_through_window(backends);
  CHECK(col::code_of(err) == col::errc::aborted);
  CHECK(col::render(err).find("aborted inside the window") !=
        std::string::npos);
}

TEST_CASE("shm starts: a peer's abort that lands after can_start and before "
          "the op is published ends that op at once, naming the peer") {
  // Before: arrive() looked only at its own backend's abort, and the op
  // waited for its 30 s deadline.
  auto backends = form_pair("starts-peer-window");
  REQUIRE(backends[0]);
  REQUIRE(backends[1]);
  window_victim = backends[1].get();
  auto err = start_through_window(backends);
  CHECK(col::code_of(err) == col::errc::peer_lost);
  CHECK(col::render(err).find("rank 1 left the group (aborted)") !=
        std::string::npos);
}

namespace {

// When the slow reader below entered and let go of the reading hook (after
// which it still copies); set by the hook, on rank 1 only.
std::atomic<bool> slow_reader_reading{false};
std::atomic<clock_type::rep> slow_reader_done{0};

clock_type::rep stamp() {
  return clock_type::now().time_since_epoch().count();
}

} // namespace

TEST_CASE("shm: an abort waits for a reader of its own process however "
          "long it reads") {
  // The aborting rank's caller may free its buffers as soon as abort()
  // returns, while a peer thread still reads them in place. Before: the
  // wait gave up after 5 s, and a reader slower than that (a large op on a
  // crowded host) could read freed (unmapped) memory.
  auto backends = form_pair("slow-reader");
  REQUIRE(backends[0]);
  REQUIRE(backends[1]);
  slow_reader_done = 0;
  slow_reader_reading = false;
  shm::reading_test_hook = [](shm::shm_backend& be) {
    if (be.rank() != 1) return;
    slow_reader_reading = true;
    std::this_thread::sleep_for(6s);
    slow_reader_done = stamp();
  };
  // 1 MiB: read in place (direct), not through the segment.
  std::array<std::vector<float>, 2> data{std::vector<float>(1 << 18, 1.0f),
                                         std::vector<float>(1 << 18, 2.0f)};
  std::array<caf::error, 2> errs;
  std::array<std::thread, 2> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks[size_t(rank)] = std::thread{[&, rank] {
      auto& x = data[size_t(rank)];
      errs[size_t(rank)] = backends[size_t(rank)]->allreduce(
        col::op_call{1, 30s}, col::view_of(x), col::view_of(x), {});
    }};
  // Once rank 1 reads rank 0's input.
  while (!slow_reader_reading)
    std::this_thread::sleep_for(10ms);
  backends[0]->abort("the test aborts rank 0");
  auto aborted = stamp();
  for (auto& t : ranks)
    t.join();
  shm::reading_test_hook = nullptr;
  CHECK(col::code_of(errs[0]) == col::errc::aborted);
  CHECK(errs[1]); // rank 0 left the group before rank 1's next step
  REQUIRE(slow_reader_done.load() != 0);
  CHECK(aborted >= slow_reader_done.load());
}

TEST_CASE("shm: a reader that throws while it reads leaves no mark that "
          "would hold its peers' abort") {
  // wait_for_readers waits for readers of its own process without a bound,
  // so a mark left set by an exception between start and stop would hold
  // every peer's abort for good. The hook throws on rank 1 once its mark
  // is set.
  auto backends = form_pair("throwing-reader");
  REQUIRE(backends[0]);
  REQUIRE(backends[1]);
  shm::reading_test_hook = [](shm::shm_backend& be) {
    if (be.rank() == 1) throw std::runtime_error("the test's reader throws");
  };
  std::array<std::vector<float>, 2> data{std::vector<float>(1 << 18, 1.0f),
                                         std::vector<float>(1 << 18, 2.0f)};
  std::atomic<bool> rank1_threw{false};
  std::thread rank1{[&] {
    try {
      backends[1]->allreduce(col::op_call{1, 30s}, col::view_of(data[1]),
                             col::view_of(data[1]), {});
    } catch (const std::runtime_error&) {
      rank1_threw = true;
    }
  }};
  caf::error rank0_err;
  std::thread rank0{[&] {
    rank0_err = backends[0]->allreduce(
      col::op_call{1, 30s}, col::view_of(data[0]), col::view_of(data[0]), {});
  }};
  rank1.join();
  REQUIRE(rank1_threw);
  // The abort must return: on a hang the test gives up after 20 s.
  auto aborted = std::make_shared<std::promise<void>>();
  auto done = aborted->get_future();
  std::thread{[&backends, aborted] {
    backends[0]->abort("the test aborts rank 0");
    aborted->set_value();
  }}.detach();
  if (done.wait_for(20s) != std::future_status::ready) {
    // Threads are stuck and nothing else can be checked: say why, and end.
    std::fprintf(stderr, "FAILED: rank 0's abort waits for rank 1's reading "
                         "mark (a mark left set by the exception)\n");
    std::_Exit(1);
  }
  rank0.join();
  // Only now: rank 0's thread reads the hook at its reading marks.
  shm::reading_test_hook = nullptr;
  CHECK(col::code_of(rank0_err) == col::errc::aborted);
}

TEST_CASE("shm: a rank whose backend throws std::bad_alloc mid-op fails with "
          "out_of_memory and its peer fails at once - not at the deadline") {
  // A rank that throws out of its backend left the op somewhere in its
  // protocol. Before: it reported backend_error and its backend went on as
  // if nothing happened, so its peer waited for it until the op's 20 s
  // deadline. The hook throws on rank 1 as it starts reading its peer.
  shm::reading_test_hook = [](shm::shm_backend& be) {
    if (be.rank() == 1) throw std::bad_alloc{};
  };
  run_threads(2, "threw-mid-op", [&](int rank, rank_log& log) {
    std::vector<float> x(1 << 18, 1.0f); // read in place (direct)
    col::allreduce_options opts;
    opts.timeout = 20s;
    auto t0 = clock_type::now();
    auto err =
      blocking([&] { col::allreduce(col::view_of(x), "threw-mid-op", opts); });
    auto took = clock_type::now() - t0;
    auto text = col::render(err);
    if (rank == 1) {
      log.expect(col::code_of(err) == col::errc::out_of_memory, text);
      log.expect(text.find("std::bad_alloc") != std::string::npos, text);
    } else {
      log.expect(col::code_of(err) == col::errc::peer_lost, text);
      log.expect(text.find("rank 1") != std::string::npos, text);
    }
    log.expect(
      took < 10s,
      "the op took " +
        std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
        " ms against its 20 s deadline");
    // The group is broken, naming the first failure, on the throwing rank.
    auto g = col::get_group("threw-mid-op");
    if (rank == 1)
      log.expect(col::code_of(g->broken_reason()) == col::errc::out_of_memory,
                 col::render(g->broken_reason()));
  });
  shm::reading_test_hook = nullptr;
}

TEST_CASE("shm starts: a send that fits an empty mailbox is complete when the "
          "call returns, a send behind it or longer than the mailbox takes "
          "the lane, and the receiver gets all in order") {
  std::latch first_sent{1};
  run_threads(2, "eager-send", [&](int rank, rank_log& log) {
    auto g = col::get_group("eager-send");
    auto small = [](int64_t v) {
      return col::tensor::from_vector(std::vector<int64_t>(8, v));
    };
    // Longer than the 256 KiB mailbox of a group of 2.
    auto big = test::make_tensor(col::dtype::uint8, size_t{300} << 10);
    if (rank == 0) {
      col::send_options to1;
      to1.peer = 1;
      auto a = small(1);
      auto first = g->send(a, to1);
      // Written before the call returned: no thread hand-off. (Through the
      // send lane it would still be queued, or running, at this point.)
      log.expect(first.ready() && !first.wait(),
                 "the first send was not complete when send() returned");
      first_sent.count_down();
      // The mailbox is full until rank 1 takes the first message.
      auto b = small(2);
      auto second = g->send(b, to1);
      test::fill_pattern(big, 0, 0, 3);
      auto third = g->send(big, to1);
      log.expect(!outcome(log, second, 10s), "the second send failed");
      log.expect(!outcome(log, third, 10s), "the long send failed");
    } else {
      first_sent.wait(); // nobody receives before the first send is over
      col::recv_options from0;
      from0.peer = 0;
      auto got = small(0);
      for (int64_t want : {1, 2}) {
        log.expect(!g->recv(got, from0).wait(), "a recv failed");
        log.expect(static_cast<const int64_t*>(got.data())[7] == want,
                   "message " + std::to_string(want) + " came out of order");
      }
      auto want = test::make_tensor(col::dtype::uint8, size_t{300} << 10);
      test::fill_pattern(want, 0, 0, 3);
      log.expect(!g->recv(big, from0).wait(), "the long recv failed");
      log.expect_equal("the long message", big, want);
    }
    expect_usable(log, "eager-send", 2, rank);
  });
}
