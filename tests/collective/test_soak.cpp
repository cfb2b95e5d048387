// A long-running process forms and destroys groups again and again: a
// training job that builds subgroups per phase, a server that serves many
// jobs. Every cycle, healthy or failed (formation timeout, mismatch, abort),
// must give back what it took: file descriptors (sockets, memfds, pidfds,
// eventfds), threads (lanes, transport loops, watchdogs), memory mappings
// (segments) and /dev/shm names. Each case counts them after one warm-up
// cycle, which may create what the process keeps for good, and after many
// more; a leak of one item per cycle shows as a dozen or more.
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

} // namespace

TEST_CASE("groups formed and destroyed 60 times give back every fd thread "
          "and mapping") {
  for (const std::string backend : {"gloo", "shm", "auto"}) {
    auto name = "soak-healthy-" + backend;
    check_no_growth(backend, 60, [&](int) { healthy_cycle(backend, name, 3); });
    CHECK(test::shm_leftovers(name).empty());
  }
}

TEST_CASE("a formation that times out gives back what it took") {
  for (const std::string backend : backends) {
    auto name = "soak-formation-" + backend;
    check_no_growth(backend, 12, [&](int) {
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
    CHECK(test::shm_leftovers(name).empty());
  }
}

TEST_CASE("ranks that disagree and then destroy the group give back what "
          "they took") {
  for (const std::string backend : backends) {
    auto name = "soak-mismatch-" + backend;
    check_no_growth(backend, 12, [&](int) {
      auto store = col::make_in_process_store();
      std::latch done{2};
      auto results = test::run_threads(2, [&](int rank, rank_log& log) {
        col::init_collective_group(2, rank, backend, name,
                                   test::group_options(store, 500ms));
        auto x = test::make_tensor(col::dtype::float32, rank == 0 ? 10 : 30);
        try {
          col::allreduce(x, name);
          log.fail("an allreduce of 10 against 30 elements succeeded");
        } catch (const col::collective_error&) {
          // Which error depends on the backend (see the hardening suite);
          // here only what the failure leaves behind counts.
        }
        done.arrive_and_wait();
        col::destroy_collective_group(name);
      });
      test::check_ranks(results);
    });
    CHECK(test::shm_leftovers(name).empty());
  }
}

TEST_CASE("a group aborted during an op and destroyed gives back what it "
          "took") {
  for (const std::string backend : backends) {
    auto name = "soak-abort-" + backend;
    check_no_growth(backend, 12, [&](int) {
      auto store = col::make_in_process_store();
      std::latch done{2};
      auto results = test::run_threads(2, [&](int rank, rank_log& log) {
        // Gloo ends an aborted op only at its deadline; shm at once.
        auto timeout = backend == "gloo" ? col::milliseconds{300} : 10s;
        col::init_collective_group(2, rank, backend, name,
                                   test::group_options(store, timeout));
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
    CHECK(test::shm_leftovers(name).empty());
  }
}
