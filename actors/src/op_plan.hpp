// What a member hands its group's lane for one op, whether the driver
// started it (start_msg) or the member itself (member_op): the op kind and
// the options the collective layer needs, already in this rank's terms.
#pragma once

#include <cstdint>
#include <vector>

#include "caf_collective/group.hpp"
#include "caf_collective/messages.hpp"

namespace caf_collective::detail {

struct op_plan {
  op_kind op = op_kind::barrier;
  op_params params;
  uint32_t tag = 0;
  /// alltoallv: this rank's row and column of the count matrix.
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
};

/// The plan of a driver's start message for rank `rank` of `world_size`.
op_plan plan_of(const start_msg& msg, int rank, int world_size);

/// Whether `op` writes its result into its input (allreduce, broadcast,
/// reduce).
bool in_place(op_kind op);

/// Submits the plan to `g`'s lane; `in` and `out` stay valid until the
/// returned work completes. Send and recv are one op kind pair: the rank
/// equal to `params.root` sends to `params.peer`, the other receives.
work submit_plan(group& g, const op_plan& plan, uint64_t key,
                 const tensor_view& in, const tensor_view& out);

} // namespace caf_collective::detail
