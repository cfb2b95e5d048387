// Running ops: a validated request waits in its group's queue, its refs
// are checked (in this node's store, or by the member holding them), it
// gets the group's next sequence number, every taking-part member is sent
// its start, and the client is answered once every rank reported.
#pragma once

#include <cstdint>

#include <caf/fwd.hpp>

#include "caf_collective/messages.hpp"

#include "driver_state.hpp"

namespace caf_collective::detail {

/// An op_request from a client: refused at once (unknown group, broken
/// group, members-run group, or what validate() finds), or queued and
/// answered later through a response promise.
caf::result<op_result> submit_op(driver_ptr self, op_request& req);

/// Starts the ops at the head of `g`'s queue whose checks are done, and
/// the checks of the next one. Ops start one at a time, in arrival order;
/// nothing starts before the group is ready.
void pump(driver_ptr self, group_entry& g);

/// Makes sure the group's deadline timer fires by `deadline`. One timer per
/// group instead of one per op: ops usually finish long before their
/// deadline, and every timer wakes CAF's clock thread on the op's path.
void arm_deadline(driver_ptr self, group_entry& g,
                  caf::actor_clock::time_point deadline);

/// Answers the client of running op `seq` from its ranks' reports: the
/// result refs, or one error naming the failed ranks (which breaks the
/// group). A report of a lost peer defers the answer by the driver's grace
/// (answer_atom), so that the down message can name the dead rank first.
void answer(driver_ptr self, group_entry& g, uint64_t seq);

} // namespace caf_collective::detail
