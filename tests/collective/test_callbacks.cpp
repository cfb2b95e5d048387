// Completion callbacks (work::on_complete) that misbehave: one that throws
// must not end the process or keep the others from running, and one that
// destroys its own group from the group's lane must return instead of
// waiting for that lane forever.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::rank_log;

namespace {

// How long rank 1 waits before it takes part in the op: rank 0's op is
// then still queued on rank 0's lane when rank 0 registers its callbacks,
// so they run on that lane, not in the registering call.
constexpr auto late_peer = 200ms;

} // namespace

TEST_CASE("a throwing completion callback neither ends the process nor "
          "keeps the later callbacks from running") {
  test::run_group(2, "throwing_callback", [](int rank, rank_log& log) {
    std::vector<float> x(1024, static_cast<float>(rank + 1));
    if (rank == 1) std::this_thread::sleep_for(late_peer);
    auto w = col::allreduce_async(col::view_of(x), "throwing_callback");
    std::promise<std::string> last_ran;
    auto last = last_ran.get_future();
    auto caller = std::this_thread::get_id();
    std::atomic<bool> ran_on_caller{false};
    // Rank 0 registers while its op is queued (the callbacks run on its
    // lane); rank 1 most likely once it is complete (they run right here).
    w.on_complete([rank](const caf::error&) {
      throw std::runtime_error("callback of rank " + std::to_string(rank));
    });
    w.on_complete([](const caf::error&) { throw 42; }); // no std::exception
    w.on_complete([&](const caf::error& err) {
      ran_on_caller = std::this_thread::get_id() == caller;
      last_ran.set_value(err ? col::render(err) : "ok");
    });
    auto err = w.wait();
    log.expect(!err, "allreduce failed: " + (err ? col::render(err) : ""));
    if (last.wait_for(10s) != std::future_status::ready) {
      log.fail("the callback after the throwing ones did not run");
      return;
    }
    log.expect(last.get() == "ok", "the last callback saw an error");
    // Rank 0's op waited for its late peer: its callbacks ran on the lane,
    // where a throw must not end the lane either.
    if (rank == 0)
      log.expect(!ran_on_caller, "rank 0's callbacks ran in the caller");
    log.expect(x[0] == 3.0f && x[1023] == 3.0f,
               "allreduce result " + std::to_string(x[0]));
  });
}

TEST_CASE("a throwing callback on a handle that is complete already does "
          "not reach the caller") {
  auto run = [](const col::work& w) {
    int later = 0;
    CHECK_NOTHROW(w.on_complete(
      [](const caf::error&) { throw std::runtime_error("callback threw"); }));
    CHECK_NOTHROW(w.on_complete([&](const caf::error&) { ++later; }));
    CHECK(later == 1);
  };
  SUBCASE("a completed handle") {
    run(col::work::completed(7, {}));
  }
  SUBCASE("a refused op") {
    run(col::work::completed(
      0, col::make_error(col::errc::invalid_argument, "refused")));
  }
  SUBCASE("a handle of no op") {
    run(col::work{});
  }
}

namespace {

enum class last_op { allreduce, send };

/// Forms a 2-rank Gloo group `name`; rank 0 submits `op` and destroys the
/// group from that op's completion callback, which runs on rank 0's lane
/// (the main lane for an allreduce, the send lane for a send). Fails the
/// test (and ends the process, whose lane then waits forever) if the
/// destroy does not return within 30 s.
void destroy_from_callback(const std::string& name, last_op op) {
  auto store = col::make_in_process_store();
  std::promise<std::string> destroyed;
  auto outcome = destroyed.get_future();
  std::atomic<bool> ran_on_caller{false};
  std::string later_op;
  test::rank_result rank0;
  test::rank_result rank1;
  // Rank 0 has no member scope: its group is in the process table, where a
  // callback on its lane finds it by name (one member per process).
  std::thread rank0_thread{[&] {
    try {
      col::init_collective_group(2, 0, "gloo", name,
                                 test::group_options(store, 20s));
      auto grp = col::get_group(name);
      std::vector<float> x(1024, 1.0f);
      auto w = op == last_op::allreduce
                 ? col::allreduce_async(col::view_of(x), name)
                 : col::send_async(col::view_of(x), 1, name);
      auto caller = std::this_thread::get_id();
      w.on_complete([&, caller, grp](const caf::error& err) {
        ran_on_caller = std::this_thread::get_id() == caller;
        std::string what = err ? "op failed: " + col::render(err) + "; " : "";
        try {
          col::destroy_collective_group(name);
          // A handle kept from before runs nothing more.
          auto refused = grp->barrier({}).wait();
          later_op = refused
                       ? std::string{col::to_string(col::code_of(refused))}
                       : "ran";
          destroyed.set_value(what + "destroyed");
        } catch (const std::exception& e) {
          destroyed.set_value(what + "threw " + e.what());
        }
      });
      auto err = w.wait();
      rank0.log.expect(!err, "rank 0's op failed");
    } catch (...) {
      rank0.error = std::current_exception();
      try { // no callback to wait for: end the wait below at once
        destroyed.set_value("rank 0 failed: " + test::what_of(rank0.error));
      } catch (const std::future_error&) {
        // the callback ran after all
      }
    }
  }};
  std::thread rank1_thread{[&] {
    try {
      col::member_scope scope;
      col::init_collective_group(2, 1, "gloo", name,
                                 test::group_options(store, 20s));
      std::this_thread::sleep_for(late_peer);
      std::vector<float> x(1024, 2.0f);
      if (op == last_op::allreduce)
        col::allreduce(col::view_of(x), name);
      else
        col::recv(col::view_of(x), 0, name);
      rank1.log.expect(x[0] == (op == last_op::allreduce ? 3.0f : 1.0f),
                       "rank 1 got " + std::to_string(x[0]));
      col::destroy_collective_group(name);
    } catch (...) {
      rank1.error = std::current_exception();
    }
  }};
  if (outcome.wait_for(30s) != std::future_status::ready) {
    FAIL_CHECK("destroy_collective_group inside a completion callback on "
               "the group's own lane did not return within 30 s");
    std::fflush(stdout);
    std::fflush(stderr);
    // The lane waits for itself: nothing could join it. End here.
    std::_Exit(EXIT_FAILURE);
  }
  rank0_thread.join();
  rank1_thread.join();
  CHECK(outcome.get() == "destroyed");
  CHECK(later_op == "aborted");
  // Otherwise the callback ran inside on_complete, not on the lane, and
  // this test proved nothing.
  CHECK(!ran_on_caller);
  CHECK(!col::is_group_initialized(name));
  std::vector<test::rank_result> results;
  results.push_back(std::move(rank0));
  results.push_back(std::move(rank1));
  test::check_ranks(results);
}

} // namespace

TEST_CASE("destroying a group from a completion callback on its own lane "
          "returns and the process stays usable") {
  SUBCASE("the main lane: after an allreduce") {
    destroy_from_callback("self_destroy", last_op::allreduce);
  }
  SUBCASE("the send lane: after a send") {
    destroy_from_callback("self_destroy", last_op::send);
  }
  // The same name forms again and runs ops.
  test::run_group(2, "self_destroy", [](int rank, rank_log& log) {
    std::vector<float> x(16, static_cast<float>(rank + 1));
    col::allreduce(col::view_of(x), "self_destroy");
    log.expect(x[0] == 3.0f,
               "allreduce after re-forming gave " + std::to_string(x[0]));
  });
}

TEST_CASE("a callback run on another rank's thread cannot reach that rank's "
          "groups by name: it is refused naming the group handle") {
  // Ranks are threads with member scopes. Rank 1 arrives last through a
  // blocking allreduce and, in shm, finishes rank 0's started op on its own
  // thread, running rank 0's callback there. By-name calls in it resolved
  // in rank 1's table: get_rank said 1, an async allreduce joined rank 1's
  // group (rank 0 got rank 1's sum as success), and a destroy drained the
  // lane the thread itself held (a hang).
  auto store = col::make_in_process_store();
  std::atomic<bool> on_other_thread{false};
  std::string by_name; // what the by-name calls in the callback did
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "shm", "foreign_cb",
                               test::group_options(store, 10s));
    std::vector<float> x(16, static_cast<float>(rank + 1));
    if (rank == 0) {
      auto w = col::allreduce_async(col::view_of(x), "foreign_cb");
      auto caller = std::this_thread::get_id();
      w.on_complete([&, caller](const caf::error&) {
        on_other_thread = std::this_thread::get_id() != caller;
        try {
          by_name = "get_rank " + std::to_string(col::get_rank("foreign_cb"));
        } catch (const col::collective_error& e) {
          by_name = e.what();
        }
      });
      log.expect(!w.wait(), "rank 0's allreduce failed");
    } else {
      std::this_thread::sleep_for(late_peer);
      col::allreduce(col::view_of(x), "foreign_cb");
    }
    log.expect(x[0] == 3.0f, "allreduce gave " + std::to_string(x[0]));
    // Both groups are intact and usable by name on their own threads.
    log.expect(col::get_rank("foreign_cb") == rank, "get_rank changed");
    col::barrier("foreign_cb");
    col::destroy_collective_group("foreign_cb");
  });
  test::check_ranks(results);
  INFO(by_name);
  // Otherwise rank 0's callback ran on its own thread and proved nothing.
  REQUIRE(on_other_thread);
  CHECK(by_name.find("group 'foreign_cb' named from a completion callback "
                     "that runs on a thread acting for another member") !=
        std::string::npos);
  CHECK(by_name.find("get_group") != std::string::npos);
}
