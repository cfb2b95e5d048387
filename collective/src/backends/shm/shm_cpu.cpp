#include "backends/shm/shm_cpu.hpp"

#include <chrono>

#include <sched.h>

namespace caf_collective::detail::shm {

bool step_off_shared_cpu(int ranks) noexcept {
  using clock = std::chrono::steady_clock;
  thread_local clock::time_point last_move{};
  auto now = clock::now();
  if (now - last_move < std::chrono::milliseconds{1}) return false;
  last_move = now;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  if (CPU_COUNT(&allowed) < ranks) return false;
  auto cpu = sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) return false;
  cpu_set_t elsewhere = allowed;
  CPU_CLR(cpu, &elsewhere);
  // Leaving the current CPU out of the mask migrates the thread at once;
  // the full mask again does not move it back.
  if (sched_setaffinity(0, sizeof(elsewhere), &elsewhere) != 0) return false;
  sched_setaffinity(0, sizeof(allowed), &allowed);
  return true;
}

} // namespace caf_collective::detail::shm
