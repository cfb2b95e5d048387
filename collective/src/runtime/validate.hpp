// Argument checks every backend relies on: run in the caller's thread
// before an operation is queued, so a bad argument fails at once, nothing is
// sent, and the group stays usable.
#pragma once

#include <caf/error.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"
#include "caf_collective/options.hpp"
#include "caf_collective/tensor.hpp"

namespace caf_collective::detail {

/// Who asks: the group, op, rank and world size errors name.
struct call_site {
  error_context where;
  int rank;
  int world_size;
};

caf::error validate_config(const group_config& cfg);

caf::error check_send(const call_site& at, const tensor_view& in,
                      const send_options& opts);
caf::error check_recv(const call_site& at, const tensor_view& out,
                      const recv_options& opts);
caf::error check_broadcast(const call_site& at, const tensor_view& in,
                           const tensor_view& out,
                           const broadcast_options& opts);
caf::error check_reduce(const call_site& at, const tensor_view& in,
                        const tensor_view& out, const reduce_options& opts);
caf::error check_allreduce(const call_site& at, const tensor_view& in,
                           const tensor_view& out,
                           const allreduce_options& opts);
caf::error check_allgather(const call_site& at, const tensor_view& in,
                           const tensor_view& out);
caf::error check_allgatherv(const call_site& at, const tensor_view& in,
                            const tensor_view& out,
                            const allgatherv_options& opts);
caf::error check_gather(const call_site& at, const tensor_view& in,
                        const tensor_view& out, const gather_options& opts);
caf::error check_scatter(const call_site& at, const tensor_view& in,
                         const tensor_view& out, const scatter_options& opts);
caf::error check_reduce_scatter(const call_site& at, const tensor_view& in,
                                const tensor_view& out,
                                const reduce_scatter_options& opts);
caf::error check_alltoall(const call_site& at, const tensor_view& in,
                          const tensor_view& out);
caf::error check_alltoallv(const call_site& at, const tensor_view& in,
                           const tensor_view& out,
                           const alltoallv_options& opts);
caf::error check_timeout(const call_site& at, const op_options& opts);

} // namespace caf_collective::detail
