// Pacing of the backend's polling loops. Every wait of the NCCL backend
// (the caller's stream, a device slot, communicator init, a launch, a
// completion, a teardown, the unique id in the store) polls instead of
// blocking, so a deadline or an abort is noticed within about a
// millisecond and no thread ever sits inside a call it cannot leave.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "caf_collective/options.hpp"

namespace caf_collective::detail {

/// Yields for the first 100 us, so a small collective is seen within
/// microseconds, then sleeps with a growing interval up to 1 ms, so a long
/// wait costs the waiting thread almost no CPU.
class backoff {
 public:
  void pause() {
    using namespace std::chrono_literals;
    auto spent = std::chrono::steady_clock::now() - start_;
    if (spent < 100us) {
      std::this_thread::yield();
      return;
    }
    sleep_ = std::min<std::chrono::microseconds>(
      sleep_ == 0us ? 10us : sleep_ * 2, 1000us);
    std::this_thread::sleep_for(sleep_);
  }

 private:
  std::chrono::steady_clock::time_point start_ =
    std::chrono::steady_clock::now();
  std::chrono::microseconds sleep_{0};
};

inline std::string ms_text(milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

} // namespace caf_collective::detail
