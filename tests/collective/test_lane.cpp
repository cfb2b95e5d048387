// A group's lane (collective/src/runtime/lane.hpp): the thread that runs a
// group's ops in order, and the claim that lets a caller run one itself.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/lane.hpp"

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
