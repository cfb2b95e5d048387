// The rendezvous store as an actor, and the rendezvous_store that the Gloo
// backend uses to reach it from a lane thread.
#pragma once

#include <string>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "caf_collective/messages.hpp"
#include "caf_collective/rendezvous.hpp"

namespace caf_collective {

/// A key-value store actor:
/// - (put, key, std::vector<char>) -> ok
/// - (get, key, timeout ms) -> std::vector<char> once the key exists, or
///   errc::timeout naming the key.
store_actor spawn_store_actor(caf::actor_system& sys);

/// A rendezvous_store that sends blocking requests to `store` with every
/// key prefixed by `prefix` + "/". Call it from lane threads or plain
/// threads only, never from an actor's handler: each call blocks until the
/// store answers. Waits are bounded to 24 h per call (max_timeout_ms); a
/// store that does not answer in time is errc::timeout, one that is gone
/// errc::peer_lost.
rendezvous_store_ptr make_actor_store(caf::actor_system& sys, store_actor store,
                                      std::string prefix);

} // namespace caf_collective
