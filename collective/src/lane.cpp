#include "lane.hpp"

#include <pthread.h>

namespace caf_collective::detail {

lane::lane(const std::string& name) : state_(std::make_shared<queue_state>()) {
  thread_ = std::thread{[state = state_] { run(state); }};
  // Thread names show up in gdb, perf and top; Linux allows 15 characters.
  auto short_name = ("col:" + name).substr(0, 15);
  pthread_setname_np(thread_.native_handle(), short_name.c_str());
}

lane::~lane() {
  {
    std::lock_guard<std::mutex> guard{state_->mtx};
    state_->stopping = true;
  }
  state_->cv.notify_one();
  if (thread_.joinable()) {
    if (on_lane())
      thread_.detach();
    else
      thread_.join();
  }
}

void lane::post(task fn) {
  {
    std::lock_guard<std::mutex> guard{state_->mtx};
    state_->tasks.push_back(std::move(fn));
  }
  state_->cv.notify_one();
}

void lane::run(std::shared_ptr<queue_state> state) {
  std::unique_lock<std::mutex> guard{state->mtx};
  for (;;) {
    state->cv.wait(guard,
                   [&] { return state->stopping || !state->tasks.empty(); });
    if (state->tasks.empty()) return; // stopping and drained
    auto fn = std::move(state->tasks.front());
    state->tasks.pop_front();
    guard.unlock();
    fn();
    fn = nullptr; // release captures before taking the lock again
    guard.lock();
  }
}

} // namespace caf_collective::detail
