#include "caf_collective/work.hpp"

#include "runtime/work_state.hpp"

namespace caf_collective {

namespace detail {

void work_state::complete(caf::error err) {
  std::vector<work::callback> callbacks;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (done_.load(std::memory_order_relaxed)) return;
    err_ = std::move(err);
    done_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& fn : callbacks)
    fn(err_);
}

} // namespace detail

work::work(std::shared_ptr<detail::work_state> state)
  : state_(std::move(state)) {
  // nop
}

work work::completed(uint64_t seq, caf::error err) {
  auto state = std::make_shared<detail::work_state>(seq);
  state->complete(std::move(err));
  return work{std::move(state)};
}

uint64_t work::seq() const noexcept {
  return state_ ? state_->seq() : 0;
}

bool work::ready() const {
  return state_->done();
}

caf::error work::wait() const {
  // An op run on the caller is over before its handle is returned.
  if (!state_->done()) {
    std::unique_lock<std::mutex> guard{state_->mtx_};
    state_->cv_.wait(guard, [this] { return state_->done(); });
  }
  return state_->err_;
}

bool work::wait_for(std::chrono::milliseconds timeout) const {
  if (state_->done()) return true;
  std::unique_lock<std::mutex> guard{state_->mtx_};
  return state_->cv_.wait_for(guard, timeout,
                              [this] { return state_->done(); });
}

void work::on_complete(callback fn) const {
  {
    std::lock_guard<std::mutex> guard{state_->mtx_};
    if (!state_->done()) {
      state_->callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn(state_->err_);
}

} // namespace caf_collective
