// Outputs owned by the clients that asked for them. The driver's op
// requests name a client (op_request::owner); a member stores that op's
// output in its node's store under the client's key, and everything under
// the key is released when the client terminates, as a member's own exit
// releases what the member owns. Without this, the outputs of a client that
// died before releasing them would stay in the store until the process
// ends.
//
// The watch on a client belongs to the store, not to a member: members may
// come and go while the client and its outputs live on, and a client using
// many members of one node is watched once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include <caf/actor_addr.hpp>

#include "caf_collective/object_store.hpp"

namespace caf_collective::detail {

/// One client owning outputs in one node's store.
struct output_owner {
  explicit output_owner(uint64_t k) : key(k) {
    // nop
  }
  /// The store's owner key (never an actor id: see output_owner_of).
  const uint64_t key;
  /// Set, before the release, once the client terminated: an output stored
  /// after that release is dropped by its op at once (op_answer).
  std::atomic<bool> gone{false};
};

using output_owner_ptr = std::shared_ptr<output_owner>;

/// The owner record of `client` in `store`, watching the client's
/// termination from the first call on (from any thread). A client that is
/// already gone gets a record marked gone, so its output is dropped as soon
/// as it is stored. Null for no client.
output_owner_ptr output_owner_of(const object_store_ptr& store,
                                 const caf::actor_addr& client);

/// Makes `to` the owner of `ref` in `store`, in place of its owner so far:
/// the object is released when `to` terminates (at once if it has). Fails
/// with invalid_argument for no actor, unknown_object for no such object.
caf::error hand_over(const object_store_ptr& store, const object_ref& ref,
                     const caf::actor_addr& to);

} // namespace caf_collective::detail
