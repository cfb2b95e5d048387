// Ops started without blocking on the shm backend (backend::start_*), for
// ranks that all live in one process. Private to the shm backend.
//
// A rank that must not wait (an actor member on a CAF scheduler thread)
// publishes its small op exactly as the blocking path does (agreement key
// and input in its small slot), records here how to tell its owner, steps
// its epoch and returns. Whoever sees the step complete first finishes the
// op for every rank that did not wait: the last rank to arrive without
// waiting, or a waiting rank once its step passed. It reduces (or copies)
// the result from the small slots once, writes it into each such rank's
// output and calls their completions. No thread is woken, no rank sleeps.
//
// A record's owner learns of the end exactly once: from the finisher, from
// abort (any rank's, at once), or from the watchdog thread at the op's
// deadline. Each of them first claims the record; only a claim lets it
// touch the owner's output or completion.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "caf_collective/backend.hpp"
#include "caf_collective/error.hpp"

namespace caf_collective::detail::shm {

struct segment_header;

/// Why a later op of a rank fails once the watchdog ended an op the rank
/// started without waiting.
inline constexpr std::string_view own_timeout_text =
  "an op this rank started without waiting timed out at its deadline, "
  "which broke the group";

/// The text of a timeout, whether the op's rank waited or not: "not
/// finished within T ms: ranks [...] did not arrive (...)".
std::string not_arrived_text(milliseconds timeout,
                             const std::vector<int>& missing);

/// One rank's op in flight without a waiting thread.
struct arrival {
  /// The epoch the op waits for; with `claimed` set while a claimer ends
  /// it; 0 when the rank has no such op.
  std::atomic<uint64_t> waiting_for{0};
  /// Steady-clock ticks; atomic: the watchdog reads it unclaimed.
  std::atomic<int64_t> deadline{0};
  // Written by the owner before it publishes; read after a claim.
  op_completion done;
  op_kind op = op_kind::barrier;
  uint64_t seq = 0;
  milliseconds timeout{0};
  /// What the owner's caller said when it aborted the group: written once,
  /// before the owner marks the group aborted in the segment.
  std::string abort_reason;
  /// Set by the watchdog when it ended the owner's op at its deadline: the
  /// owner's abort then tells the peers "timeout", as a rank that timed
  /// out waiting does.
  std::atomic<bool> timed_out{false};
};

/// The arrivals of one group's ranks in this process, shared by their
/// backends (and watched by the watchdog thread).
class arrival_hub {
 public:
  using clock = std::chrono::steady_clock;

  static constexpr uint64_t claimed = uint64_t{1} << 63;

  arrival_hub(std::string group, int world_size);

  /// The hub of the group whose segment is named `segment_name`, created by
  /// the first rank of this process that asks.
  static std::shared_ptr<arrival_hub>
  of(const std::string& segment_name, const std::string& group, int world_size);

  /// Rank `r`'s record: its owner fills it, then publishes.
  arrival& at(int r) noexcept { return arrivals_[size_t(r)]; }

  /// Makes rank `r`'s op (waiting for epoch `target`) visible to finishers.
  void publish(int r, uint64_t target, clock::time_point deadline) noexcept;

  /// Takes the right to end rank `r`'s op if it still waits for `target`.
  bool claim(int r, uint64_t target) noexcept;

  /// Ends a claimed op: frees the record, then calls its completion.
  void finish(int r, caf::error err);

  /// Ends rank `r`'s op with an error of `code` whose context names it.
  void fail(int r, errc code, const std::string& text);

  /// Ends rank `r`'s claimed op because the group was aborted: rank `by`
  /// aborted first, for `cause` (the failure that made it give up, or
  /// `aborted` when its caller asked). `own` is a rank that aborted too and
  /// whose reason is known here (the caller of abort), or -1: the ops of
  /// `own` and `by` end with `aborted` and their callers' reasons (`by`'s
  /// with `timeout` when the watchdog marked the group in its name: it may
  /// be writing its reason right now), every other one with the loss of
  /// `by` (or the same timeout, when `by` timed out).
  void fail_aborted(int r, int own, int by, errc cause);

  /// Claims and ends every op in flight as fail_aborted does: rank `own`
  /// calls abort.
  void fail_all(int own, int by, errc cause);

  /// Ends ops whose deadline passed with `timeout` (the watchdog), and
  /// marks the group aborted by their rank in the segment, as a rank that
  /// timed out waiting does: a peer that comes later must fail rather than
  /// complete the op its peer reported as timed out.
  void expire(clock::time_point now);

  /// Rank `r`'s mapping of the group's segment header, which the watchdog
  /// marks through; set from formation until the rank's backend goes.
  void attach_header(int r, segment_header* header);
  void detach_header(int r);

  /// True for exactly one caller per epoch: it finishes that epoch's ops.
  bool win(uint64_t target) noexcept;

  /// Waits while a claimer still ends rank `r`'s op (it may write its
  /// output): an aborting rank's buffers are freed once abort returns.
  void wait_unclaimed(int r) const noexcept;

  /// An address for rank `r` that every rank of the group in this process
  /// agrees on and that lives as long as any of their backends: the key of
  /// the ThreadSanitizer annotations (shm_tsan.hpp). A rank's own fields
  /// would not do: a peer may still take its announcements while the rank's
  /// backend is gone.
  const void* sync_key(int r) const noexcept { return &arrivals_[size_t(r)]; }

  /// The epoch each rank reached, for the watchdog's error text.
  std::atomic<uint64_t>& arrived(int r) noexcept {
    return arrived_[size_t(r)].epoch;
  }

 private:
  std::string group_;
  int world_size_;
  std::unique_ptr<arrival[]> arrivals_;
  // One cache line each: every rank writes its own at every step.
  struct alignas(64) arrived_epoch {
    std::atomic<uint64_t> epoch{0};
  };
  std::unique_ptr<arrived_epoch[]> arrived_;
  std::atomic<uint64_t> won_epoch_{0};
  // By rank; null once that rank's backend (and its mapping) is gone.
  std::mutex headers_mtx_;
  std::vector<segment_header*> headers_;

  /// Marks the group aborted by rank `r` (timeout) through any live
  /// mapping, unless a rank marked it first, and wakes the sleepers.
  void mark_timed_out(int r);
};

} // namespace caf_collective::detail::shm
