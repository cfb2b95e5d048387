// A lane: one thread that runs one member's operations of one group, in
// order, outside CAF's scheduler (docs/algorithms.md, docs/api.md).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/error.hpp>

namespace caf_collective::detail {

class work_state;

class lane {
 public:
  using task = std::function<void()>;

  /// How long a lane thread that finished a task keeps looking for the
  /// next one before it sleeps: CAF_COLLECTIVE_LANE_POLL_US microseconds
  /// (0 turns polling off), 100 by default.
  static std::chrono::microseconds default_poll_window();

  /// At most this many lanes of the process poll at once: the CPUs this
  /// process may run on. The others sleep right after their task.
  static int max_polling();

  /// `poll_window`: see default_poll_window().
  explicit lane(const std::string& name,
                std::chrono::microseconds poll_window = default_poll_window());

  /// Runs every task already posted, then joins the thread. If the last
  /// owner lets go on the lane itself (from a completion callback), the
  /// thread finishes the queue on its own and exits.
  ~lane();

  lane(const lane&) = delete;
  lane& operator=(const lane&) = delete;

  /// Queues `fn`; tasks run one at a time in posting order.
  void post(task fn);

  /// Queues `fn` ahead of every task queued so far. Only for the holder of
  /// a claim that hands its op to the lane after all: whatever was posted
  /// while it held the lane came after that op.
  void post_ahead(task fn);

  /// Lets the caller run one task itself, in order: succeeds only if the
  /// lane is idle and nothing is queued. Tasks posted meanwhile wait until
  /// `release`. The blocking API uses this to save two thread hand-offs.
  bool try_claim();

  /// Ends a successful `try_claim`.
  void release();

  /// Completes `state` with `err` once the lane task this thread runs is
  /// over and its lane is free again (right away on a thread that runs no
  /// lane task): whoever learns of the completion and submits the next op
  /// finds the lane idle, so that op may run on the submitter's thread.
  static void complete_when_idle(std::shared_ptr<work_state> state,
                                 caf::error err);

  /// While alive, `complete_when_idle` on this thread defers to its
  /// destruction: the lane thread holds one around each task, a caller
  /// running a task on a claimed lane holds one until after `release`.
  class task_scope {
   public:
    task_scope() noexcept;
    ~task_scope();
    task_scope(const task_scope&) = delete;
    task_scope& operator=(const task_scope&) = delete;

   private:
    struct completion {
      std::shared_ptr<work_state> state;
      caf::error err;
    };
    task_scope* outer_;
    // A task completes one op: the first needs no allocation.
    completion first_;
    std::vector<completion> more_;
    friend class lane;
  };

  /// How the lane thread found its tasks so far: while polling after the
  /// previous one, or woken from sleep (a wake-up costs the poster a
  /// system call and the task the time its CPU takes to leave idle).
  struct task_pickups {
    uint64_t polled = 0;
    uint64_t woken = 0;
  };
  task_pickups pickups() const noexcept {
    return {state_->polled.load(std::memory_order_relaxed),
            state_->woken.load(std::memory_order_relaxed)};
  }

  /// Whether the caller runs on this lane's thread.
  bool on_lane() const noexcept {
    return std::this_thread::get_id() == thread_.get_id();
  }

 private:
  // Shared with the thread, so a detached thread never touches a dead lane.
  struct queue_state {
    std::mutex mtx;
    std::condition_variable cv;
    std::deque<task> tasks;
    // Flags and the number of queued tasks in one word, so that a claim
    // and its release are one atomic operation each: claimed (a caller
    // runs a task itself) | busy (the lane thread runs one) | stopping |
    // tasks * one_task. It changes under mtx, except in try_claim(),
    // release() and at the end of a task; the thread's wait reads it under
    // mtx, which release() takes before it notifies.
    static constexpr uint32_t claimed = 1;
    static constexpr uint32_t busy = 2;
    static constexpr uint32_t stopping = 4;
    static constexpr uint32_t one_task = 8;
    std::atomic<uint32_t> word{0};
    std::chrono::microseconds poll_window{0};
    std::atomic<uint64_t> polled{0};
    std::atomic<uint64_t> woken{0};

    /// Whether the thread may run a task or must stop.
    static bool has_work(uint32_t w) noexcept {
      return (w & claimed) == 0 && ((w & stopping) != 0 || w >= one_task);
    }
  };

  static void run(std::shared_ptr<queue_state> state);

  /// Spins (politely) up to the poll window for work; true if it came.
  static bool poll_for_work(const queue_state& state);

  std::shared_ptr<queue_state> state_;
  std::thread thread_;
};

/// While alive, operations submitted by this thread may run on it instead
/// of their lane (when the lane is idle): set by the blocking API, which
/// waits for the result anyway.
class run_inline_scope {
 public:
  /// `allowed` false takes the license away for the scope: for code that
  /// runs on a blocking caller's thread on someone else's behalf (a
  /// completion callback), whose async submits must stay async.
  explicit run_inline_scope(bool allowed = true) noexcept;
  ~run_inline_scope();
  run_inline_scope(const run_inline_scope&) = delete;
  run_inline_scope& operator=(const run_inline_scope&) = delete;

  /// Whether the calling thread's innermost run_inline_scope allows it.
  static bool active() noexcept;

 private:
  bool previous_;
};

} // namespace caf_collective::detail
