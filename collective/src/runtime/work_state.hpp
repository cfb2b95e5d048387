// Shared state behind `work` handles: set once by the lane, read by waiters.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "caf_collective/work.hpp"

namespace caf_collective::detail {

class work_state {
 public:
  explicit work_state(uint64_t seq) : seq_(seq) {
    // nop
  }

  uint64_t seq() const noexcept { return seq_; }

  bool done() const noexcept { return done_.load(std::memory_order_acquire); }

  /// Sets the result (first call wins), wakes waiters, runs callbacks.
  void complete(caf::error err);

 private:
  friend class caf_collective::work;

  const uint64_t seq_;
  std::mutex mtx_;
  std::condition_variable cv_;
  // Set under mtx_, after err_: a reader that sees it set (acquire) may read
  // err_ without the lock, which is never written again.
  std::atomic<bool> done_{false};
  caf::error err_;
  std::vector<work::callback> callbacks_;
};

} // namespace caf_collective::detail
