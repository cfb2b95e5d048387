// Ends a Gloo op at its own deadline. Gloo bounds each wait inside an op by
// the timeout it is given, not the op: a gather's root waits for its peers
// one after the other, a ring waits once per step, and our own ops chain
// several of Gloo's (the agreement headers, then the payload). A peer that
// is slow at every step stretches an op to many times its timeout.
//
// One thread per group watches the ops in flight (at most one per lane:
// the group's and its send lane) and, at the first deadline passed, rings:
// the backend fails its connections as Gloo itself does when one wait times
// out, which wakes every wait of the group. The op then reports its own
// timeout (expired()).
//
// Cost on the op's path: two short critical sections. Ops that follow each
// other with the same timeout never wake the thread: it wakes at the
// deadline it waits for, finds a later one and waits again.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace caf_collective::detail {

class op_watchdog {
 public:
  using clock = std::chrono::steady_clock;

  /// The ops of the group's lane and of its send lane.
  static constexpr size_t slots = 2;

  /// `ring` runs on the watchdog's thread, without its lock held, once an
  /// op's deadline passed.
  explicit op_watchdog(std::function<void()> ring);

  /// Stops and joins the thread.
  ~op_watchdog();

  op_watchdog(const op_watchdog&) = delete;
  op_watchdog& operator=(const op_watchdog&) = delete;

  /// Watches op `seq` in `slot` until `deadline`. False when the slot
  /// watches that op already (a later stage of the same op: its deadline
  /// stays the first stage's).
  bool watch(size_t slot, uint64_t seq, clock::time_point deadline);

  /// Ends the watch of `slot`; true when its op ran past its deadline.
  bool unwatch(size_t slot);

  /// Whether op `seq` of `slot` ran past its deadline.
  bool expired(size_t slot, uint64_t seq);

 private:
  struct watched {
    bool active = false;
    bool expired = false;
    uint64_t seq = 0;
    clock::time_point deadline{};
  };

  void run();

  std::mutex mtx_;
  std::condition_variable cv_;
  std::array<watched, slots> watched_{};
  // The deadline the thread sleeps until: a watch that ends later needs no
  // wake-up (the thread finds it when it wakes).
  clock::time_point sleeps_until_ = clock::time_point::max();
  bool stopping_ = false;
  std::function<void()> ring_;
  std::thread thread_; // last: starts once the members above exist
};

} // namespace caf_collective::detail
