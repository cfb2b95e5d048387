// How a member starts its own ops without a message to itself
// (member_ops.hpp, detail::start_own_op): the member protocol registers a
// starter for its actor here, and the member's own handlers find it by the
// actor's control block (actor ids repeat across the actor systems of one
// process). The entry lives from member_protocol until the actor exits.
#pragma once

#include <functional>
#include <memory>

#include <caf/fwd.hpp>
#include <caf/response_promise.hpp>

#include "caf_collective/member_jobs.hpp"
#include "caf_collective/member_ops.hpp"

namespace caf_collective::detail {

/// Starts a member's own tensor ops and object ops (member_jobs.hpp),
/// answering through the promise.
struct own_op_starter {
  std::function<void(member_op&, caf::response_promise)> op;
  std::function<void(member_job&, caf::response_promise)> job;
};

/// Makes `start` the way the actor `who` starts its own ops.
void register_own_ops(const caf::actor_control_block* who,
                      std::shared_ptr<own_op_starter> start);

/// Forgets the actor `who` (it exits).
void unregister_own_ops(const caf::actor_control_block* who);

} // namespace caf_collective::detail
