// The shared-memory segment of one shm group: its layout, and how the ranks
// create, attach and unlink it. Private to the shm backend.
//
// Layout (every part cache-line aligned):
//
//   header            bell (futex word), sleepers, attach count, abort mark
//   control[W]        per rank: the sync line (epoch, and per epoch parity
//                     the op's agreement key and an input of up to 16
//                     bytes), pid, and per parity the op's counts and
//                     published addresses
//   small[W][2]       per rank and epoch parity: the input of a small op
//                     (one sync step: written before it, read after it)
//   slot[W]           per rank: two areas of `area_bytes` (A: the rank's
//                     input chunk, B: its reduced slice) for ranks in
//                     other processes (staged mode)
//   mailbox[W][W]     per ordered pair: a one-chunk channel for send/recv
//
// Ranks of one process (direct mode) never copy through the slots: they
// publish their buffers' addresses and read each other's memory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <caf/expected.hpp>

namespace caf_collective::detail::shm {

inline constexpr size_t cache_line = 64;

/// Largest world size of an shm group (the control blocks hold every
/// rank's counts for the uneven-size ops).
inline constexpr int max_world_size = 256;

struct alignas(cache_line) segment_header {
  uint64_t magic;
  /// Wall-clock time (CLOCK_REALTIME, ns since the epoch) after which no
  /// rank attaches: the creator's formation deadline. A segment still named
  /// after it was left by ranks killed while forming (sweep_stale_segments).
  int64_t attach_by_ns;
  uint32_t world_size;
  uint32_t small_bytes; // of one small-op slot
  uint64_t area_bytes;
  uint64_t mailbox_bytes;
  std::atomic<uint32_t> attached;
  /// 0, or the mark of the first rank whose abort() broke the group for
  /// everyone (make_abort_mark): its rank and why it aborted. One word set
  /// by one compare-and-swap, so a rank killed while it aborts leaves no
  /// mark or a whole one.
  std::atomic<uint64_t> abort_mark;
  alignas(cache_line) std::atomic<uint32_t> bell; // futex word
  std::atomic<uint32_t> sleepers;                 // waiters in futex_wait
};

/// Wakes the ranks asleep on the header's bell after the caller changed a
/// flag they wait for (shm_sync.cpp): nobody asleep, no shared write and
/// no system call.
void ring_bell(segment_header& h) noexcept;

/// The abort mark of `rank`, which aborted because of `code` (an errc:
/// timeout, peer_lost: its op had failed; aborted: it was told to).
constexpr uint64_t make_abort_mark(int rank, uint32_t code) noexcept {
  return (static_cast<uint64_t>(rank) + 1) << 32 | code;
}

/// The rank of an abort mark, -1 for none.
constexpr int abort_mark_rank(uint64_t mark) noexcept {
  return static_cast<int>(mark >> 32) - 1;
}

/// The errc of an abort mark.
constexpr uint32_t abort_mark_code(uint64_t mark) noexcept {
  return static_cast<uint32_t>(mark);
}

/// Bytes of a small op's input that ride on the rank's sync line.
inline constexpr size_t inline_input_bytes = 40;

/// The most lines of a peer's small slot that a waiting rank fetches ahead
/// (op_state::reads in shm_backend.hpp). Measured at 64-512 B; whether
/// more lines pay at larger inputs was not measured.
inline constexpr size_t slot_lines_ahead = 8;

/// What a rank publishes for one op, double-buffered by the parity of the
/// op's first sync epoch: a fast rank may start its next op (and write the
/// other parity) while a slow one still reads this one. `key` and
/// `no_waiter` are what every peer reads at every op: they are published
/// on the rank's sync line of that parity too (sync_line), and read there.
struct op_notice {
  uint64_t key;      // agreement key: op, dtype, counts, root, reduce op
  uint64_t in_addr;  // direct mode: the rank's input buffer
  uint64_t out_addr; // direct mode: the rank's output buffer
  // What the key stands for, to name the disagreement in errors.
  uint64_t count;
  int32_t root;
  uint8_t op;
  uint8_t type;
  uint8_t reduce;
  /// 1: the rank started the op without waiting (backend::start_*, one
  /// process): whoever completes the step finishes it (shm_arrivals.hpp).
  uint8_t no_waiter;
  /// The op's sequence number in its group: the sync line's key covers it
  /// too, so ranks out of step (one refused an op its peers ran) disagree
  /// instead of pairing one op with another.
  uint64_t seq;
};

/// One of a rank's two sync lines: all a peer reads of this rank at a step
/// of one epoch parity, so that one cache-line transfer per peer carries
/// it. A small op publishes its key and input in the line of its first
/// epoch's parity, then that epoch in the same line. With one line for both
/// parities, only 16 bytes of input fitted beside the two keys; the next
/// line cost a 32 B op 0.2 us more (docs/benchmarks.md, "One sync line per
/// parity").
struct alignas(cache_line) sync_line {
  /// The last sync epoch of this line's parity the rank completed. Epochs
  /// come one at a time, so the rank reached epoch e exactly when the line
  /// of e's parity holds e or more (reached()).
  std::atomic<uint64_t> epoch;
  /// The CPU the rank ran on at that step: a waiter whose missing peer
  /// shares its CPU yields at once instead of spinning.
  std::atomic<int32_t> cpu;
  /// op_notice::no_waiter of the op starting at this parity.
  uint8_t no_waiter;
  /// 1 if that op's small input is in `inline_input`, 0 if in the rank's
  /// small slot.
  uint8_t input_inline;
  /// op_notice::key of that op.
  uint64_t key;
  /// That op's input, when it has at most inline_input_bytes.
  alignas(8) std::byte inline_input[inline_input_bytes];
};

static_assert(sizeof(sync_line) == cache_line,
              "a sync line must be one cache line");

struct alignas(cache_line) rank_control {
  /// Indexed by epoch parity. The fields of a line are written before the
  /// epoch that publishes them.
  sync_line sync[2];

  sync_line& line(uint64_t epoch) noexcept { return sync[epoch % 2]; }
  const sync_line& line(uint64_t epoch) const noexcept {
    return sync[epoch % 2];
  }

  /// Whether the rank reached sync epoch `target`.
  bool reached(uint64_t target, std::memory_order order) const noexcept {
    return line(target).epoch.load(order) >= target;
  }

  /// The CPU of the rank's step before `target`: where a rank that has not
  /// reached `target` last ran (ranks are never more than one step apart).
  int32_t cpu_before(uint64_t target) const noexcept {
    return line(target - 1).cpu.load(std::memory_order_relaxed);
  }

  /// Non-zero while this rank reads other ranks' buffers (direct mode); an
  /// aborting rank waits for it before its caller may free them.
  alignas(cache_line) std::atomic<uint32_t> reading;
  alignas(cache_line) int32_t pid;
  /// The CPUs online on the host as this rank saw them at formation,
  /// published with single_copy_verdict; the group takes the least.
  int32_t cpus;
  /// Across processes: 1 once this rank read every peer's probe word with
  /// process_vm_readv, 2 if the kernel refused (then the group copies
  /// through the segment), 0 before it knows.
  std::atomic<uint32_t> single_copy_verdict;
  /// 1 once this rank aborted the group (it left word): if its process
  /// ends afterwards, that is not a death to report (a survivor that gave
  /// up), and peers look for the ranks that died without word instead.
  std::atomic<uint32_t> left_word;
  /// The address of the rank's probe word (its value: probe_value(rank)).
  uint64_t probe_addr;
  op_notice notice[2];
};

static_assert(offsetof(rank_control, reading) == 2 * cache_line,
              "the sync lines of rank_control must fit two cache lines");

/// What a rank's probe word holds: peers check that process_vm_readv read
/// the right word, not just some readable memory.
constexpr uint64_t probe_value(int rank) noexcept {
  return 0x70726f6265000000ull + static_cast<uint64_t>(rank);
}

struct alignas(cache_line) mailbox_header {
  std::atomic<uint64_t> posted; // chunks written by the sender
  alignas(cache_line) std::atomic<uint64_t> taken; // chunks consumed
  alignas(cache_line) uint64_t tag;
  uint64_t total_bytes; // of the whole message
  uint64_t type;        // its dtype: a recv of another one never reads it
};

/// A mapped segment; unmapped (and, if still named, unlinked) on
/// destruction.
class segment {
 public:
  segment() = default;
  segment(segment&&) noexcept;
  segment& operator=(segment&&) noexcept;
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment();

  /// Creates and maps a new segment named `name` for `world_size` ranks,
  /// which attach by `attach_by` (the formation's deadline) or never.
  /// Sweeps stale segments first (sweep_stale_segments).
  static caf::expected<segment>
  create(const std::string& name, int world_size, size_t area_bytes,
         size_t mailbox_bytes, size_t small_bytes,
         std::chrono::system_clock::time_point attach_by);

  /// Maps the segment another rank created.
  static caf::expected<segment> attach(const std::string& name);

  /// Removes the name: the memory lives on while mapped, and nothing is
  /// left behind once every rank has gone. Idempotent.
  void unlink();

  segment_header& header() const noexcept { return *header_; }

  int world_size() const noexcept { return int(header_->world_size); }

  rank_control& control(int rank) const noexcept;

  /// Counts area of `rank` for epoch parity `parity`: 2 * W + 2 uint64
  /// values (the header of allgatherv / alltoallv, agreement.hpp).
  uint64_t* counts(int rank, int parity) const noexcept;

  /// Slot of `rank` for small ops starting at an epoch of parity `parity`.
  std::byte* small_slot(int rank, int parity) const noexcept;

  /// Where the input `rank` published for a small op of `parity` lies: on
  /// its sync line or in its small slot.
  const std::byte* small_input(int rank, int parity) const noexcept {
    const auto& line = control(rank).sync[parity];
    return line.input_inline != 0 ? line.inline_input
                                  : small_slot(rank, parity);
  }

  size_t small_bytes() const noexcept { return header_->small_bytes; }

  /// Staged-mode area A (input chunk) or B (reduced slice) of `rank`.
  std::byte* area(int rank, int which) const noexcept;

  size_t area_bytes() const noexcept { return header_->area_bytes; }

  mailbox_header& mailbox(int from, int to) const noexcept;

  std::byte* mailbox_data(int from, int to) const noexcept;

  size_t mailbox_bytes() const noexcept { return header_->mailbox_bytes; }

 private:
  static size_t layout_bytes(int world_size, size_t area_bytes,
                             size_t mailbox_bytes, size_t small_bytes) noexcept;

  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
  segment_header* header_ = nullptr;
  std::string name_; // empty once unlinked
};

/// A name for a new segment, unique on this host.
std::string fresh_segment_name(const std::string& group);

/// Removes the names of this user's segments in /dev/shm whose formation
/// deadline passed more than a few seconds ago: every rank unlinks a
/// segment once all attached, or when the formation fails, so a name still
/// there was left by ranks that were all killed while forming (a creator
/// killed before anyone attached). Nobody attaches such a segment again.
void sweep_stale_segments() noexcept;

} // namespace caf_collective::detail::shm
