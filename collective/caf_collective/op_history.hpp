// A group's log of its most recent operations (docs/api.md, "When an op times
// out"): when an op times out, the log says what this rank was doing, so a hang
// can be traced to the rank and op that fell behind.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "caf_collective/error.hpp"
#include "caf_collective/op_kind.hpp"

namespace caf_collective {

/// One operation as its group saw it.
struct op_record {
  enum class phase { queued, running, done, failed };
  using clock = std::chrono::steady_clock;

  uint64_t seq = 0;
  /// send/recv are numbered apart from collectives (see group.hpp).
  bool point_to_point = false;
  op_kind op = op_kind::barrier;
  /// Bytes of this rank's input (output for recv and ops without input).
  size_t bytes = 0;
  phase state = phase::queued;
  clock::time_point submitted;
  clock::time_point started;          // set once running; failed while
                                      // queued: the submission time
  clock::time_point finished;         // set once done or failed
  errc failure = errc::backend_error; // meaningful when failed
};

std::string_view to_string(op_record::phase x) noexcept;

/// "seq 4 allreduce 4096 B running for 1503 ms", one record per line.
std::string
describe(const std::vector<op_record>& records,
         op_record::clock::time_point now = op_record::clock::now());

/// A log of the last `capacity` records, oldest first. When it is full, the
/// oldest finished record makes room, else the oldest queued one: a running
/// op is dropped last. Not thread-safe: its owner serializes the calls (a
/// group makes them under its submission lock, which it takes for every op
/// anyway, so that an op pays for one lock fewer).
class op_history {
 public:
  explicit op_history(size_t capacity = 16) : capacity_(capacity) {}

  /// A new op; `running`: it starts at once (saves `started`).
  void queued(uint64_t seq, bool p2p, op_kind op, size_t bytes,
              bool running = false);
  void started(uint64_t seq, bool p2p);
  void finished(uint64_t seq, bool p2p, const caf::error& err);

  std::vector<op_record> snapshot() const;

 private:
  op_record* find(uint64_t seq, bool p2p); // newest first; null if evicted

  /// Where in ring_ the i-th oldest record is.
  /// (No division: it runs a few times per op.)
  size_t slot(size_t i) const noexcept {
    auto s = oldest_ + i;
    return s >= ring_.size() ? s - ring_.size() : s;
  }
  op_record& at(size_t i) { return ring_[slot(i)]; }

  size_t capacity_;
  // A ring, filled up to capacity_ and then reused in place: most ops
  // evict the oldest record, which takes no copying and no allocation.
  std::vector<op_record> ring_;
  size_t oldest_ = 0; // index of the oldest record in ring_
};

} // namespace caf_collective
