// The backend interface: what a transport (Gloo, NCCL, shared memory) must
// implement to run collectives for one member of one group.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <caf/error.hpp>

#include "caf_collective/device.hpp"
#include "caf_collective/dtype.hpp"
#include "caf_collective/op_kind.hpp"
#include "caf_collective/options.hpp"
#include "caf_collective/tensor.hpp"

namespace caf_collective {

/// What a backend gets with every call: the group's sequence number of the
/// operation (identical on every rank, usable as a wire tag) and the
/// resolved timeout (never zero).
struct op_call {
  uint64_t seq = 0;
  milliseconds timeout{0};
};

/// How a backend reports the end of an op it started without blocking
/// (the start_* members): called exactly once, on any thread.
using op_completion = std::function<void(caf::error)>;

/// One member's end of one group on one transport.
///
/// Threading contract: the group calls the operations from whichever
/// thread holds its lane (the lane's own thread, or a caller that claimed
/// the idle lane), one at a time, in sequence order, after validating the
/// arguments (sizes, dtypes, roots, peers, null buffers; see validate.hpp).
/// An operation returns when it has completed on this rank, or with an
/// error; an op started without blocking (start_*) holds the lane until
/// its completion. `abort` is the only member that may be called from
/// another thread at any time.
///
/// Out-of-place and in-place: `in` and `out` may be the same memory where
/// the op allows it (broadcast, reduce, allreduce); the backend must handle
/// both.
class backend {
 public:
  virtual ~backend();

  /// "gloo", "nccl", "local".
  virtual std::string_view name() const noexcept = 0;

  virtual int rank() const noexcept = 0;

  virtual int world_size() const noexcept = 0;

  /// Capability query: can this backend run `op` on tensors of `type` that
  /// live on `kind`? Asked before any data moves.
  virtual bool supports(op_kind op, device_kind kind,
                        dtype type) const noexcept = 0;

  virtual caf::error send(const op_call& call, const tensor_view& in,
                          const send_options& opts);
  virtual caf::error recv(const op_call& call, const tensor_view& out,
                          const recv_options& opts);
  /// `in` is read on the root only; every rank (root included) gets the
  /// root's data in `out`.
  virtual caf::error broadcast(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const broadcast_options& opts);
  /// `out` is written on the root only.
  virtual caf::error reduce(const op_call& call, const tensor_view& in,
                            const tensor_view& out, const reduce_options& opts);
  virtual caf::error allreduce(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const allreduce_options& opts);
  /// out = concatenation of every rank's `in`, in rank order.
  virtual caf::error allgather(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const allgather_options& opts);
  virtual caf::error allgatherv(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const allgatherv_options& opts);
  /// `out` (world_size x in) is written on the root only.
  virtual caf::error gather(const op_call& call, const tensor_view& in,
                            const tensor_view& out, const gather_options& opts);
  /// `in` (world_size x out) is read on the root only.
  virtual caf::error scatter(const op_call& call, const tensor_view& in,
                             const tensor_view& out,
                             const scatter_options& opts);
  /// in holds world_size blocks of out.numel(); rank r gets the reduction
  /// of every rank's block r.
  virtual caf::error reduce_scatter(const op_call& call, const tensor_view& in,
                                    const tensor_view& out,
                                    const reduce_scatter_options& opts);
  /// Block j of `in` goes to rank j; block i of `out` comes from rank i.
  virtual caf::error alltoall(const op_call& call, const tensor_view& in,
                              const tensor_view& out,
                              const alltoall_options& opts);
  virtual caf::error alltoallv(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const alltoallv_options& opts);
  virtual caf::error barrier(const op_call& call, const barrier_options& opts);

  /// Non-blocking starts, for callers that must not wait for their peers
  /// (actor members on CAF's scheduler threads). A backend that can take
  /// this rank's part of the op without waiting (shm, every rank in one
  /// process, small ops: the last rank to arrive finishes it for all)
  /// takes `done` (moving from it), returns true and calls it once the op
  /// is over on this rank; `in` and `out` stay valid until then. False (the
  /// default): `done` is untouched and the group runs the blocking form on
  /// its lane. Called like the blocking forms: from whichever thread owns
  /// the lane at the time, in sequence order, after validation.
  virtual bool start_allreduce(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const allreduce_options& opts,
                               op_completion& done);
  virtual bool start_broadcast(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const broadcast_options& opts,
                               op_completion& done);
  virtual bool start_barrier(const op_call& call, const barrier_options& opts,
                             op_completion& done);
  virtual bool start_reduce(const op_call& call, const tensor_view& in,
                            const tensor_view& out, const reduce_options& opts,
                            op_completion& done);
  virtual bool start_allgather(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const allgather_options& opts,
                               op_completion& done);
  virtual bool start_gather(const op_call& call, const tensor_view& in,
                            const tensor_view& out, const gather_options& opts,
                            op_completion& done);
  virtual bool start_scatter(const op_call& call, const tensor_view& in,
                             const tensor_view& out,
                             const scatter_options& opts, op_completion& done);
  virtual bool start_reduce_scatter(const op_call& call, const tensor_view& in,
                                    const tensor_view& out,
                                    const reduce_scatter_options& opts,
                                    op_completion& done);
  virtual bool start_alltoall(const op_call& call, const tensor_view& in,
                              const tensor_view& out,
                              const alltoall_options& opts,
                              op_completion& done);
  /// A send that needs no wait for its peer (shm: a message that fits the
  /// pair's mailbox, which is empty) is over once written; `done` is then
  /// called before this returns.
  virtual bool start_send(const op_call& call, const tensor_view& in,
                          const send_options& opts, op_completion& done);

  /// Unblocks and fails whatever this backend is doing and makes every
  /// later call fail with errc::aborted. Safe from any thread.
  virtual void abort(std::string_view why) = 0;

 protected:
  /// The default body of each operation: "backend X does not support Y".
  caf::error not_supported(op_kind op) const;
};

using backend_ptr = std::unique_ptr<backend>;

} // namespace caf_collective
