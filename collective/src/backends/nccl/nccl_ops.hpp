// The operations of the NCCL backend, written once over a clique of one or
// more local NCCL ranks: the group backend passes one tensor per call, the
// multi-GPU API one per device. Roots, peers and counts are NCCL ranks,
// which equal group ranks for a single device per member.
//
// Each function checks what only it knows (devices of the tensors, reduce
// ops NCCL lacks); the callers validated sizes, roots and dtypes before.
// Point-to-point messages live in nccl_p2p.hpp. Gather, scatter and
// alltoall take NCCL's own calls or grouped send/recv, as the clique's
// paths say (nccl_version.hpp).
#pragma once

#include <span>
#include <vector>

#include <caf/error.hpp>

#include "caf_collective/reduce_op.hpp"
#include "caf_collective/tensor.hpp"
#include "backends/nccl/nccl_clique.hpp"

namespace caf_collective::detail {

using views = std::span<const tensor_view>;

/// Whether NCCL can run `op` on `type` at all: every dtype of ours maps to
/// an NCCL type; the bitwise reductions do not exist in NCCL.
caf::error check_nccl_reduce_op(const error_context& where, reduce_op op,
                                dtype type);

caf::error nccl_broadcast(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                          views out, int root);
caf::error nccl_reduce(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                       views out, int root, reduce_op op);
caf::error nccl_allreduce(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                          views out, reduce_op op);
caf::error nccl_allgather(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                          views out);
/// `counts[r]`: elements NCCL rank r contributes.
caf::error nccl_allgatherv(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                           views out, const std::vector<size_t>& counts);
caf::error nccl_gather(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                       views out, int root);
caf::error nccl_scatter(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                        views out, int root);
caf::error nccl_reduce_scatter(nccl_clique& c, const nccl_step_ctx& ctx,
                               views in, views out, reduce_op op);
caf::error nccl_alltoall(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                         views out);
caf::error nccl_alltoallv(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                          views out, const std::vector<size_t>& send_counts,
                          const std::vector<size_t>& recv_counts);
caf::error nccl_barrier(nccl_clique& c, const nccl_step_ctx& ctx);

/// The buffers one rank hands NCCL for a rooted op.
struct rooted_buffers {
  const void* send = nullptr;
  void* recv = nullptr;
};

/// Gather: off the root NCCL never touches the receive buffer, but checks it
/// (NCCL_CHECK_POINTERS=1 refuses null), so it gets the rank's own input.
rooted_buffers gather_buffers(bool is_root, const tensor_view& in,
                              const tensor_view& out) noexcept;

/// Scatter: off the root the send buffer is the rank's own output, for the
/// same reason.
rooted_buffers scatter_buffers(bool is_root, const tensor_view& in,
                               const tensor_view& out) noexcept;

} // namespace caf_collective::detail
