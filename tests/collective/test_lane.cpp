// A group's lane (collective/src/runtime/lane.hpp): the thread that runs a
// group's ops in order, and the claim that lets a caller run one itself;
// and the rule of an op's work state on who may end it.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/sec.hpp>

#include "runtime/lane.hpp"
#include "runtime/work_state.hpp"

using namespace std::chrono_literals;
using caf_collective::detail::lane;

namespace {

// Waits up to 5 s for `done`.
bool eventually(const std::atomic<bool>& done) {
  auto until = std::chrono::steady_clock::now() + 5s;
  while (!done && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  return done;
}

} // namespace

TEST_CASE("a lane runs its tasks in posting order on its own thread") {
  std::mutex mtx;
  std::vector<int> order;
  std::atomic<bool> done{false};
  std::thread::id ran_on;
  lane l{"order"};
  for (int i = 0; i < 100; ++i)
    l.post([&, i] {
      std::lock_guard<std::mutex> guard{mtx};
      order.push_back(i);
      ran_on = std::this_thread::get_id();
    });
  l.post([&] { done = true; });
  REQUIRE(eventually(done));
  std::lock_guard<std::mutex> guard{mtx};
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i)
    CHECK(order[static_cast<size_t>(i)] == i);
  CHECK(ran_on != std::this_thread::get_id());
}

TEST_CASE("a task posted while a caller holds the lane runs after its "
          "release, and not before") {
  lane l{"claimed"};
  REQUIRE(l.try_claim());
  // Held: nothing else may claim it.
  CHECK_FALSE(l.try_claim());
  std::atomic<bool> ran{false};
  l.post([&] { ran = true; });
  // The lane thread had time to run it, and must not have.
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(ran);
  l.release();
  // The release wakes the thread: the post did not (the lane was claimed).
  CHECK(eventually(ran));
}

TEST_CASE("a lane with queued or running work cannot be claimed") {
  lane l{"busy"};
  std::atomic<bool> go{false};
  std::atomic<bool> started{false};
  std::atomic<bool> done{false};
  l.post([&] {
    started = true;
    while (!go)
      std::this_thread::sleep_for(1ms);
  });
  l.post([&] { done = true; });
  REQUIRE(eventually(started));
  CHECK_FALSE(l.try_claim()); // running, and one more queued
  go = true;
  REQUIRE(eventually(done));
  // Idle again: a claim succeeds once the thread let go of its last task.
  auto until = std::chrono::steady_clock::now() + 5s;
  bool claimed = false;
  while (!claimed && std::chrono::steady_clock::now() < until)
    claimed = l.try_claim();
  CHECK(claimed);
  if (claimed) l.release();
}

TEST_CASE("a lane that goes away runs every task posted before") {
  std::atomic<int> ran{0};
  {
    lane l{"drain"};
    for (int i = 0; i < 50; ++i)
      l.post([&] {
        std::this_thread::sleep_for(100us);
        ++ran;
      });
  }
  CHECK(ran == 50);
}

namespace {

// Posts a task to `l` and waits until it ran.
bool run_one(lane& l) {
  std::atomic<bool> done{false};
  l.post([&] { done = true; });
  return eventually(done);
}

} // namespace

TEST_CASE("a lane that just ran a task picks up the next one without "
          "sleeping") {
  auto start = std::chrono::steady_clock::now();
  {
    lane l{"polls", 10s};
    // The first task may be queued before the new thread first looks.
    REQUIRE(run_one(l));
    auto before = l.pickups();
    std::this_thread::sleep_for(5ms);
    REQUIRE(run_one(l));
    auto seen = l.pickups();
    CHECK(seen.polled == before.polled + 1);
    CHECK(seen.woken == before.woken);
  }
  // Going away ends the poll at once, not after its 10 s window.
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("a lane stops polling after a window that went by empty, and "
          "polls again once a task comes within the window") {
  lane l{"adapts", 200ms};
  REQUIRE(run_one(l));
  auto first = l.pickups(); // the first task may come before a first look
  std::this_thread::sleep_for(600ms);
  REQUIRE(run_one(l)); // the poll ran out: the thread slept
  CHECK(l.pickups().woken == first.woken + 1);
  // It did not poll after that task (the gap was longer than the window),
  // so this one wakes it again, but comes soon after the last one.
  REQUIRE(run_one(l));
  CHECK(l.pickups().woken == first.woken + 2);
  std::this_thread::sleep_for(10ms);
  REQUIRE(run_one(l)); // within the window: found while polling
  auto seen = l.pickups();
  CHECK(seen.polled == first.polled + 1);
  CHECK(seen.woken == first.woken + 2);
}

TEST_CASE("a lane without a poll window sleeps between tasks") {
  lane l{"sleeps", 0us};
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(5ms);
    REQUIRE(run_one(l));
  }
  auto seen = l.pickups();
  CHECK(seen.polled == 0);
  CHECK(seen.woken == 3);
}

TEST_CASE("no more lanes poll at once than the process has CPUs") {
  auto cap = lane::max_polling();
  REQUIRE(cap >= 1);
  std::vector<std::unique_ptr<lane>> lanes;
  for (int i = 0; i < cap + 2; ++i)
    lanes.push_back(std::make_unique<lane>("cap." + std::to_string(i), 10s));
  for (auto& l : lanes)
    REQUIRE(run_one(*l));
  std::this_thread::sleep_for(50ms); // every lane polls or sleeps by now
  uint64_t polled = 0;
  uint64_t woken = 0;
  for (auto& l : lanes) {
    polled -= l->pickups().polled;
    woken -= l->pickups().woken;
  }
  for (auto& l : lanes)
    REQUIRE(run_one(*l));
  for (auto& l : lanes) {
    polled += l->pickups().polled;
    woken += l->pickups().woken;
  }
  CHECK(polled == static_cast<uint64_t>(cap));
  CHECK(woken == 2);
}

// ctest also runs this case with CAF_COLLECTIVE_LANE_POLL_US set, good and
// bad, and says in CAF_COLLECTIVE_TEST_EXPECT_POLL_US what the window must
// be then (tests/collective/CMakeLists.txt): the value is read once per
// process, so each setting needs a process of its own.
TEST_CASE("the default poll window comes from CAF_COLLECTIVE_LANE_POLL_US") {
  const char* expected = std::getenv("CAF_COLLECTIVE_TEST_EXPECT_POLL_US");
  if (expected == nullptr && std::getenv("CAF_COLLECTIVE_LANE_POLL_US")) {
    MESSAGE("CAF_COLLECTIVE_LANE_POLL_US is set outside ctest's runs of "
            "this case: nothing to compare with");
    return;
  }
  auto want = expected ? std::chrono::microseconds{std::atoll(expected)}
                       : std::chrono::microseconds{100};
  CHECK(lane::default_poll_window() == want);
}

// -- work states: who may end an op ------------------------------------------
// An abort ends the ops that have not started; a running op ends only when
// the thread that runs it says so, since until then its buffers are in use
// (group::abort, docs/api.md).

TEST_CASE("an op that an abort ended before it started never starts") {
  caf_collective::detail::work_state state{7};
  REQUIRE(state.claim_unstarted());
  state.complete(caf::make_error(caf::sec::runtime_error));
  CHECK_FALSE(state.start());
}

TEST_CASE("an abort leaves a running op to the thread that runs it") {
  caf_collective::detail::work_state state{7};
  REQUIRE(state.start());
  CHECK_FALSE(state.claim_unstarted());
  CHECK_FALSE(state.done());
  CHECK_FALSE(state.start()); // nor can it be claimed for running twice
}

TEST_CASE("an op handed back to its lane unstarted can be ended by an "
          "abort again") {
  caf_collective::detail::work_state state{7};
  REQUIRE(state.start());
  state.unstart();
  CHECK(state.claim_unstarted());
  CHECK_FALSE(state.start());
}
