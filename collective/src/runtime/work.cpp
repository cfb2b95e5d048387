#include "caf_collective/work.hpp"

#include "caf_collective/error.hpp"
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

namespace {

// What a default-constructed handle, which refers to no op, reports.
caf::error no_operation() {
  return make_error(errc::invalid_argument,
                    "this work handle refers to no operation (it was "
                    "default-constructed, not returned by an op)");
}

} // namespace

work::work(std::shared_ptr<detail::work_state> state)
  : state_(std::move(state)) {
  // nop
}

work work::completed(uint64_t seq, caf::error err) {
  work result;
  result.done_here_ = true;
  result.seq_here_ = seq;
  result.err_here_ = std::move(err);
  return result;
}

uint64_t work::seq() const noexcept {
  if (done_here_) return seq_here_;
  return state_ ? state_->seq() : 0;
}

bool work::ready() const {
  return done_here_ || !state_ || state_->done();
}

caf::error work::wait() const {
  if (done_here_) return err_here_;
  if (!state_) return no_operation();
  if (!state_->done()) {
    std::unique_lock<std::mutex> guard{state_->mtx_};
    state_->cv_.wait(guard, [this] { return state_->done(); });
  }
  return state_->err_;
}

bool work::wait_for(std::chrono::milliseconds timeout) const {
  if (done_here_ || !state_ || state_->done()) return true;
  std::unique_lock<std::mutex> guard{state_->mtx_};
  return state_->cv_.wait_for(guard, timeout,
                              [this] { return state_->done(); });
}

void work::on_complete(callback fn) const {
  if (done_here_) {
    fn(err_here_);
    return;
  }
  if (!state_) {
    fn(no_operation());
    return;
  }
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
