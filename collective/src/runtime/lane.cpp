#include "runtime/lane.hpp"

#include <pthread.h>

#include "runtime/work_state.hpp"

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
    state_->word.fetch_or(queue_state::stopping);
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
  bool wake = false;
  {
    std::lock_guard<std::mutex> guard{state_->mtx};
    state_->tasks.push_back(std::move(fn));
    // A claimed lane cannot run the task yet, and release() wakes the
    // thread for it. Waking it now too (a member posting a large op right
    // before it lets go of the lane it claimed) cost a second wake-up and
    // a fight for this mutex per op.
    auto before = state_->word.fetch_add(queue_state::one_task);
    wake = (before & queue_state::claimed) == 0;
  }
  if (wake) state_->cv.notify_one();
}

bool lane::try_claim() {
  // Idle means no flag and no task: one compare-and-swap, no lock (the
  // blocking API claims the lane for every small op).
  uint32_t idle = 0;
  return state_->word.compare_exchange_strong(idle, queue_state::claimed);
}

void lane::release() {
  auto before = state_->word.fetch_and(~queue_state::claimed);
  // The lane thread sleeps until a task or the stop comes; it needs a
  // wake-up only if one came while the caller ran its task. Waking it
  // after every inline op cost a context switch per op (measured: 2
  // ranks as processes, 8 B allreduce 5.8-9.1 us -> 1.4 us).
  if (before < queue_state::one_task && (before & queue_state::stopping) == 0)
    return;
  {
    // Taken only to wake: the thread checks its condition under the lock,
    // so it either sees the claim gone or is asleep when we notify.
    std::lock_guard<std::mutex> guard{state_->mtx};
  }
  state_->cv.notify_one();
}

void lane::run(std::shared_ptr<queue_state> state) {
  std::unique_lock<std::mutex> guard{state->mtx};
  for (;;) {
    state->cv.wait(guard, [&] {
      auto word = state->word.load();
      return (word & queue_state::claimed) == 0 &&
             ((word & queue_state::stopping) != 0 ||
              word >= queue_state::one_task);
    });
    if (state->tasks.empty()) return; // stopping and drained
    auto fn = std::move(state->tasks.front());
    state->tasks.pop_front();
    // One task fewer and busy in one step: a claim never sees the lane
    // idle in between.
    state->word.fetch_sub(queue_state::one_task - queue_state::busy);
    guard.unlock();
    {
      task_scope completions; // announced once the lane is free again
      fn();
      fn = nullptr; // release captures before the lane counts as idle
      state->word.fetch_sub(queue_state::busy);
    }
    guard.lock();
  }
}

namespace {

thread_local lane::task_scope* current_scope = nullptr;

} // namespace

lane::task_scope::task_scope() noexcept : outer_(current_scope) {
  current_scope = this;
}

lane::task_scope::~task_scope() {
  current_scope = outer_;
  if (first_.state) first_.state->complete(std::move(first_.err));
  for (auto& x : more_)
    x.state->complete(std::move(x.err));
}

void lane::complete_when_idle(std::shared_ptr<work_state> state,
                              caf::error err) {
  auto* scope = current_scope;
  if (scope == nullptr)
    state->complete(std::move(err));
  else if (!scope->first_.state)
    scope->first_ = {std::move(state), std::move(err)};
  else
    scope->more_.push_back({std::move(state), std::move(err)});
}

namespace {

thread_local bool inline_allowed = false;

} // namespace

run_inline_scope::run_inline_scope() noexcept : previous_(inline_allowed) {
  inline_allowed = true;
}

run_inline_scope::~run_inline_scope() {
  inline_allowed = previous_;
}

bool run_inline_scope::active() noexcept {
  return inline_allowed;
}

} // namespace caf_collective::detail
