// The completion handle of an asynchronous operation.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include <caf/error.hpp>

namespace caf_collective {

namespace detail {
class work_state;
} // namespace detail

/// Completion handle of one submitted operation. Copies share the state.
/// The buffers an operation uses must stay alive until it has completed.
class work {
 public:
  using callback = std::function<void(const caf::error&)>;

  /// A handle that refers to no operation (valid() is false): it is
  /// ready, and wait() and on_complete report invalid_argument.
  work() = default;
  explicit work(std::shared_ptr<detail::work_state> state);

  /// A handle that is complete already, with `err` (none: success).
  static work completed(uint64_t seq, caf::error err);

  /// The group sequence number the operation runs under.
  uint64_t seq() const noexcept;

  bool valid() const noexcept { return state_ != nullptr || done_here_; }

  /// Whether the operation has finished (successfully or not).
  bool ready() const;

  /// Blocks the calling thread until the operation finished; returns its
  /// error (none on success). Never call this from a CAF scheduler thread.
  caf::error wait() const;

  /// Waits at most `timeout`; returns whether the operation finished.
  bool wait_for(std::chrono::milliseconds timeout) const;

  /// Runs `fn` once the operation finished: on the thread that completes
  /// it (the group's lane; for a small shm op of ranks in one process, the
  /// thread of whichever rank arrived last, possibly inside that rank's own
  /// call), or right away in the caller if it is complete already. `fn`
  /// must not block; actors use it to send themselves a message.
  ///
  /// A callback that throws is contained: its exception is logged (logger
  /// "caf_collective.work", error level, naming the op's sequence number)
  /// and dropped, and the op's later callbacks still run. It never reaches
  /// the thread that completes the op (a lane, where it would end the
  /// process) nor the caller of on_complete on a handle that is complete
  /// already.
  ///
  /// A callback may destroy the op's group (destroy_collective_group). On
  /// one of the group's own lanes, close() cannot wait for that lane: it
  /// refuses later ops at once and shuts the backend down on the lane,
  /// after the ops still queued there (whose buffers must stay alive until
  /// their own handles complete).
  void on_complete(callback fn) const;

 private:
  // Set while the op may still be running, shared by the copies.
  std::shared_ptr<detail::work_state> state_;
  // A handle complete before it was returned (a refused op, or one run on
  // the caller's thread) holds its result itself: no allocation, no lock.
  bool done_here_ = false;
  uint64_t seq_here_ = 0;
  caf::error err_here_;
};

} // namespace caf_collective
