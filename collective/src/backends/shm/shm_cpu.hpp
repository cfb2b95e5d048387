// Where a waiting rank runs. Two ranks that share one CPU while the host
// has a CPU for each pay two context switches per sync step (the waiter
// yields, the peer runs, and back), and they stay that way: both tasks
// are hot, so the kernel's load balancer leaves them together. At small
// sizes that is 2.2-3 us per op instead of 0.7 (docs/benchmarks.md,
// "Small sizes: two modes").
#pragma once

namespace caf_collective::detail::shm {

/// Moves the calling thread to another of the CPUs it may run on, right
/// now, and lets it run anywhere again: a nudge, not a pin (the thread's
/// affinity mask is the same afterwards). Does nothing, and says so, when
/// the thread may run on fewer than `ranks` CPUs (sharing is then
/// unavoidable) or moved less than 1 ms ago (if the other CPUs are busy,
/// moving again at once would not help; with 10 ms, a whole series of
/// small ops ran shared before the next move was allowed).
bool step_off_shared_cpu(int ranks) noexcept;

} // namespace caf_collective::detail::shm
