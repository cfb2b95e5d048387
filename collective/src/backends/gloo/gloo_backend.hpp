// The Gloo backend: CPU tensors over Gloo's TCP transport. Private to the
// collective layer; nothing outside collective/src includes Gloo.
#pragma once

#include <atomic>
#include <initializer_list>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gloo/algorithm.h>
#include <gloo/context.h>
#include <gloo/transport/device.h>

#include <caf/expected.hpp>

#include "backends/common/agreement.hpp"
#include "backends/gloo/gloo_live_buffers.hpp"
#include "backends/gloo/gloo_op_watchdog.hpp"
#include "caf_collective/backend.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"

namespace caf_collective::detail {

/// A growable buffer that is never zeroed: first touches of fresh pages
/// cost about 10 us per 4 KiB here (as the foundation issue measured), so
/// each group keeps and reuses one.
class scratch_buffer {
 public:
  std::byte* reserve(size_t bytes);

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t capacity_ = 0;
};

/// A cached instance of one of Gloo's legacy allreduce algorithms. Legacy
/// algorithms allocate buffers and consume context slots on construction,
/// so they are built once per (algorithm, carrier, count, op) and run on
/// their own buffer. The cache key is identical on every rank, so every
/// rank builds and evicts the same instances in the same order.
struct cached_allreduce {
  int algorithm = 0;
  dtype carrier = dtype::float32;
  size_t count = 0;
  reduce_op op = reduce_op::sum;
  uint64_t pass = 0; // the caller's call (gloo_backend::pass_of)
  std::unique_ptr<std::byte[]> buffer;
  std::unique_ptr<gloo::Algorithm> instance;
};

class gloo_backend : public backend {
 public:
  gloo_backend(const group_config& cfg, std::shared_ptr<gloo::Context> ctx);

  ~gloo_backend() override;

  std::string_view name() const noexcept override { return "gloo"; }

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

  void abort(std::string_view why) override;

  /// Runs `fn`, turning Gloo's exceptions into errors: after an abort
  /// errc::aborted, else timeouts errc::timeout, lost connections
  /// errc::peer_lost, everything else errc::backend_error. The op ends at
  /// its deadline (op_watch) whatever its waits inside Gloo.
  template<class Fn>
  caf::error guarded(op_kind op, const op_call& call, Fn&& fn) noexcept;

  /// An op's watch by the group's op_watchdog, from its first stage on:
  /// the guarded stages of one op (allgatherv's headers, then its payload)
  /// share the deadline of the outermost.
  class op_watch {
   public:
    op_watch(gloo_backend& self, op_kind op, const op_call& call);

    ~op_watch();

    op_watch(const op_watch&) = delete;
    op_watch& operator=(const op_watch&) = delete;

    /// The op's stage is over. True when the op ran past its deadline;
    /// an inner stage leaves the answer to the watch that owns the op.
    bool finish_late();

    /// Whether the watchdog rang for this op (the op's waits were woken).
    bool rang() const;

   private:
    op_watchdog* dog_;
    size_t slot_;
    uint64_t seq_;
    bool owner_;
  };

  error_context context(op_kind op, const op_call& call) const noexcept {
    return {group_name_, op, static_cast<int64_t>(call.seq), rank_,
            world_size_};
  }

  /// Sends one message of `bytes` to and from every peer so that each
  /// connection's buffers are sized before the first real operation. The
  /// message starts with the sender's address of that connection, so a
  /// lost connection can later be reported by rank (see name_peer).
  void warm_up(size_t bytes);

 private:
  caf::error translate(op_kind op, const op_call& call,
                       const std::exception& ex) const;

  /// `err`, or `timeout` when the op (its last stage, run by guarded under
  /// the outer `watch`) succeeded but ran past its deadline.
  caf::error settled(op_kind op, const op_call& call, op_watch& watch,
                     caf::error err) const;

  /// `timeout`: the op did not finish within its timeout; `detail` says
  /// where it stood.
  caf::error timed_out(op_kind op, const op_call& call,
                       const std::string& detail) const;

  /// An op with nothing to move still meets its peers: a barrier under the
  /// op's agreement key. Ranks that all called the same empty op pass; a
  /// rank whose peers called it with data fails with them (timeout)
  /// instead of returning success alone. Gloo's barrier slots never pair
  /// with another op's, whatever the tag.
  void meet_empty(const op_call& call, uint64_t key);

  /// Fails every connection of the context (abort).
  void fail_connections() noexcept;

  /// An op of this group timed out: ends every wait of the group, as Gloo
  /// does for its own (the watchdog's ring; guarded after Gloo's timeout).
  void end_every_wait() noexcept;

  /// alltoall(v): the bytes to send, `in`'s own or, in place (`in` is
  /// `out`), a copy of them in the scratch buffer.
  uint8_t* apart_from_output(const tensor_view& in, const tensor_view& out);

  /// `aborted`, naming the op and the abort's reason.
  caf::error aborted_error(op_kind op, const op_call& call);

  /// What a reduction's messages carry besides carrier, count and the op
  /// the carrier runs: the caller's dtype and reduce op, and which pass of
  /// the op this is. The carrier alone hides disagreements (float16 and
  /// float32 both travel as float32, int64 avg as two int64 sums), and
  /// ranks that disagree must never pair their messages: that returned
  /// mixed data as success, or Gloo ended the process on buffers of
  /// different sizes.
  static uint64_t pass_of(dtype caller, reduce_op op, uint64_t index);

  /// Reduces `in` into `out` (which holds `carrier` elements) in place,
  /// with the algorithm options pick; `pass` from pass_of.
  void allreduce_carrier(const op_call& call, void* data, dtype carrier,
                         size_t count, reduce_op op,
                         allreduce_algorithm algorithm, uint64_t pass);

  /// gloo::reduce of `count` carrier elements into `target` on `root`;
  /// `pass` from pass_of.
  void reduce_carrier(const op_call& call, void* source, void* target,
                      dtype carrier, size_t count, reduce_op op, int root,
                      uint64_t pass);

  cached_allreduce& legacy_instance(const op_call& call,
                                    allreduce_algorithm algorithm,
                                    dtype carrier, size_t count, reduce_op op,
                                    uint64_t pass);

  void ring_reduce_scatter(const op_call& call, std::byte* work, std::byte* out,
                           dtype carrier, size_t block, reduce_op op,
                           uint64_t pass);

  /// The agreement step of allgatherv / alltoallv (gloo_agreement.cpp):
  /// every rank learns every rank's dtype and counts; `mismatch` naming the
  /// ranks when they do not fit together.
  caf::error agree_allgatherv(const op_call& call, dtype type,
                              const std::vector<size_t>& counts);
  caf::error agree_alltoallv(const op_call& call, dtype type,
                             const std::vector<size_t>& sends,
                             const std::vector<size_t>& recvs);
  caf::expected<std::vector<uint64_t>>
  exchange_headers(op_kind op, const op_call& call,
                   const std::vector<uint64_t>& mine);

  /// "rank 2 ([127.0.0.1]:41234)" when Gloo's message names the address of
  /// a peer's end of one of our connections, else an empty string.
  std::string name_peer(const std::string& gloo_message) const;

  std::string group_name_;
  int rank_;
  int world_size_;
  std::shared_ptr<gloo::Context> context_;
  scratch_buffer scratch_;
  scratch_buffer scratch_recv_;
  scratch_buffer scratch_avg_; // int64 avg's second pass (reduce_kernels)
  std::list<cached_allreduce> legacy_cache_;
  /// The number the next collective has unless this rank refused one.
  uint64_t next_collective_seq_ = 0;
  // The peer's address of each connection (as Gloo prints it) -> its rank;
  // filled once by warm_up.
  std::vector<std::pair<std::string, int>> peer_addresses_;
  std::atomic<bool> aborted_{false};
  // Set by end_every_wait(): what later fails in Gloo failed because of it.
  std::atomic<bool> timed_out_{false};
  live_buffers live_;
  std::mutex abort_mtx_;
  std::string abort_reason_;
  // Last: its thread rings fail_connections() and live_, so it stops
  // before they go. None for one rank (nothing to wait for).
  std::optional<op_watchdog> watchdog_;
};

/// The Gloo tag of an operation: its sequence number mixed with its
/// agreement key. Ranks that disagree about sizes would make Gloo abort the
/// whole process (a size check on its network thread calls std::terminate);
/// with the key in the tag their messages never match, and the operation
/// ends in a timeout instead. Tags stay below 2^31 (shutdown_tag is above).
inline uint32_t tag_of(uint64_t seq, uint64_t key) noexcept {
  return static_cast<uint32_t>(agreement_key({seq, key}) & 0x7fffffffu);
}

template<class Fn>
caf::error gloo_backend::guarded(op_kind op, const op_call& call,
                                 Fn&& fn) noexcept {
  if (aborted_.load()) return aborted_error(op, call);
  if (op != op_kind::send && op != op_kind::recv) {
    // A gap in the collectives' numbers: this rank refused an op before it
    // came here (group::refuse), which its peers may have run. Legacy
    // allreduce instances pair by slot, not by number, and would meet the
    // peers' op with this rank's next: drop them, so the next one binds
    // new slots behind a barrier tagged by its number (the ranks then time
    // out instead of mixing data). The number just started is no gap: a
    // later stage of the same op (allgatherv's payload after its headers).
    if (call.seq != next_collective_seq_ &&
        call.seq + 1 != next_collective_seq_)
      legacy_cache_.clear();
    next_collective_seq_ = call.seq + 1;
  }
  op_watch watch{*this, op, call};
  try {
    fn();
    // The watchdog may ring just as the last wait ends: the connections
    // are failed then, so the op reports its timeout all the same.
    return settled(op, call, watch, {});
  } catch (const std::exception& ex) {
    // An abort fails Gloo's connections: what Gloo then throws is its echo.
    if (aborted_.load()) return aborted_error(op, call);
    // So does the watchdog at the op's deadline.
    if (watch.rang())
      return timed_out(op, call,
                       "stopped at the op's deadline; Gloo: " +
                         std::string{ex.what()});
    auto err = translate(op, call, ex);
    // Gloo's own wait for this op timed out before the watchdog rang: Gloo
    // failed the connections, but the half-done transfers of the other
    // lane wait on (live_).
    if (code_of(err) == errc::timeout) end_every_wait();
    return err;
  } catch (...) {
    return make_error(errc::backend_error, context(op, call),
                      "unknown exception from Gloo");
  }
}

} // namespace caf_collective::detail
