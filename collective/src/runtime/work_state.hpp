// Shared state behind `work` handles: set once by the lane, read by waiters.
#pragma once

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

  bool done() {
    std::lock_guard<std::mutex> guard{mtx_};
    return done_;
  }

  /// Sets the result (first call wins), wakes waiters, runs callbacks.
  void complete(caf::error err);

 private:
  friend class caf_collective::work;

  const uint64_t seq_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool done_ = false;
  caf::error err_;
  std::vector<work::callback> callbacks_;
};

} // namespace caf_collective::detail
