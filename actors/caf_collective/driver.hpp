// The driver: forms groups of member actors and orchestrates collectives on
// object refs (docs/actors.md).
#pragma once

#include <chrono>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "caf_collective/messages.hpp"

namespace caf_collective {

struct driver_config {
  /// The rendezvous store actor members use; null: the driver spawns one
  /// (linked, so it dies with the driver).
  store_actor store;
  /// Extra time the driver grants an op or a formation beyond its deadline
  /// before it declares the unfinished ranks, so that the members' own
  /// timeout reports arrive first and the error can carry them.
  std::chrono::milliseconds grace{200};
};

/// Spawns a driver. Protocol (all requests, each answered exactly once;
/// see messages.hpp):
/// - (col_decl, name, std::vector<actor>, backend, timeout ms) -> ok once
///   formed; invalid_argument naming the position of a null, repeated,
///   dead or non-member actor, or naming a backend other than gloo, shm,
///   nccl or auto (the same refuses a registration); duplicate_group;
///   mismatch when the ranks formed the group on different backends (or
///   not on the one asked for, unless that was auto).
/// - (col_wait, name) -> ok once formed, or the formation error;
///   unknown_group at once while no member registered and no declaration
///   is under way.
/// - op_request -> op_result, or one error naming ranks: invalid_argument
///   (also for enum values outside their enums, timeouts outside
///   [0, max_timeout_ms], one object named for two ranks of an in-place op
///   and counts whose sum does not fit), mismatch, unknown_object, unsupported
///   (refused before any data moves and before a sequence number is taken),
///   peer_lost, timeout, aborted (the group is broken), unknown_group.
/// - (col_status, name) -> group_status, its `backend` the one every rank
///   got once formed ("auto" resolved: shm on one host, else gloo)
/// - (col_destr, name) -> ok: members leave; the name may be declared
///   again. unknown_group for a name the driver does not know.
/// The driver monitors every member from its registration on (members
/// spawned on other nodes too); it stops on exit messages, never on a
/// request or a stray error message.
driver_actor spawn_driver(caf::actor_system& sys, driver_config cfg = {});

} // namespace caf_collective
