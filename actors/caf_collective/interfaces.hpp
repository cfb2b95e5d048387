// Typed views of the actor layer's actors (CAF 0.17 typed_actor): with these
// handles a request the actor does not understand, or a handler expecting
// the wrong answer, is a compile error instead of an `unexpected_message`
// at run time.
//
// The actors themselves stay dynamically typed where CAF needs it: members
// are actors of the user's own type with the member protocol behind their
// behavior, and remote spawn passes plain caf::actor handles. The views are
// exact subsets of what those actors accept, so casting a handle of the
// right actor to its view is always sound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "caf_collective/member_ops.hpp"
#include "caf_collective/messages.hpp"

namespace caf_collective {

/// What clients ask the driver (driver.hpp says what each answer means).
using driver_api = caf::typed_actor<
  caf::replies_to<op_request>::with<op_result>,
  caf::replies_to<declare_atom, std::string, std::vector<caf::actor>,
                  std::string, int64_t>::with<caf::ok_atom>,
  caf::replies_to<wait_atom, std::string>::with<caf::ok_atom>,
  caf::replies_to<destroy_atom, std::string>::with<caf::ok_atom>,
  caf::replies_to<status_atom, std::string>::with<group_status>,
  caf::replies_to<release_atom, object_ref>::with<caf::ok_atom>,
  caf::replies_to<hand_atom, object_ref, caf::actor_addr>::with<caf::ok_atom>>;

/// What anyone may ask a member about its groups, and what a member asks
/// itself for a member-initiated op (member_ops.hpp).
using member_api = caf::typed_actor<
  caf::replies_to<status_atom, std::string>::with<group_status>,
  caf::replies_to<history_atom, std::string>::with<std::string>,
  caf::replies_to<release_atom, object_ref>::with<caf::ok_atom>,
  caf::replies_to<hand_atom, object_ref, caf::actor_addr>::with<caf::ok_atom>,
  caf::replies_to<member_op>::with<object_ref>>;

/// The rendezvous store actor (rendezvous_actor.hpp).
using store_api = caf::typed_actor<
  caf::replies_to<caf::put_atom, std::string,
                  std::vector<char>>::with<caf::ok_atom>,
  caf::replies_to<caf::get_atom, std::string, int64_t>::with<std::vector<char>>,
  caf::replies_to<forget_atom, std::string>::with<caf::ok_atom>>;

/// The typed view of a driver spawned by spawn_driver.
inline driver_api typed_driver(const driver_actor& driver) {
  return caf::actor_cast<driver_api>(driver);
}

/// The typed view of a member (an actor running the member protocol).
inline member_api typed_member(const member_actor& member) {
  return caf::actor_cast<member_api>(member);
}

/// The typed view of a store actor spawned by spawn_store_actor.
inline store_api typed_store(const store_actor& store) {
  return caf::actor_cast<store_api>(store);
}

} // namespace caf_collective
