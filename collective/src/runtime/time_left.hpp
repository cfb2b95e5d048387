// The milliseconds left until a deadline, never negative: what a wait that
// is bounded by a deadline passes on as its timeout.
#pragma once

#include <algorithm>
#include <chrono>

namespace caf_collective::detail {

inline std::chrono::milliseconds
time_left(std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::milliseconds{0},
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()));
}

/// time_left rounded up: a wait that starts right away gets its whole
/// timeout, and its error names it ("within 1000 ms", not 999).
inline std::chrono::milliseconds
time_left_rounded_up(std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::milliseconds{0},
                  std::chrono::ceil<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()));
}

/// The longest wait a store keeps to: added to now, milliseconds::max()
/// ("wait for ever") would wrap the clock into the past and end at once.
inline constexpr std::chrono::milliseconds longest_wait =
  std::chrono::hours{24 * 365 * 100};

inline std::chrono::milliseconds bounded_wait(std::chrono::milliseconds t) {
  return std::min(t, longest_wait);
}

} // namespace caf_collective::detail
