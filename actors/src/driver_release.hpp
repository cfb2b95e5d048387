// Releasing object refs through the driver, or handing them to another
// owner: a client holding refs of any node asks the driver, which acts on a
// ref of its own node in its store and forwards one of another node to a
// member living there. The driver also drops, on its own, the outputs of
// ops whose answer is an error: no client ever receives those refs, so
// nobody else could release them.
#pragma once

#include <caf/actor.hpp>
#include <caf/result.hpp>

#include "driver_state.hpp"

namespace caf_collective::detail {

caf::result<caf::ok_atom> release_ref(driver_ptr self, const object_ref& ref);

/// Makes `to` the owner of `ref` (output_owners.hpp, hand_over).
caf::result<caf::ok_atom> hand_over_ref(driver_ptr self, const object_ref& ref,
                                        const caf::actor_addr& to);

/// Drops an op's output that no client will receive: `ref` from this node's
/// store, or by telling `holder` (the member that made it, on the ref's
/// node) to release it. Invalid refs are ignored.
void discard_output(const driver_state& st, const caf::actor& holder,
                    const object_ref& ref);

/// The outputs `op` collected from the ranks that finished it, when the op
/// is answered with an error (a rank failed, a deadline passed, the group
/// broke or was destroyed, the driver is exiting). In-place ops collected
/// their inputs, which stay: the client still owns them.
void discard_outputs(const driver_state& st, const group_entry& g,
                     const pending_op& op);

} // namespace caf_collective::detail
