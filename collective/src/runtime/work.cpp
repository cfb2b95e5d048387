#include "caf_collective/work.hpp"

#include <exception>

#include "caf_collective/error.hpp"
#include "runtime/callback_member.hpp"
#include "runtime/lane.hpp"
#include "runtime/time_left.hpp"
#include "runtime/work_state.hpp"
#include "vocabulary/log.hpp"

namespace caf_collective {

namespace detail {

namespace {

// Runs one completion callback. A callback that throws must not end the
// process (the lane runs callbacks from task_scope's destructor, which is
// noexcept), take the other callbacks of its op with it, or surface in an
// unrelated caller of on_complete: it is logged, naming the op's sequence
// number (the handle knows no more of its op), and the next one runs.
void run_callback(const work::callback& fn, const caf::error& err, uint64_t seq,
                  const void* member) noexcept {
  auto report = [seq](const char* what) noexcept {
    try {
      static auto& log = logger_for("work");
      log.error("a completion callback of op #{} threw ({}); the exception "
                "is dropped and the remaining callbacks still run",
                seq, what);
    } catch (...) {
      // Nowhere left to report to: dropping it is still better than
      // std::terminate.
    }
  };
  // A callback may run inside a blocking call of another rank or op (the
  // last arrival finishes the others' ops): an op it submits is not that
  // call's to run inline.
  run_inline_scope not_blocking{false};
  // By-name calls act for the member that registered the callback, or are
  // refused where this thread acts for another (callback_member.hpp).
  callback_member_scope acting_for{member};
  try {
    fn(err);
  } catch (const std::exception& e) {
    report(e.what());
  } catch (...) {
    report("an exception of an unknown type");
  }
}

} // namespace

void work_state::complete(caf::error err) {
  std::vector<registered_callback> callbacks;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (done_.load(std::memory_order_relaxed)) return;
    err_ = std::move(err);
    done_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& cb : callbacks)
    run_callback(cb.fn, err_, seq_, cb.member);
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
  // Bounded: added to now, a timeout near milliseconds::max() ("as long as
  // it takes") overflowed and returned false at once.
  return state_->cv_.wait_for(guard, detail::bounded_wait(timeout),
                              [this] { return state_->done(); });
}

void work::on_complete(callback fn) const {
  auto member = detail::calling_member();
  if (done_here_) {
    detail::run_callback(fn, err_here_, seq_here_, member);
    return;
  }
  if (!state_) {
    detail::run_callback(fn, no_operation(), 0, member);
    return;
  }
  {
    std::lock_guard<std::mutex> guard{state_->mtx_};
    if (!state_->done()) {
      state_->callbacks_.push_back({std::move(fn), member});
      return;
    }
  }
  detail::run_callback(fn, state_->err_, state_->seq(), member);
}

} // namespace caf_collective
