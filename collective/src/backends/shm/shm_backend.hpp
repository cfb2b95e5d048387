// The shm backend: CPU tensors of members on one host, moved through memory.
// Private to the collective layer.
//
// Every collective runs in rounds of sync steps. A step bumps the rank's
// epoch in its control block and waits until every rank's epoch reached
// it: spinning briefly, then sleeping on the segment's futex word, checking
// the deadline, the abort mark and (across processes) whether the ranks it
// waits for are still alive. At the first step of an op every rank has
// published its agreement key; ranks that disagree all fail with
// `mismatch` before any data moves.
//
// Direct mode (every rank in one process): ranks publish the addresses of
// their buffers and read each other's memory: one copy, no staging.
// Staged mode (ranks in several processes): each round a rank copies a
// chunk of its input into its area A of the segment; peers read it there.
// Single-copy mode (several processes, large messages, when the kernel lets
// every rank read every peer's memory with process_vm_readv: checked once at
// formation, and the ranks agree): as in direct mode, but each read of a
// peer's buffer is a process_vm_readv (shm_single_copy.cpp).
// Small ops (input up to one small slot): every rank writes its input into
// its slot of the segment before the op's first sync step and reads the
// others' slots after it: one step per op, whatever the mode.
//
// Ops started without blocking (backend::start_*: every op but send/recv
// and the uneven-size ones; every rank in one process, small ops): the rank
// publishes as for a small op and returns; whoever completes the step finishes
// it (shm_arrivals.hpp). Ranks that wait and ranks that do not mix freely.
//
// Set CAF_COLLECTIVE_SHM_SINGLE_COPY=off (in any rank's environment before
// formation) to make the group use staged mode across processes: the tests
// compare both paths with it.
//
// Reductions: every rank reduces its slice of the elements across all
// inputs, in rank order, in the carrier type (reduce_kernels.hpp), then
// copies the other slices from their owners: every rank gets the same bits.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/shm/shm_arrivals.hpp"
#include "backends/shm/shm_segment.hpp"
#include "backends/shm/shm_tsan.hpp"
#include "caf_collective/backend.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"
#include "runtime/lazy_deadline.hpp"
#include "vocabulary/function_ref.hpp"

namespace caf_collective::detail::shm {

/// Across processes, an op whose largest contribution has between `min`
/// and `max` bytes moves by single copy (where the kernel allows it),
/// others by the staged copy.
struct byte_range {
  size_t min;
  size_t max;
  bool holds(size_t bytes) const noexcept {
    return bytes >= min && bytes <= max;
  }
};

/// The single-copy range of op `op` in a group of `world_size` ranks on a
/// host with `cpus` online CPUs (the same number for every rank, unlike
/// an affinity mask). Measured on 2 and 16 CPUs (docs/benchmarks.md,
/// "Single copy per op" and after):
/// - ops that copy (broadcast, gather, scatter, allgather(v), alltoall(v)):
///   64 KiB to 8 MiB. Below, two memcpys cost less than the system calls,
///   except at 2 ranks, where one read per peer measured up to 2x faster
///   than two memcpys and two steps from 8 KiB (all above the small path).
///   Above, the buffers no longer fit in the caches, and the staged copy,
///   whose memcpy writes past the caches into a segment area that stays
///   cached, measured faster than the kernel's copy;
/// - allgather at 4 ranks and more: to 128 KiB blocks (staged measured
///   10-20% faster above);
/// - broadcast with 3 ranks or more, each on a CPU of its own: to 128 KiB.
///   Its readers all pin the root's same pages: at 16 CPUs single copy
///   took 1.5-2x the staged time from 256 KiB, while where ranks outnumber
///   CPUs, and readers rarely overlap, it measured 1.2-2x faster from 1 MiB;
/// - reductions save no copy by it: a peer's block is pulled into scratch
///   and reduced from there, where staged it is copied into the area and
///   reduced from there. They pay the system calls and lose the staged
///   path's pipelining, so only small reduce_scatter and reduce use it,
///   where measured faster; allreduce never does.
byte_range single_copy_range(op_kind op, int world_size, int cpus) noexcept;

/// Elements a single-copy reduction pulls from a peer per system call.
inline constexpr size_t single_copy_block_elements = 32768;

/// At most this many bytes of outputs does the finisher of an op started
/// without blocking write for all ranks (shm_starts.cpp): larger ops run
/// on the lanes, every rank copying its own part.
inline constexpr size_t max_finisher_bytes = size_t{256} << 10;

/// A byte range one rank reads from another rank's contribution.
struct need {
  int peer;
  size_t src_offset; // in the peer's contribution
  size_t bytes;
  size_t dst_offset; // in this rank's output
};

class shm_backend;

/// Tests only (null otherwise): called when an op started without blocking
/// passed can_start and before it is published, the window in which an
/// abort from another thread cannot see the op (test_shm_starts.cpp).
inline void (*arrival_test_hook)(shm_backend&) = nullptr;

/// Tests only (null otherwise): called when a rank has marked that it reads
/// its peers' buffers in place (direct and single copy), before it reads:
/// a slow reader (test_shm_starts.cpp).
inline void (*reading_test_hook)(shm_backend&) = nullptr;

class shm_backend : public backend {
 public:
  shm_backend(const group_config& cfg, segment seg);

  ~shm_backend() override;

  std::string_view name() const noexcept override { return "shm"; }

  int rank() const noexcept override { return rank_; }

  int world_size() const noexcept override { return world_size_; }

  bool supports(op_kind op, device_kind kind,
                dtype type) const noexcept override;

  caf::error send(const op_call& call, const tensor_view& in,
                  const send_options& opts) override;
  caf::error recv(const op_call& call, const tensor_view& out,
                  const recv_options& opts) override;
  caf::error broadcast(const op_call& call, const tensor_view& in,
                       const tensor_view& out,
                       const broadcast_options& opts) override;
  caf::error reduce(const op_call& call, const tensor_view& in,
                    const tensor_view& out,
                    const reduce_options& opts) override;
  caf::error allreduce(const op_call& call, const tensor_view& in,
                       const tensor_view& out,
                       const allreduce_options& opts) override;
  caf::error allgather(const op_call& call, const tensor_view& in,
                       const tensor_view& out,
                       const allgather_options& opts) override;
  caf::error allgatherv(const op_call& call, const tensor_view& in,
                        const tensor_view& out,
                        const allgatherv_options& opts) override;
  caf::error gather(const op_call& call, const tensor_view& in,
                    const tensor_view& out,
                    const gather_options& opts) override;
  caf::error scatter(const op_call& call, const tensor_view& in,
                     const tensor_view& out,
                     const scatter_options& opts) override;
  caf::error reduce_scatter(const op_call& call, const tensor_view& in,
                            const tensor_view& out,
                            const reduce_scatter_options& opts) override;
  caf::error alltoall(const op_call& call, const tensor_view& in,
                      const tensor_view& out,
                      const alltoall_options& opts) override;
  caf::error alltoallv(const op_call& call, const tensor_view& in,
                       const tensor_view& out,
                       const alltoallv_options& opts) override;
  caf::error barrier(const op_call& call, const barrier_options& opts) override;

  bool start_allreduce(const op_call& call, const tensor_view& in,
                       const tensor_view& out, const allreduce_options& opts,
                       op_completion& done) override;
  bool start_broadcast(const op_call& call, const tensor_view& in,
                       const tensor_view& out, const broadcast_options& opts,
                       op_completion& done) override;
  bool start_barrier(const op_call& call, const barrier_options& opts,
                     op_completion& done) override;
  bool start_reduce(const op_call& call, const tensor_view& in,
                    const tensor_view& out, const reduce_options& opts,
                    op_completion& done) override;
  bool start_allgather(const op_call& call, const tensor_view& in,
                       const tensor_view& out, const allgather_options& opts,
                       op_completion& done) override;
  bool start_gather(const op_call& call, const tensor_view& in,
                    const tensor_view& out, const gather_options& opts,
                    op_completion& done) override;
  bool start_scatter(const op_call& call, const tensor_view& in,
                     const tensor_view& out, const scatter_options& opts,
                     op_completion& done) override;
  bool start_reduce_scatter(const op_call& call, const tensor_view& in,
                            const tensor_view& out,
                            const reduce_scatter_options& opts,
                            op_completion& done) override;
  bool start_alltoall(const op_call& call, const tensor_view& in,
                      const tensor_view& out, const alltoall_options& opts,
                      op_completion& done) override;
  bool start_send(const op_call& call, const tensor_view& in,
                  const send_options& opts, op_completion& done) override;

  void abort(std::string_view why) override;

  /// Whether every rank lives in this process (direct mode).
  bool direct() const noexcept { return direct_; }

  /// Waits until every rank attached, then removes the segment's name.
  /// `segment_name`: the name every rank attached by (it keys the ranks'
  /// shared arrival table in direct mode). Once `*cancel` (may be null) is
  /// true the wait aborts the backend, which tells the peers, and fails
  /// with aborted within a sleep slice.
  caf::error finish_formation(const std::string& segment_name,
                              std::chrono::steady_clock::time_point deadline,
                              const std::atomic<bool>* cancel = nullptr);

 private:
  using clock = std::chrono::steady_clock;

  caf::error finish_formation_steps(const std::string& segment_name,
                                    clock::time_point deadline);

  /// How an op moves its data (see the top of this file).
  enum class path { direct, staged, single_copy, small };

  /// Part of a peer's small input: `bytes` from `offset`.
  struct slot_window {
    size_t offset = 0;
    size_t bytes = 0;
  };

  /// The cache lines of a slot that hold a window: from byte `first` (a
  /// line's start), `count` lines, at most slot_lines_ahead.
  struct line_span {
    size_t first = 0;
    size_t count = 0;
  };
  static line_span lines_of(const slot_window& w) noexcept {
    if (w.bytes == 0) return {};
    auto first = w.offset / cache_line;
    auto end = (w.offset + w.bytes + cache_line - 1) / cache_line;
    return {first * cache_line, std::min(end - first, slot_lines_ahead)};
  }

  /// One op in progress: its context, deadline and first epoch.
  struct op_state {
    op_kind op;
    const op_call* call;
    lazy_deadline deadline;
    uint64_t first_epoch = 0;
    path how = path::staged;
    /// Staged: round 0's staging was done before begin(), whose step then
    /// also serves as round 0's first step (stage_ahead).
    bool staged_ahead = false;
    /// Small path: the bytes this rank reads of each peer's input. Where a
    /// peer's input lies in its small slot, the first step starts fetching
    /// them as soon as that peer has reached it (at most slot_lines_ahead
    /// lines). Unset: the whole input, as long as this rank's own (every
    /// rank contributes alike); ops whose ranks read less, or nothing, set
    /// it before begin(). Ops that choose their path after begin()
    /// (allgatherv, alltoallv) fetch nothing ahead.
    std::optional<slot_window> reads = std::nullopt;
    int parity() const noexcept { return int(first_epoch % 2); }
  };

  /// Sets `st.how` for an op whose longest contribution is `longest`
  /// bytes, and when that is the staged copy runs `stage` (round 0's
  /// staging into this rank's areas) at once, before the op's first step:
  /// begin()'s step then publishes it, one step per op fewer. The areas are
  /// free: every rank finished reading them before the previous op's last
  /// step. A rank whose peers called another op wrote only its own areas,
  /// which nobody reads before they agree.
  template<class Stage>
  void stage_ahead(op_state& st, size_t longest, Stage&& stage) {
    st.how = path_for(st.op, longest);
    if (st.how != path::staged) return;
    stage();
    st.staged_ahead = true;
  }

  /// Whether round `c` of a staged op still has to stage and step.
  static bool stages_round(const op_state& st, size_t c) noexcept {
    return !(c == 0 && st.staged_ahead);
  }

  // -- synchronization (shm_sync.cpp) ----------------------------------------

  /// Bumps this rank's epoch and waits until every rank reached it.
  caf::error step(op_state& st);

  /// Publishes `notice` (and `counts`, if any) for the op's first step,
  /// and `payload` into this rank's small slot if it fits, steps, and fails
  /// with `mismatch` naming the ranks unless every rank published the same
  /// key.
  caf::error begin(op_state& st, op_notice notice,
                   std::span<const uint64_t> counts = {},
                   std::span<const std::byte> payload = {});

  /// Whether the ranks' notices of `parity` are of one op and differ only
  /// in its sequence number.
  bool out_of_step(int parity) const noexcept;

  /// Writes what this rank publishes for an op starting at an epoch of
  /// `parity`: `notice`, its key and no_waiter flag on the sync line, and
  /// `payload` (if it fits the small slot) inline or into the slot.
  void publish(int parity, const op_notice& notice,
               std::span<const std::byte> payload) noexcept;

  /// Why the ranks' notices of `parity` disagree ("ranks [0] called ...;
  /// ranks [1] called ..."), or empty.
  std::string disagreement(int parity) const;

  // -- ops started without blocking (shm_starts.cpp) -------------------------

  /// Whether an op whose largest contribution has `bytes` can start
  /// without blocking, if its finisher writes `finisher_bytes` in all (the
  /// outputs of every rank: it runs on some caller's thread, maybe a CAF
  /// scheduler thread, so its work stays small).
  bool can_start(size_t bytes, size_t finisher_bytes) const noexcept;

  /// Publishes this rank's op (`notice`, `payload` into its small slot)
  /// for a finisher, steps, and finishes the op for every rank that did
  /// not wait if this arrival completed the step. Takes `done`.
  bool arrive(const op_call& call, op_notice notice,
              std::span<const std::byte> payload, op_completion& done);

  /// The start of allreduce, reduce and reduce_scatter: `finisher_bytes`
  /// as in can_start.
  bool start_reduction(op_kind op, const op_call& call, const tensor_view& in,
                       const tensor_view& out, int root, reduce_op how,
                       size_t finisher_bytes, op_completion& done);

  /// allgather (`root` -1) and gather: see shm_copies.cpp.
  caf::error gather_blocks(op_kind op, const op_call& call,
                           const tensor_view& in, const tensor_view& out,
                           int root);

  /// The start of the copy ops: see shm_copies.cpp.
  bool start_copy(op_kind op, const op_call& call,
                  const tensor_view& contribution, const tensor_view& out,
                  int root, std::span<const std::byte> payload,
                  size_t slot_bytes, size_t finisher_bytes,
                  op_completion& done);

  /// Writes rank `r`'s result of the op `n` (every input in the small
  /// slots of `parity`) into `out`; `shared` is the allreduce result.
  caf::error write_result(int r, const op_notice& n, int parity, std::byte* out,
                          const std::byte* shared);

  /// Once the step to `target` passed: if some ranks did not wait for it,
  /// the first caller per epoch (on any rank) finishes their ops, with the
  /// agreement failure `mismatch` if not empty.
  void serve_arrivals(uint64_t target, const std::string& mismatch);

  /// The path of op `op` whose largest contribution of any rank is
  /// `longest` bytes (the same on every rank once they agreed).
  path path_for(op_kind op, size_t longest) const noexcept;

  /// Waits until `ready()` holds. `laggards()` names the ranks still
  /// missing (for errors and liveness checks). While `*yield_now` (set by
  /// `ready()`, if given) holds, spinning is pointless: yield at once.
  caf::error wait_until(function_ref<bool()> ready,
                        function_ref<std::vector<int>()> laggards, op_kind op,
                        const op_call* call, lazy_deadline& deadline,
                        const bool* yield_now = nullptr);

  /// Direct and single-copy paths: marks this rank as reading its peers'
  /// buffers, unless a peer has aborted (then nothing may be read: its
  /// caller may free them).
  caf::error start_reading(const op_state& st);
  void stop_reading(const op_state& st) noexcept;

  /// This rank's reading mark over one stretch of reads, cleared however
  /// the stretch ends, an exception included: a mark left set would hold
  /// every same-process peer's failure or abort for good, since
  /// wait_for_readers waits for those without a bound.
  class reading_mark {
   public:
    reading_mark(shm_backend& self, const op_state& st) noexcept
      : self_(self), st_(st) {
      // nop
    }

    ~reading_mark() { stop(); }

    reading_mark(const reading_mark&) = delete;
    reading_mark& operator=(const reading_mark&) = delete;

    /// start_reading; on its error the mark is cleared already.
    caf::error start() {
      held_ = true; // before: start_reading may throw once the mark is set
      auto err = self_.start_reading(st_);
      if (err) held_ = false;
      return err;
    }

    void stop() noexcept {
      if (held_) {
        held_ = false;
        self_.stop_reading(st_);
      }
    }

   private:
    shm_backend& self_;
    const op_state& st_;
    bool held_ = false;
  };

  /// An op of this rank failed (timeout, lost peer, abort) after it
  /// published its buffers: records why (what an abort tells the peers).
  /// In direct and single-copy mode peers read the buffers in place, and
  /// the caller may free them once the op returns: the rank leaves the
  /// group as abort() does, so that peers arriving later fail instead of
  /// reading, and waits until no peer reads any more. Returns `err`.
  caf::error leave_after(caf::error err);

  /// abort(), returning whether this call aborted the group (and waited for
  /// the readers) or an earlier one had begun to.
  bool abort_first(std::string_view why);

  /// Direct and single copy: waits until no peer reads this rank's
  /// buffers; for a reader in another process at most 5 s (a dead reader
  /// reads nothing).
  void wait_for_readers();

  // -- single copy across processes (shm_single_copy.cpp) --------------------

  /// At formation, across processes: reads every peer's probe word with
  /// process_vm_readv, publishes the verdict, and waits for every rank's:
  /// single copy is used only if every rank could read every peer.
  caf::error agree_on_single_copy(clock::time_point deadline);

  /// Copies `bytes` from address `from` in rank `peer`'s process to `to`.
  /// A peer that died (or left the op and freed the buffer) is peer_lost.
  caf::error pull(const op_state& st, int peer, uint64_t from, std::byte* to,
                  size_t bytes);

  /// Copies `bytes` of rank `peer`'s data at `from` to `to`: a plain copy
  /// when this process can read it (one process, or the peer's staged
  /// area), else through `pull`.
  caf::error copy_from(const op_state& st, int peer, const std::byte* from,
                       std::byte* to, size_t bytes);

  /// Wakes every rank sleeping on the segment's bell.
  void ring() noexcept;

  /// This backend or any rank of the group aborted (ops started without
  /// blocking leave such cases to the blocking forms, which name who).
  bool aborted_anywhere() const noexcept {
    return aborted_.load(std::memory_order_acquire) ||
           seg_.header().abort_mark.load(std::memory_order_acquire) != 0;
  }

  /// Writes the chunk of `in` at byte `offset` into the mailbox to
  /// `opts.peer` (empty by then) and posts it.
  void post_chunk(const tensor_view& in, const send_options& opts,
                  size_t offset);

  /// For ThreadSanitizer (shm_tsan.hpp), ranks of one process: announces
  /// what this rank wrote before it sets a flag that peers wait for, and
  /// takes what the peers announced once their flags were seen. No-ops in
  /// other builds.
  void announce() const noexcept {
    if (hub_) tsan_release(hub_->sync_key(rank_));
  }
  void take_announcements() const noexcept {
    if (hub_)
      for (int r = 0; r < world_size_; ++r)
        tsan_acquire(hub_->sync_key(r));
  }

  caf::error failure_if_any(op_kind op, const op_call* call,
                            const std::vector<int>& waiting_for);

  /// `peer_lost` naming those of `ranks` whose process died, preferring
  /// ranks that died without leaving word; no error when none died.
  caf::error dead_peer_error(op_kind op, const op_call* call,
                             const std::vector<int>& ranks) const;

  /// The rank whose abort broke the group first (-1: none yet) and why.
  struct aborter {
    int rank = -1;
    errc code = errc::aborted;
  };
  aborter first_aborter() const noexcept;

  /// Those of `ranks` (other than this rank) whose process is gone.
  std::vector<int> gone_among(const std::vector<int>& ranks) const;

  error_context context(op_kind op, const op_call* call) const noexcept;

  // -- the collectives (shm_copies.cpp, shm_reductions.cpp) ------------------

  /// The copy ops: `mine` is this rank's contribution, `longest` the
  /// longest contribution of any rank, `needs` what this rank copies into
  /// `out`, on the path the caller set in `st.how` (path_for).
  caf::error run_copies(op_state& st, const std::byte* mine, size_t mine_bytes,
                        size_t longest, std::span<const need> needs,
                        std::byte* out);

  /// Every rank's `size` counts published at the op's first step, rank by
  /// rank (the uneven-size ops' headers, agreement.hpp).
  std::vector<uint64_t> published_headers(const op_state& st,
                                          size_t size) const;

  /// `in`, or a copy of it when the op runs in place (alltoall/v).
  tensor_view contribution_of(const tensor_view& in, const tensor_view& out);

  /// Where this rank reads `rank`'s contribution in round `round_start`:
  /// its published input (direct, and this rank's own when staged), its
  /// area A (a peer's, staged) or its small slot. Single copy: the address
  /// in the rank's process.
  const std::byte* source(const op_state& st, int rank,
                          size_t round_start) const noexcept;

  /// Reduces elements [first, first + count) of every rank's contribution
  /// (`type` elements, this round's sources) into `dst`.
  caf::error reduce_range(const op_state& st, size_t round_start, size_t first,
                          size_t count, dtype type, reduce_op op,
                          std::byte* dst, bool stream = false);

  /// Reduces `count` elements from each rank's pointer in `sources_` (set
  /// by the caller) into `dst`, in rank order. `stream`: `dst` is written
  /// past the caches (stream_copy), for results far larger than them.
  caf::error reduce_sources(const op_state& st, size_t count, dtype type,
                            reduce_op op, std::byte* dst, bool stream = false);

  /// run_copies of a rooted op by staged copy, pipelined: see
  /// shm_copies.cpp.
  caf::error pipelined_copies(op_state& st, const std::byte* mine,
                              size_t mine_bytes, size_t longest,
                              std::span<const need> needs, std::byte* out);

  /// Copies bytes [first, first + bytes) of every block of `mine` (blocks
  /// of `block` bytes, one per rank) but this rank's own into its area A,
  /// block b at b * `window`: one round of the staged ops that move a
  /// window of every block at once.
  void stage_block_windows(const std::byte* mine, size_t block, size_t window,
                           size_t first, size_t bytes) noexcept;

  /// Round `c`'s staging of the ops that stage their contribution window
  /// by window (the copy ops but alltoall, and reduce): bytes
  /// [c * window, (c + 1) * window) of `mine` into this rank's area `area`.
  void stage_window(const std::byte* mine, size_t mine_bytes, size_t window,
                    size_t c, int area) noexcept;

  /// Round `c`'s staging of a staged alltoall, allreduce (`n` elements of
  /// `es` bytes) and reduce_scatter (`block` elements per rank).
  size_t alltoall_window() const noexcept; // bytes of a block per round
  void stage_alltoall_round(const std::byte* mine, size_t block,
                            size_t c) noexcept;
  void stage_allreduce_round(const std::byte* in, size_t n, size_t es,
                             size_t c) noexcept;
  void stage_reduce_scatter_round(const std::byte* in, size_t block, size_t es,
                                  size_t c) noexcept;
  /// Elements of `es` bytes an area holds (a round of a staged allreduce or
  /// reduce) / of every block per round of a staged reduce_scatter.
  size_t area_elements(size_t es) const noexcept;
  size_t reduce_scatter_window(size_t es) const noexcept;

  /// alltoall of `block` bytes per rank by staged copy: see
  /// shm_copies.cpp.
  caf::error staged_alltoall(op_state& st, const std::byte* mine, size_t block,
                             std::byte* out);

  /// reduce to `root` by staged copy, pipelined: see shm_reductions.cpp.
  caf::error staged_reduce(op_state& st, const tensor_view& in,
                           const tensor_view& out, reduce_op op, int root);

  /// reduce_scatter by staged copy: see shm_reductions.cpp.
  caf::error staged_reduce_scatter(op_state& st, const tensor_view& in,
                                   const tensor_view& out, reduce_op op);

  caf::error reduce_common(const op_call& call, op_kind kind,
                           const tensor_view& in, const tensor_view& out,
                           reduce_op op, int root, uint64_t key);

  // -- state -----------------------------------------------------------------

  std::string group_name_;
  int rank_;
  int world_size_;
  segment seg_;
  bool direct_ = false;
  bool single_copy_ = false; // agreed at formation (processes only)
  int cpus_ = 1;             // online on this host (single_copy_range)
  // Read by peers through process_vm_readv at formation.
  uint64_t probe_word_ = 0;
  uint64_t epoch_ = 0; // this rank's steps, mirrored in its control block
  std::atomic<bool> aborted_{false};
  // Taken by the first abort(): the op's own failure (leave_after, on the
  // lane) and group::abort (another thread) may abort at once.
  std::atomic<bool> abort_begun_{false};
  // Set by the first abort() once the segment's abort mark is there: a
  // second abort() returns only then, so that its caller (an op that
  // failed, which frees its buffers next) never returns while a peer can
  // still start reading them without seeing the mark.
  std::atomic<bool> abort_published_{false};
  // Why an op of this rank failed (timeout, peer_lost), else aborted: what
  // abort() tells the peers.
  std::atomic<errc> failed_code_{errc::aborted};
  std::string abort_reason_; // set once before aborted_
  // The group's abort flag while the backend forms, then null.
  const std::atomic<bool>* formation_cancel_ = nullptr;
  std::vector<int32_t> pids_;
  std::vector<int> pidfds_; // -1, or a pidfd of a rank in another process
  // Carrier scratch of the reductions: fixed size, allocated once.
  std::vector<std::byte> acc_;
  std::vector<std::byte> tmp_;
  std::vector<std::byte> pulled_; // single copy: a peer's block, reduced
  std::vector<std::byte> inplace_;
  std::vector<const std::byte*> sources_; // one per rank, for reduce_range
  std::vector<need> needs_;               // what a copy op reads, per call
  // Direct mode: ops started without blocking, shared with the peers.
  std::shared_ptr<arrival_hub> hub_;
  std::vector<std::byte> served_; // a finisher's result, one small slot
};

/// Forms an shm group: rank 0 creates the segment and publishes its name in
/// cfg.store; every rank checks that all ranks are on this host. Fails with
/// aborted soon after `*cancel` (may be null) becomes true.
caf::expected<backend_ptr>
make_shm_backend(const group_config& cfg,
                 const std::atomic<bool>* cancel = nullptr);

/// "<boot id>/<hostname>": ranks with the same identity share memory.
std::string host_identity();

} // namespace caf_collective::detail::shm
