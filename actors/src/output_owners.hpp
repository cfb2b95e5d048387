// Outputs owned by the clients that asked for them. The driver's op
// requests name a client (op_request::owner); a member stores that op's
// output under a key of the client's and releases everything under the key
// when the client terminates, as a member's own exit releases what the
// member owns. Without this, the outputs of a client that died before
// releasing them would stay in the members' stores until the members exit.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

#include <caf/actor_addr.hpp>

#include "caf_collective/object_store.hpp"

namespace caf_collective::detail {

/// One client owning outputs in one member's node store.
struct output_owner {
  explicit output_owner(uint64_t k) : key(k) {
    // nop
  }
  /// The store's owner key (never an actor id: see output_owners::of).
  const uint64_t key;
  /// Set, before the release, once the client terminated: an output stored
  /// after that release is dropped by its op at once (op_answer).
  std::atomic<bool> gone{false};
};

using output_owner_ptr = std::shared_ptr<output_owner>;

/// The clients one member stored outputs for. Used on the member's thread
/// only; the release at a client's end runs on whatever thread that client
/// terminates on and touches only the owner and the store.
class output_owners {
 public:
  explicit output_owners(object_store_ptr store) : store_(std::move(store)) {
    // nop
  }

  /// The owner record of `client`, watching its termination from the first
  /// call on. A client that is already gone gets a record marked gone, so
  /// its output is dropped as soon as it is stored. Null for no client.
  output_owner_ptr of(const caf::actor_addr& client);

 private:
  object_store_ptr store_;
  std::map<caf::actor_addr, output_owner_ptr> clients_;
};

} // namespace caf_collective::detail
