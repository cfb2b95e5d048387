// A lane: one thread that runs one member's operations of one group, in
// order, outside CAF's scheduler (architecture.md, section 4).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace caf_collective::detail {

class lane {
 public:
  using task = std::function<void()>;

  explicit lane(const std::string& name);

  /// Runs every task already posted, then joins the thread. If the last
  /// owner lets go on the lane itself (from a completion callback), the
  /// thread finishes the queue on its own and exits.
  ~lane();

  lane(const lane&) = delete;
  lane& operator=(const lane&) = delete;

  /// Queues `fn`; tasks run one at a time in posting order.
  void post(task fn);

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
    bool stopping = false;
  };

  static void run(std::shared_ptr<queue_state> state);

  std::shared_ptr<queue_state> state_;
  std::thread thread_;
};

} // namespace caf_collective::detail
