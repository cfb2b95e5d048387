// Time read cheaply, where a few milliseconds of precision are enough:
// op history stamps and the deadlines of ops whose timeouts are given in
// milliseconds. A steady_clock::now() costs ~20 ns here (a third of a
// one-rank shm allreduce, docs/benchmarks.md "Fewer clock reads and
// locks per op"); the coarse clock ~5 ns.
#pragma once

#include <chrono>

namespace caf_collective::detail {

/// CLOCK_MONOTONIC read coarsely: the clock of libstdc++'s steady_clock,
/// never ahead of steady_clock::now() and behind it by at most
/// coarse_tick().
std::chrono::steady_clock::time_point coarse_now() noexcept;

/// The coarse clock's resolution (the kernel's tick, 4 ms at 250 Hz).
std::chrono::steady_clock::duration coarse_tick() noexcept;

/// The deadline `timeout` from now, for comparison with
/// steady_clock::now(): never earlier than now + timeout, at most one tick
/// later.
inline std::chrono::steady_clock::time_point
coarse_deadline(std::chrono::steady_clock::duration timeout) noexcept {
  return coarse_now() + coarse_tick() + timeout;
}

} // namespace caf_collective::detail
