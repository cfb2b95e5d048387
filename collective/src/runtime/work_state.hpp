// Shared state behind `work` handles: set once by the lane, read by waiters.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
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

  /// Claims a queued op for running, before anything touches its buffers:
  /// false if an abort ended it first (it must not run at all).
  bool start() noexcept {
    auto expected = phase::queued;
    return phase_.compare_exchange_strong(expected, phase::running,
                                          std::memory_order_acq_rel);
  }

  /// Undoes start() for an op handed back to its lane unstarted.
  void unstart() noexcept {
    phase_.store(phase::queued, std::memory_order_release);
  }

  /// Claims an op that has not started for ending it (the caller then
  /// completes it), or says that it runs or ran. An abort ends queued ops at
  /// once; a running one ends when its backend call returns, since until
  /// then the backend may still use its buffers (whoever waits on the handle
  /// may free them once it completes).
  bool claim_unstarted() noexcept {
    auto expected = phase::queued;
    return phase_.compare_exchange_strong(expected, phase::ended_unstarted,
                                          std::memory_order_acq_rel);
  }

 private:
  friend class caf_collective::work;

  enum class phase : uint8_t { queued, running, ended_unstarted };

  std::atomic<phase> phase_{phase::queued};
  const uint64_t seq_;
  std::mutex mtx_;
  std::condition_variable cv_;
  // Set under mtx_, after err_: a reader that sees it set (acquire) may read
  // err_ without the lock, which is never written again.
  std::atomic<bool> done_{false};
  caf::error err_;
  struct registered_callback {
    work::callback fn;
    const void* member; // who registered it (callback_member.hpp)
  };
  std::vector<registered_callback> callbacks_;
};

} // namespace caf_collective::detail
