#include "backends/gloo/gloo_op_watchdog.hpp"

namespace caf_collective::detail {

op_watchdog::op_watchdog(std::function<void()> ring)
  : ring_(std::move(ring)), thread_([this] { run(); }) {
  // nop
}

op_watchdog::~op_watchdog() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

bool op_watchdog::watch(size_t slot, uint64_t seq, clock::time_point deadline) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto& w = watched_[slot];
    if (w.active && w.seq == seq) return false;
    w = watched{true, false, seq, deadline};
    wake = deadline < sleeps_until_;
  }
  if (wake) cv_.notify_one();
  return true;
}

bool op_watchdog::unwatch(size_t slot) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& w = watched_[slot];
  w.active = false;
  return w.expired;
}

bool op_watchdog::expired(size_t slot, uint64_t seq) {
  std::lock_guard<std::mutex> guard{mtx_};
  const auto& w = watched_[slot];
  return w.expired && w.seq == seq;
}

void op_watchdog::run() {
  std::unique_lock<std::mutex> guard{mtx_};
  while (!stopping_) {
    auto now = clock::now();
    auto next = clock::time_point::max();
    bool passed = false;
    for (auto& w : watched_) {
      if (!w.active || w.expired) continue;
      if (w.deadline <= now) {
        w.expired = true;
        passed = true;
      } else if (w.deadline < next) {
        next = w.deadline;
      }
    }
    if (passed) {
      // Outside the lock: failing the connections wakes the op's thread,
      // which then asks expired().
      guard.unlock();
      ring_();
      guard.lock();
      continue;
    }
    sleeps_until_ = next;
    if (next == clock::time_point::max())
      cv_.wait(guard);
    else
      cv_.wait_until(guard, next);
  }
}

} // namespace caf_collective::detail
