#include "runtime/lane.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>

#include "runtime/work_state.hpp"
#include "vocabulary/cpu_relax.hpp"
#include "vocabulary/log.hpp"
#include "vocabulary/parse_number.hpp"

namespace caf_collective::detail {

std::chrono::microseconds lane::default_poll_window() {
  static const auto window = [] {
    constexpr std::chrono::microseconds fallback{100};
    const char* env = std::getenv("CAF_COLLECTIVE_LANE_POLL_US");
    if (env == nullptr || *env == '\0') return fallback;
    // Strict: a typo must not turn polling off unnoticed.
    if (auto us = parse_non_negative<int64_t>(env))
      return std::chrono::microseconds{*us};
    logger_for("lane").warn("CAF_COLLECTIVE_LANE_POLL_US='{}' is not a "
                            "number of microseconds >= 0; using {}",
                            env, fallback.count());
    return fallback;
  }();
  return window;
}

lane::lane(const std::string& name, std::chrono::microseconds poll_window)
  : state_(std::make_shared<queue_state>()) {
  state_->poll_window = std::max(std::chrono::microseconds{0}, poll_window);
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

void lane::post_ahead(task fn) {
  std::lock_guard<std::mutex> guard{state_->mtx};
  state_->tasks.push_front(std::move(fn));
  // Claimed: release() wakes the thread for it.
  state_->word.fetch_add(queue_state::one_task);
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

namespace {

// Lanes of this process polling right now.
std::atomic<int> lanes_polling{0};

} // namespace

int lane::max_polling() {
  static const int cap = [] {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
      return std::max(1, CPU_COUNT(&allowed));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return cap;
}

bool lane::poll_for_work(const queue_state& state) {
  using clock = std::chrono::steady_clock;
  // More pollers than CPUs would only take turns at spinning, and take
  // the CPUs from the threads that are to post (a process with many
  // groups on few cores): beyond that the lane sleeps at once.
  if (lanes_polling.fetch_add(1) >= max_polling()) {
    lanes_polling.fetch_sub(1);
    return false;
  }
  struct leave_polling {
    ~leave_polling() { lanes_polling.fetch_sub(1); }
  } polling_slot;
  auto until = clock::now() + state.poll_window;
  for (int i = 1;; ++i) {
    if (queue_state::has_work(state.word.load())) return true;
    // Yields often: on a machine with more busy threads than cores, the
    // thread that is to post the next task may need this CPU.
    if (i % 16 == 0) {
      std::this_thread::yield();
      if (clock::now() >= until) return false;
    } else {
      cpu_relax();
    }
  }
}

void lane::run(std::shared_ptr<queue_state> state) {
  using clock = std::chrono::steady_clock;
  // A thread woken from sleep costs its poster a system call (~10 us on
  // a VM, where waking an idle CPU is an inter-processor interrupt) and
  // the task the time that CPU takes to leave idle (30-60 us here). A
  // member's ops come in bursts, so after a task the thread looks for the
  // next one a while before it sleeps (docs/benchmarks.md, "Lanes that
  // look for their next op"). It stops looking after a window that went
  // by empty, until a task comes within the window again.
  bool poll = state->poll_window.count() > 0;
  std::unique_lock<std::mutex> guard{state->mtx};
  for (;;) {
    if (!queue_state::has_work(state->word.load())) {
      bool found = false;
      if (poll) {
        guard.unlock();
        found = poll_for_work(*state);
        guard.lock();
      }
      if (found) {
        state->polled.fetch_add(1, std::memory_order_relaxed);
      } else {
        auto idle_since = clock::now();
        state->cv.wait(
          guard, [&] { return queue_state::has_work(state->word.load()); });
        state->woken.fetch_add(1, std::memory_order_relaxed);
        poll = state->poll_window.count() > 0 &&
               clock::now() - idle_since <= state->poll_window;
      }
    }
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

run_inline_scope::run_inline_scope(bool allowed) noexcept
  : previous_(inline_allowed) {
  inline_allowed = allowed;
}

run_inline_scope::~run_inline_scope() {
  inline_allowed = previous_;
}

bool run_inline_scope::active() noexcept {
  return inline_allowed;
}

} // namespace caf_collective::detail
