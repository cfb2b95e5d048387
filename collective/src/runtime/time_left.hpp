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

} // namespace caf_collective::detail
