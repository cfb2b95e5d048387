// The rendezvous store of a member's group: make_actor_store's store that
// also holds the actor system up, and that the member can close.
#pragma once

#include <memory>
#include <string>

#include "caf_collective/rendezvous.hpp"
#include "caf_collective/rendezvous_actor.hpp"

namespace caf_collective {

/// A rendezvous store that can be closed: every wait in it, and every later
/// call, ends with `aborted` within about 100 ms.
class member_store : public rendezvous_store {
 public:
  virtual void close() noexcept = 0;
};

/// An actor store (make_actor_store) that counts as a running actor while it
/// exists, so that the actor system's destructor waits for it. A member's
/// group keeps its store until the group is destroyed, which happens on the
/// group's lane after the member terminated (formation or teardown may
/// still talk to the store then); without the hold, the system could be
/// destroyed under that work. Only for groups whose destruction is bounded:
/// a member lets go of its groups when it terminates, and closes the store
/// of a group still forming, whose formation would otherwise wait for its
/// peers up to its timeout.
std::shared_ptr<member_store> make_member_store(caf::actor_system& sys,
                                                store_actor store,
                                                std::string prefix);

} // namespace caf_collective
