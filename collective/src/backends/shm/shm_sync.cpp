// shm backend: sync steps, waiting, agreement, abort and failure detection.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <numeric>
#include <thread>

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backends/shm/shm_backend.hpp"
#include "backends/shm/shm_cpu.hpp"
#include "vocabulary/cpu_relax.hpp"

namespace caf_collective::detail::shm {

namespace {

// Iterations of the spin before a waiter sleeps: long enough for a peer on
// another core to answer a small op, short enough that 8 ranks on 2 cores
// do not burn their time slices (measured in docs/benchmarks.md).
constexpr int spin_iterations = 2000;

// The spin's limit in time. With other threads ready on this CPU a yield
// may hand over a whole time slice: 2000 of them (a missing rank last ran
// here, so every iteration yields) took 4 s under two busy loops, past the
// op's 3 s deadline, and the spin looks for neither aborts, dead peers nor
// the deadline. Unloaded, the spin takes about 100 us.
constexpr auto spin_limit = std::chrono::microseconds{200};

// A sleeping waiter wakes at least this often to check the deadline, the
// abort mark and whether its peers are alive.
constexpr auto sleep_slice = std::chrono::milliseconds{20};

// Starts fetching `lines` cache lines from `first` into this core's cache
// for reading; it changes nothing that the program can observe.
void fetch_ahead(const std::byte* first, size_t lines) noexcept {
  for (size_t l = 0; l < lines; ++l)
    __builtin_prefetch(first + l * cache_line, 0, 3);
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value,
           const timespec* timeout) noexcept {
  // Not FUTEX_PRIVATE: the word is shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value,
                 timeout, nullptr, 0);
}

// "allreduce (sum) of 4 float32", "broadcast of 8 int32 from root 1".
std::string describe(const op_notice& n) {
  auto op = static_cast<op_kind>(n.op);
  auto type = static_cast<dtype>(n.type);
  std::string result{is_valid(op) ? to_string(op) : "an unknown op"};
  if (op == op_kind::allreduce || op == op_kind::reduce ||
      op == op_kind::reduce_scatter)
    result +=
      " (" + std::string{to_string(static_cast<reduce_op>(n.reduce))} + ")";
  result +=
    " of " + std::to_string(n.count) + " " + std::string{to_string(type)};
  if (op == op_kind::broadcast || op == op_kind::reduce ||
      op == op_kind::gather || op == op_kind::scatter)
    result += " with root " + std::to_string(n.root);
  return result;
}

// A pidfd turns readable when its process ends, zombie or not; without one
// (kernels before 5.3) a reaped process is gone from kill's view.
bool process_gone(int32_t pid, int pidfd) noexcept {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return kill(pid, 0) != 0 && errno == ESRCH;
}

} // namespace

error_context shm_backend::context(op_kind op,
                                   const op_call* call) const noexcept {
  if (call == nullptr) // formation: no op
    return error_context::member(group_name_, rank_, world_size_);
  return {group_name_, op, static_cast<int64_t>(call->seq), rank_, world_size_};
}

void shm_backend::ring() noexcept {
  ring_bell(seg_.header());
}

void ring_bell(segment_header& h) noexcept {
  // Paired with the fence of a waiter between counting itself in
  // `sleepers` and its last look at the flags: either it sees what the
  // caller just wrote, or we see it and wake it. Nobody asleep: no shared
  // write and no system call.
#ifdef CAF_COLLECTIVE_SHM_TSAN
  // TSan does not model fences; a read-modify-write orders the same way.
  auto asleep = h.sleepers.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto asleep = h.sleepers.load(std::memory_order_relaxed);
#endif
  if (asleep > 0) {
    h.bell.fetch_add(1, std::memory_order_relaxed);
    futex(&h.bell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

caf::error shm_backend::dead_peer_error(op_kind op, const op_call* call,
                                        const std::vector<int>& ranks) const {
  auto dead = gone_among(ranks);
  auto left_word = [this](int r) {
    return seg_.control(r).left_word.load(std::memory_order_acquire) != 0;
  };
  if (std::any_of(dead.begin(), dead.end(), left_word)) {
    // Some of them aborted before their process ended (survivors that gave
    // up): name the ranks that died without leaving word, if this rank can
    // see any.
    std::vector<int> silent;
    for (int r = 0; r < world_size_; ++r)
      if (!left_word(r)) silent.push_back(r);
    if (silent = gone_among(silent); !silent.empty())
      dead = std::move(silent);
    else if (first_aborter().rank >= 0)
      // Only ranks that left word have gone, and the abort mark is whole:
      // it says who left and why (the caller reads it). A process that
      // exits after it left is no death to report, however soon this rank
      // notices the exit.
      return {};
  }
  if (dead.empty()) return {};
  return make_error(
    errc::peer_lost, context(op, call),
    (dead.size() == 1 ? "the process of rank " + std::to_string(dead[0])
                      : "the processes of ranks " + list_ranks(dead)) +
      " died (pid " + std::to_string(pids_[size_t(dead[0])]) + ")");
}

caf::error shm_backend::failure_if_any(op_kind op, const op_call* call,
                                       const std::vector<int>& waiting_for) {
  if (formation_cancel_ != nullptr &&
      formation_cancel_->load(std::memory_order_acquire))
    abort("the group was aborted while forming"); // the peers learn it too
  if (aborted_.load(std::memory_order_acquire))
    return make_error(errc::aborted, context(op, call),
                      "backend aborted: " + abort_reason_);
  if (auto err = dead_peer_error(op, call, waiting_for)) return err;
  // After the dead-process check: a survivor that saw a death first and
  // aborted its group must not hide which rank died.
  auto mark = first_aborter();
  auto by = mark.rank;
  if (by < 0) return {};
  // This rank's own mark while it has not aborted: the watchdog's, for an
  // op it started without waiting (arrival_hub::expire).
  if (by == rank_)
    return make_error(errc::timeout, context(op, call),
                      std::string{own_timeout_text});
  auto code = mark.code;
  if (code == errc::peer_lost) {
    // It lost a peer, maybe one this rank does not wait for (it waits for
    // the survivor that gave up): name the dead if this rank sees them too.
    std::vector<int> everyone(static_cast<size_t>(world_size_));
    std::iota(everyone.begin(), everyone.end(), 0);
    if (auto err = dead_peer_error(op, call, everyone)) return err;
  }
  if (code == errc::timeout && !waiting_for.empty() &&
      std::find(waiting_for.begin(), waiting_for.end(), by) ==
        waiting_for.end())
    // It gave up on the same ranks this rank waits for: the same timeout.
    // Not if this rank waits for it: it timed out on someone else, and
    // left (below).
    return make_error(errc::timeout, context(op, call),
                      "ranks " + list_ranks(waiting_for) +
                        " did not arrive; rank " + std::to_string(by) +
                        " timed out waiting for them and left the group");
  return make_error(errc::peer_lost, context(op, call),
                    "rank " + std::to_string(by) + " left the group (" +
                      std::string{to_string(code)} + ")");
}

shm_backend::aborter shm_backend::first_aborter() const noexcept {
  auto mark = seg_.header().abort_mark.load(std::memory_order_seq_cst);
  if (mark == 0) return {};
  return {abort_mark_rank(mark), static_cast<errc>(abort_mark_code(mark))};
}

std::vector<int> shm_backend::gone_among(const std::vector<int>& ranks) const {
  std::vector<int> result;
  for (int r : ranks)
    if (pids_[size_t(r)] > 0 && pids_[size_t(r)] != pids_[size_t(rank_)] &&
        process_gone(pids_[size_t(r)], pidfds_[size_t(r)]))
      result.push_back(r);
  return result;
}

caf::error shm_backend::wait_until(function_ref<bool()> ready,
                                   function_ref<std::vector<int>()> laggards,
                                   op_kind op, const op_call* call,
                                   lazy_deadline& deadline,
                                   const bool* yield_now) {
  // Where the peers are there already, the clock is not read at all.
  if (ready()) {
    take_announcements();
    return {};
  }
  auto started = clock::now();
  auto give_up = deadline.given(started);
  auto spin_until = started + spin_limit;
  // Pauses first: ready() was just false.
  for (int i = 0; i < spin_iterations; ++i) {
    // A peer on this CPU cannot arrive while we spin: let it run. The
    // clock is read only after a yield, the part that may take long.
    bool peer_beside = yield_now != nullptr && *yield_now;
    if (peer_beside || i % 64 == 63) {
      // Better than yielding to it: leave it this CPU and run beside it.
      if (peer_beside) step_off_shared_cpu(world_size_);
      std::this_thread::yield();
      if (clock::now() >= spin_until) break;
    } else {
      cpu_relax();
    }
    if (ready()) {
      take_announcements();
      return {};
    }
  }
  auto& h = seg_.header();
  for (;;) {
    auto bell = h.bell.load(std::memory_order_seq_cst);
    if (ready()) {
      take_announcements();
      return {};
    }
    if (auto err = failure_if_any(op, call, laggards())) {
      failed_code_.store(code_of(err));
      return err;
    }
    auto now = clock::now();
    if (now >= give_up) {
      auto missing = laggards();
      failed_code_.store(errc::timeout);
      // No call: a step of the formation, bound by its deadline.
      return make_error(errc::timeout, context(op, call),
                        call ? not_arrived_text(call->timeout, missing)
                             : "ranks " + list_ranks(missing) +
                                 " did not reach this step of the formation "
                                 "by its deadline (not started, stopped or "
                                 "too slow)");
    }
    auto slice = std::min<clock::duration>(give_up - now, sleep_slice);
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice);
    timespec ts{static_cast<time_t>(ns.count() / 1000000000),
                static_cast<long>(ns.count() % 1000000000)};
    h.sleepers.fetch_add(1, std::memory_order_seq_cst);
#ifndef CAF_COLLECTIVE_SHM_TSAN
    std::atomic_thread_fence(std::memory_order_seq_cst); // see ring()
#endif
    // An abort rings after its mark: one that came since the look above
    // found nobody asleep, so look for its mark too, or sleep a slice.
    if (!ready() && !aborted_anywhere()) futex(&h.bell, FUTEX_WAIT, bell, &ts);
    h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

caf::error shm_backend::step(op_state& st) {
  auto target = ++epoch_;
  auto& mine = seg_.control(rank_);
  auto cpu = sched_getcpu();
  mine.line(target).cpu.store(cpu, std::memory_order_relaxed);
  announce();
  mine.line(target).epoch.store(target, std::memory_order_release);
  if (hub_) hub_->arrived(rank_).store(target, std::memory_order_release);
  ring();
  bool beside = false; // a rank still missing last ran on this CPU
  // A peer that reached an op's first step has published its slot input:
  // fetching what this rank reads of it at once overlaps that transfer with
  // the wait for the other ranks and with the way out of the step, where
  // the reads would wait for it later (0.02-0.08 us of a 0.5 us op at
  // 64-128 B, benchmarks.md "Slot lines fetched ahead"). Not before it
  // reached the step: that measured no gain (the line is taken from its
  // writer before the write, presumably). Not the lines this rank does not
  // read: their writer would have to take them back before its next write.
  auto ahead = target == st.first_epoch && st.how == path::small && st.reads
                 ? lines_of(*st.reads)
                 : line_span{};
  auto ready = [this, &st, target, cpu, &beside, ahead] {
    bool all = true;
    beside = false;
    for (int r = 0; r < world_size_; ++r) {
      auto& c = seg_.control(r);
      if (!c.reached(target, std::memory_order_acquire)) {
        all = false;
        beside |= c.cpu_before(target) == cpu;
      } else if (ahead.count > 0 && r != rank_ &&
                 c.line(target).input_inline == 0) {
        fetch_ahead(seg_.small_slot(r, st.parity()) + ahead.first, ahead.count);
      }
    }
    return all;
  };
  auto laggards = [this, target] {
    std::vector<int> result;
    for (int r = 0; r < world_size_; ++r)
      if (!seg_.control(r).reached(target, std::memory_order_acquire))
        result.push_back(r);
    return result;
  };
  if (auto err =
        wait_until(ready, laggards, st.op, st.call, st.deadline, &beside))
    return leave_after(std::move(err));
  // A rank that aborted may have stepped before: its op failed, so the
  // group is broken for this op too (small ops end with this step).
  if (seg_.header().abort_mark.load(std::memory_order_acquire) != 0)
    if (auto err = failure_if_any(st.op, st.call, {}))
      return leave_after(std::move(err));
  return {};
}

caf::error shm_backend::begin(op_state& st, op_notice notice,
                              std::span<const uint64_t> counts,
                              std::span<const std::byte> payload) {
  st.first_epoch = epoch_ + 1;
  auto parity = st.parity();
  notice.seq = st.call->seq;
  if (!counts.empty())
    std::copy(counts.begin(), counts.end(), seg_.counts(rank_, parity));
  // Small ops need nothing more than this step: their data rides along.
  publish(parity, notice, payload);
  if (!st.reads) st.reads = slot_window{0, payload.size()};
  if (auto err = step(st)) return err;
  // Every rank published before stepping; nobody overwrites this parity
  // before every rank passed this op's last step.
  auto mismatch = disagreement(parity);
  if (hub_) serve_arrivals(st.first_epoch, mismatch);
  if (mismatch.empty()) return {};
  return make_error(errc::mismatch, context(st.op, st.call), mismatch);
}

void shm_backend::publish(int parity, const op_notice& notice,
                          std::span<const std::byte> payload) noexcept {
  auto& mine = seg_.control(rank_);
  mine.notice[parity] = notice;
  auto& line = mine.sync[parity];
  // An odd multiplier: ops that differ in number only get different keys.
  line.key = notice.key + notice.seq * 0x9e3779b97f4a7c15ull;
  line.no_waiter = notice.no_waiter;
  bool on_line = payload.size() <= inline_input_bytes;
  line.input_inline = on_line ? 1 : 0;
  if (payload.empty()) return;
  if (on_line)
    std::memcpy(line.inline_input, payload.data(), payload.size());
  else if (payload.size() <= seg_.small_bytes())
    std::memcpy(seg_.small_slot(rank_, parity), payload.data(), payload.size());
}

std::string shm_backend::disagreement(int parity) const {
  // The common case allocates nothing, and reads only the sync lines.
  auto first = seg_.control(0).sync[parity].key;
  bool same = true;
  for (int r = 1; r < world_size_; ++r)
    same = same && seg_.control(r).sync[parity].key == first;
  if (same) return {};
  std::map<uint64_t, std::vector<int>> keys;
  for (int r = 0; r < world_size_; ++r)
    keys[seg_.control(r).sync[parity].key].push_back(r);
  if (out_of_step(parity)) {
    std::string detail = "ranks are out of step:";
    for (const auto& [key, ranks] : keys)
      detail += " ranks " + list_ranks(ranks) + " are at op " +
                std::to_string(seg_.control(ranks[0]).notice[parity].seq) + ",";
    detail.pop_back();
    // Every later op of theirs meets another's too: each fails the same
    // way, at once, until the group is formed again.
    return detail + " of this group (a rank refused an op its peers ran, "
                    "such as a bad argument on one rank only): destroy the "
                    "group and form it again";
  }
  std::string detail = "ranks disagree on the operation's arguments:";
  for (const auto& [key, ranks] : keys)
    detail += " ranks " + list_ranks(ranks) + " called " +
              describe(seg_.control(ranks[0]).notice[parity]) + ";";
  detail.pop_back();
  return detail;
}

bool shm_backend::out_of_step(int parity) const noexcept {
  const auto& first = seg_.control(0).notice[parity];
  for (int r = 1; r < world_size_; ++r)
    if (seg_.control(r).notice[parity].key != first.key) return false;
  return true; // the same op, so the keys differ in its number
}

byte_range single_copy_range(op_kind op, int world_size, int cpus) noexcept {
  constexpr size_t kib = 1024;
  switch (op) {
    case op_kind::broadcast:
      if (world_size >= 3 && world_size <= cpus) return {64 * kib, 128 * kib};
      break;
    case op_kind::allreduce: return {1, 0}; // empty
    case op_kind::reduce: return {64 * kib, 128 * kib};
    case op_kind::reduce_scatter:
      return {64 * kib, world_size == 2 ? 1024 * kib : 128 * kib};
    case op_kind::allgather:
      if (world_size >= 4) return {64 * kib, 128 * kib};
      break;
    default: break;
  }
  return {world_size == 2 ? 8 * kib : 64 * kib, 8192 * kib};
}

shm_backend::path shm_backend::path_for(op_kind op,
                                        size_t longest) const noexcept {
  if (longest <= seg_.small_bytes()) return path::small;
  if (direct_) return path::direct;
  if (single_copy_ && single_copy_range(op, world_size_, cpus_).holds(longest))
    return path::single_copy;
  return path::staged;
}

caf::error shm_backend::start_reading(const op_state& st) {
  if (st.how != path::direct && st.how != path::single_copy) return {};
  auto& mine = seg_.control(rank_).reading;
  mine.store(1, std::memory_order_seq_cst);
  // Paired with abort(): either the aborting rank sees our mark and waits,
  // or we see its abort and read nothing.
  if (auto err = failure_if_any(st.op, st.call, {}))
    return leave_after(std::move(err)); // which clears our mark too
  if (reading_test_hook != nullptr) [[unlikely]]
    reading_test_hook(*this);
  return {};
}

void shm_backend::stop_reading(const op_state& st) noexcept {
  if (st.how == path::direct || st.how == path::single_copy) {
    announce();
    seg_.control(rank_).reading.store(0, std::memory_order_release);
  }
}

caf::error shm_backend::leave_after(caf::error err) {
  failed_code_.store(code_of(err));
  if (direct_ || single_copy_) {
    // This rank reads nothing more: two ranks that fail at once (a third
    // died while both read from it) must not wait for each other.
    announce();
    seg_.control(rank_).reading.store(0, std::memory_order_release);
    // An abort from another thread that came first may still be waiting
    // for the readers, and this op's caller frees its buffers next: wait
    // too. An abort made here waited already (twice would double the bound
    // for a stopped reader in another process).
    if (!abort_first(render(err))) wait_for_readers();
  }
  return err;
}

void shm_backend::abort(std::string_view why) {
  abort_first(why);
}

bool shm_backend::abort_first(std::string_view why) {
  if (abort_begun_.exchange(true, std::memory_order_acq_rel)) {
    // The first abort sets aborted_ before the mark: an op that saw the
    // flag and aborts too waits for the mark (a few instructions away).
    while (!abort_published_.load(std::memory_order_acquire))
      std::this_thread::yield();
    return false;
  }
  abort_reason_ = std::string{why};
  // Before the segment's mark: a finisher that sees the mark ends this
  // rank's started op with this reason.
  if (hub_) hub_->at(rank_).abort_reason = abort_reason_;
  // Sequentially consistent, like the loads of fail_all and the stores of
  // arrive(): of an abort and an arrival at once, at least one sees the
  // other, so the arriving op cannot slip past both.
  aborted_.store(true, std::memory_order_seq_cst);
  // The first rank to abort breaks the group for its peers too: they fail
  // at once instead of reading buffers its caller is about to free. It
  // tells them why: after its own timeout they report the same timeout.
  // An op of this rank that the watchdog ended at its deadline failed
  // with timeout as surely as one that waited.
  if (hub_ && hub_->at(rank_).timed_out.load(std::memory_order_acquire) &&
      failed_code_.load() == errc::aborted)
    failed_code_.store(errc::timeout);
  auto& h = seg_.header();
  uint64_t none = 0;
  seg_.control(rank_).left_word.store(1, std::memory_order_seq_cst);
  announce();
  h.abort_mark.compare_exchange_strong(
    none, make_abort_mark(rank_, static_cast<uint32_t>(failed_code_.load())),
    std::memory_order_seq_cst);
  abort_published_.store(true, std::memory_order_release);
  ring();
  if (hub_) {
    // Ops started without blocking have nobody waiting to see the mark:
    // end them now, on every rank, as a finisher that sees the mark would.
    // Then make sure no finisher still writes into this rank's output.
    auto mark = first_aborter();
    hub_->fail_all(rank_, mark.rank, mark.code);
    hub_->wait_unclaimed(rank_);
  }
  // Direct and single copy: a peer may be copying out of our buffers right
  // now. Our caller frees them once we return, so wait until no peer reads
  // (a copy takes far less than this bound even for gigabytes; a dead
  // reader reads nothing).
  wait_for_readers();
  return true;
}

void shm_backend::wait_for_readers() {
  if (!direct_ && !single_copy_) return;
  // A reader in this process is a thread that copies or reduces between
  // its marks and never waits there for this rank (at most 1 s for the
  // reason of a peer in another process whose memory it could not read,
  // shm_single_copy.cpp): it finishes, however long a large op takes on a
  // crowded host. Our caller may unmap the buffers as soon as
  // we return, which would crash that thread: wait for it without a bound.
  // A reader in another process may be stopped (SIGSTOP) between two of
  // its reads and hold its mark for ever: at most 5 s for it. A late read
  // of freed memory can only spoil its own output, and its op then fails
  // at its next step, which sees that this rank left.
  auto until = clock::now() + std::chrono::seconds{5};
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    bool same_process = pids_[size_t(r)] == pids_[size_t(rank_)];
    for (int spins = 0;
         seg_.control(r).reading.load(std::memory_order_seq_cst) != 0 &&
         (same_process ||
          (clock::now() < until &&
           !process_gone(pids_[size_t(r)], pidfds_[size_t(r)])));
         ++spins) {
      // A long copy: leave the CPU to it rather than spin beside it.
      if (spins < 1024)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds{100});
    }
  }
  take_announcements(); // the readers are done with our buffers
}

caf::error shm_backend::finish_formation(const std::string& segment_name,
                                         clock::time_point deadline,
                                         const std::atomic<bool>* cancel) {
  formation_cancel_ = cancel;
  auto formed = finish_formation_steps(segment_name, deadline);
  formation_cancel_ = nullptr;
  return formed;
}

caf::error shm_backend::finish_formation_steps(const std::string& segment_name,
                                               clock::time_point deadline) {
  auto& h = seg_.header();
  h.attached.fetch_add(1, std::memory_order_acq_rel);
  ring();
  auto ready = [&] {
    return h.attached.load(std::memory_order_acquire) >=
           static_cast<uint32_t>(world_size_);
  };
  auto laggards = [&] {
    std::vector<int> result;
    for (int r = 0; r < world_size_; ++r)
      if (seg_.control(r).pid == 0) result.push_back(r);
    return result;
  };
  auto until = lazy_deadline::fixed(deadline);
  if (auto err =
        wait_until(ready, laggards, op_kind::barrier, nullptr, until)) {
    seg_.unlink();
    return err;
  }
  for (int r = 0; r < world_size_; ++r) {
    pids_[size_t(r)] = seg_.control(r).pid;
    if (pids_[size_t(r)] != pids_[size_t(rank_)])
      pidfds_[size_t(r)] =
        static_cast<int>(syscall(SYS_pidfd_open, pids_[size_t(r)], 0));
  }
  direct_ = std::all_of(pids_.begin(), pids_.end(),
                        [&](int32_t pid) { return pid == pids_[0]; });
  if (direct_) {
    hub_ = arrival_hub::of(segment_name, group_name_, world_size_);
    hub_->attach_header(rank_, &seg_.header());
    served_.resize(seg_.small_bytes());
  }
  if (!direct_)
    if (auto err = agree_on_single_copy(deadline)) {
      seg_.unlink();
      return err;
    }
  // Every rank has the segment mapped: a killed process leaves nothing.
  seg_.unlink();
  return {};
}

} // namespace caf_collective::detail::shm
