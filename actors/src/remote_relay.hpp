// A request to an actor on another node that must not wait forever: CAF
// 0.17 answers nothing once that node is lost. The request goes through a
// relay of this node instead (remote_relay.cpp), which forwards it, passes
// the answer back, and answers aborted itself when the actor goes away
// first.
#pragma once

#include <caf/fwd.hpp>

namespace caf_collective::detail {

/// The relay from `sender` to `target`: it takes an `op_request`
/// (answered with an op_result) or a `(release_atom, object_ref)`
/// (answered with ok_atom). Send it the request, or delegate the request to
/// it, right after this call: each call counts one request the relay waits
/// for before it may quit. Requests of one sender keep their order.
caf::actor relay_to(caf::actor_system& sys, const caf::abstract_actor* sender,
                    caf::actor target);

} // namespace caf_collective::detail
