// The rendezvous store of a member's group: make_actor_store's store that
// also holds the actor system up.
#pragma once

#include <string>

#include "caf_collective/rendezvous.hpp"
#include "caf_collective/rendezvous_actor.hpp"

namespace caf_collective {

/// An actor store (make_actor_store) that counts as a running actor while it
/// exists, so that the actor system's destructor waits for it. A member's
/// group keeps its store until the group is destroyed, which happens on the
/// group's lane after the member terminated (formation or teardown may
/// still talk to the store then); without the hold, the system could be
/// destroyed under that work. Only for groups whose destruction is bounded:
/// a member lets go of its groups when it terminates, and aborts a group
/// still forming, which ends the group's waits on this store (the group's
/// cancelable view of it, collective/src/runtime/cancelable_store.hpp).
rendezvous_store_ptr make_member_store(caf::actor_system& sys,
                                       store_actor store, std::string prefix);

} // namespace caf_collective
