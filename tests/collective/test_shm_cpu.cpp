// The shm waiter's nudge off a CPU it shares with a peer
// (collective/src/backends/shm/shm_cpu.hpp): it moves the thread, leaves
// its affinity mask as it was, and holds back where moving cannot help.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <sched.h>

#include "backends/shm/shm_cpu.hpp"

using caf_collective::detail::shm::step_off_shared_cpu;

namespace {

cpu_set_t mask_of_this_thread() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(sched_getaffinity(0, sizeof(mask), &mask) == 0);
  return mask;
}

bool same(const cpu_set_t& a, const cpu_set_t& b) {
  return CPU_EQUAL(&a, &b);
}

// Runs `fn` on a fresh thread: each thread has its own rate limit.
template<class Fn>
void on_fresh_thread(Fn fn) {
  std::thread{fn}.join();
}

} // namespace

TEST_CASE("a nudge leaves the thread's affinity mask as it was, and holds "
          "back for 1 ms after a move") {
  on_fresh_thread([] {
    using clock = std::chrono::steady_clock;
    auto before = mask_of_this_thread();
    auto cpus = CPU_COUNT(&before);
    auto t0 = clock::now();
    auto moved = step_off_shared_cpu(2);
    CHECK(same(mask_of_this_thread(), before));
    // Two ranks fit wherever the thread may run on two CPUs.
    CHECK(moved == (cpus >= 2));
    if (moved) {
      auto again = step_off_shared_cpu(2);
      // Judged only if both calls fit in the 1 ms: a loaded machine (or a
      // sanitizer) may take longer for the move itself.
      if (clock::now() - t0 < std::chrono::milliseconds{1})
        CHECK_FALSE(again);
      else
        MESSAGE("the 1 ms hold was not judged: the calls took longer");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
    CHECK(step_off_shared_cpu(2) == (cpus >= 2));
    CHECK(same(mask_of_this_thread(), before));
  });
}

TEST_CASE("no nudge where the ranks outnumber the thread's CPUs") {
  on_fresh_thread([] {
    auto before = mask_of_this_thread();
    CHECK_FALSE(step_off_shared_cpu(CPU_COUNT(&before) + 1));
    CHECK(same(mask_of_this_thread(), before));
  });
  // A thread its owner pinned to one CPU stays there.
  on_fresh_thread([] {
    auto all = mask_of_this_thread();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
    CHECK_FALSE(step_off_shared_cpu(2));
    CHECK(same(mask_of_this_thread(), one));
    sched_setaffinity(0, sizeof(all), &all);
  });
}
