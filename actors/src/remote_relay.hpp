// A request to an actor on another node that must not wait forever: CAF
// 0.17 answers nothing once that node is lost. The request goes through a
// relay of this node instead (remote_relay.cpp), which forwards it, passes
// the answer back, and answers aborted itself when the actor goes away
// first. A relay serves one request and quits once it has answered.
#pragma once

#include <caf/fwd.hpp>

namespace caf_collective::detail {

/// A relay to `target` for one request: an `op_request` (answered with an
/// op_result) or a `(release_atom, object_ref)` (answered with ok_atom).
/// Send it the request, or delegate the request to it.
caf::actor relay_to(caf::actor_system& sys, caf::actor target);

} // namespace caf_collective::detail
