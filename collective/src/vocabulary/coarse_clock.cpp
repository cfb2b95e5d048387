#include "vocabulary/coarse_clock.hpp"

#include <ctime>

namespace caf_collective::detail {

namespace {

std::chrono::steady_clock::duration since_boot(const timespec& ts) noexcept {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
    std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec});
}

} // namespace

std::chrono::steady_clock::time_point coarse_now() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point{since_boot(ts)};
}

std::chrono::steady_clock::duration coarse_tick() noexcept {
  static const auto tick = [] {
    timespec ts{};
    // Without an answer, assume the slowest common tick (100 Hz).
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0)
      return std::chrono::steady_clock::duration{std::chrono::milliseconds{10}};
    return since_boot(ts);
  }();
  return tick;
}

} // namespace caf_collective::detail
