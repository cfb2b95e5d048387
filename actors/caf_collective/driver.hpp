// The driver: forms groups of member actors and orchestrates collectives on
// object refs (architecture.md, 5-6).
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

/// Spawns a driver. Protocol (all requests; see messages.hpp):
/// - (col_decl, name, std::vector<actor>, backend, timeout ms) -> ok
/// - (col_wait, name) -> ok once formed, or the formation error
/// - op_request -> op_result, or one error naming ranks: invalid_argument,
///   mismatch, unknown_object, unsupported (refused before any data moves),
///   peer_lost, timeout, aborted (the group is broken), unknown_group.
/// - (col_status, name) -> group_status
/// - (col_destr, name) -> ok: members leave; the name may be declared again.
/// The driver monitors every member; it stops on exit messages.
driver_actor spawn_driver(caf::actor_system& sys, driver_config cfg = {});

} // namespace caf_collective
