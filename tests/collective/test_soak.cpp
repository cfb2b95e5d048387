// A long-running process forms and destroys groups again and again: a
// training job that builds subgroups per phase, a server that serves many
// jobs. Every cycle, healthy or failed (formation timeout, mismatch, abort),
// must give back what it took: file descriptors (sockets, memfds, pidfds,
// eventfds), threads (lanes, transport loops, watchdogs), memory mappings
// (segments) and /dev/shm names. Each case counts them after one warm-up
// cycle, which may create what the process keeps for good, and after many
// more; a leak of one item per cycle shows as a dozen or more.
#include <barrier>
#include <chrono>
#include <latch>
#include <string>
#include <thread>

#include "../support/process_holdings.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using soak::check_no_growth;
using test::expect_error;
using test::expect_usable;
using test::rank_log;

namespace {

/// One healthy cycle: `world` ranks as threads form `name` on `backend`,
/// run an allreduce whose sum is checked, and destroy the group.
void healthy_cycle(const std::string& backend, const std::string& name,
                   int world) {
  auto store = col::make_in_process_store();
  auto results = test::run_threads(world, [&](int rank, rank_log& log) {
    col::init_collective_group(world, rank, backend, name,
                               test::group_options(store, 30s));
    expect_usable(log, name, world, rank);
    col::destroy_collective_group(name);
  });
  test::check_ranks(results);
}

const char* const backends[] = {"gloo", "shm"};

/// For each of `which` backends: `cycle(backend, name)` `rounds` times
/// after a warm-up, nothing may grow, and no segment of `name` may stay in
/// /dev/shm. The name is `prefix` and the backend.
template<class Backends, class Cycle>
void soak_each(const Backends& which, const std::string& prefix, int rounds,
               Cycle cycle) {
  for (const std::string backend : which) {
    auto name = prefix + backend;
    check_no_growth(backend, rounds, [&](int) { cycle(backend, name); });
    CHECK(test::shm_leftovers(name).empty());
  }
}

} // namespace

TEST_CASE("groups formed and destroyed 60 times give back every fd thread "
          "and mapping") {
  const char* const all[] = {"gloo", "shm", "auto"};
  soak_each(all, "soak-healthy-", 60,
            [](const std::string& backend, const std::string& name) {
              healthy_cycle(backend, name, 3);
            });
}

TEST_CASE("a formation that times out gives back what it took") {
  soak_each(backends, "soak-formation-", 12,
            [](const std::string& backend, const std::string& name) {
              // World size 3: rank 2 never comes.
              auto store = col::make_in_process_store();
              auto results = test::run_threads(2, [&](int rank, rank_log& log) {
                expect_error(log, "init", col::errc::timeout, {name}, [&] {
                  col::init_collective_group(3, rank, backend, name,
                                             test::group_options(store, 200ms));
                });
              });
              test::check_ranks(results);
            });
}

TEST_CASE("ranks that disagree and then destroy the group give back what "
          "they took") {
  soak_each(backends, "soak-mismatch-", 12,
            [](const std::string& backend, const std::string& name) {
              auto store = col::make_in_process_store();
              std::latch done{2};
              auto results = test::run_threads(2, [&](int rank, rank_log& log) {
                col::init_collective_group(2, rank, backend, name,
                                           test::group_options(store, 500ms));
                auto x =
                  test::make_tensor(col::dtype::float32, rank == 0 ? 10 : 30);
                try {
                  col::allreduce(x, name);
                  log.fail("an allreduce of 10 against 30 elements succeeded");
                } catch (const col::collective_error&) {
                  // Which error depends on the backend (see the hardening
                  // suite); here only what the failure leaves behind counts.
                }
                done.arrive_and_wait();
                col::destroy_collective_group(name);
              });
              test::check_ranks(results);
            });
}

TEST_CASE("a group aborted during an op and destroyed gives back what it "
          "took") {
  soak_each(
    backends, "soak-abort-", 12,
    [](const std::string& backend, const std::string& name) {
      auto store = col::make_in_process_store();
      std::latch done{2};
      auto results = test::run_threads(2, [&](int rank, rank_log& log) {
        // Both backends end an aborted op at once, long before this
        // deadline (a lane that waited for it would hold each cycle's
        // destroy 10 s; test_bad_input.cpp checks the wake itself).
        col::init_collective_group(2, rank, backend, name,
                                   test::group_options(store, 10s));
        if (rank == 0) { // rank 1 never calls: the op waits until the abort
          auto group = col::get_group(name);
          auto x = col::tensor::from_vector(std::vector<float>(100, 1.0f));
          auto running = col::allreduce_async(x, name);
          std::thread aborter{[group] {
            std::this_thread::sleep_for(20ms);
            group->abort("soak test abort");
          }};
          log.expect(static_cast<bool>(running.wait()),
                     "the aborted allreduce succeeded");
          aborter.join();
        }
        done.arrive_and_wait();
        col::destroy_collective_group(name);
      });
      test::check_ranks(results);
    });
}

// An op allocates nothing that outlives it: a long training run makes
// millions. Every form of submission and every kind of op, 30000 ops per
// rank after a warm-up of 3000: the heap must not grow by 64 KiB (2 B per
// op would show).
TEST_CASE("30000 small ops of every submission form and kind leave the heap "
          "as they found it") {
  constexpr int warm_up = 3000;
  constexpr int ops = 30000;
  constexpr size_t allowed = 64 * 1024;
  for (const std::string backend : backends) {
    INFO(backend);
    auto name = "soak-ops-" + backend;
    auto store = col::make_in_process_store();
    std::barrier sync{2};
    size_t before = 0;
    size_t after = 0;
    auto results = test::run_threads(2, [&](int rank, rank_log& log) {
      col::init_collective_group(2, rank, backend, name,
                                 test::group_options(store, 30s));
      std::vector<float> in(4, float(rank + 1));
      std::vector<float> out(4);
      auto persistent = col::get_group(name)->prepare_allreduce(
        col::view_of(in), col::view_of(out));
      REQUIRE(persistent);
      std::vector<float> gathered(8);
      std::vector<float> block(2);
      std::vector<float> swapped(4);
      std::vector<float> message(4);
      // Every form of submission and every op kind in turn: blocking,
      // waited async and persistent allreduce, then the data movers and
      // a message from rank 0 to rank 1.
      auto one = [&](int i) {
        switch (i % 8) {
          case 0:
            col::allreduce(col::view_of(in), col::view_of(out), name);
            break;
          case 1:
            if (auto err = col::allreduce_async(col::view_of(in),
                                                col::view_of(out), name)
                             .wait())
              log.fail("async allreduce: " + col::render(err));
            break;
          case 2:
            if (auto err = persistent->run())
              log.fail("persistent allreduce: " + col::render(err));
            break;
          case 3:
            col::allgather(col::view_of(in), col::view_of(gathered), name);
            break;
          case 4: col::broadcast(col::view_of(message), 0, name); break;
          case 5:
            col::reduce_scatter(col::view_of(in), col::view_of(block), name);
            break;
          case 6:
            col::alltoall(col::view_of(in), col::view_of(swapped), name);
            break;
          default:
            if (rank == 0)
              col::send(col::view_of(in), 1, name);
            else
              col::recv(col::view_of(message), 0, name);
        }
      };
      for (int i = 0; i < warm_up; ++i)
        one(i);
      sync.arrive_and_wait();
      if (rank == 0) before = soak::heap_in_use();
      sync.arrive_and_wait();
      for (int i = 0; i < ops; ++i)
        one(i);
      log.expect(out[0] == 3.0f && out[3] == 3.0f,
                 "the last sum is " + std::to_string(out[0]));
      log.expect(gathered[0] == 1.0f && gathered[7] == 2.0f,
                 "the last allgather is wrong");
      log.expect(block[0] == 3.0f, "the last reduce_scatter is wrong");
      log.expect(swapped[0] == 1.0f && swapped[3] == 2.0f,
                 "the last alltoall is wrong");
      sync.arrive_and_wait();
      if (rank == 0) after = soak::heap_in_use();
      sync.arrive_and_wait();
      col::destroy_collective_group(name);
    });
    test::check_ranks(results);
    INFO("heap in use: " << before << " B after the warm-up, " << after
                         << " B after " << ops << " more ops per rank");
    CHECK(after <= before + allowed);
  }
}
