#include "output_owners.hpp"

#include <caf/abstract_actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>

namespace caf_collective::detail {

namespace {

// Owner keys with the top bit set: actor ids (which members use as their
// own owner key) count up from 1 and never get there.
uint64_t next_key() {
  static std::atomic<uint64_t> count{0};
  return (uint64_t{1} << 63) | count.fetch_add(1, std::memory_order_relaxed);
}

} // namespace

output_owner_ptr output_owners::of(const caf::actor_addr& client) {
  if (!client) return nullptr;
  auto i = clients_.find(client);
  if (i != clients_.end()) return i->second;
  auto owner = std::make_shared<output_owner>(next_key());
  auto hdl = caf::actor_cast<caf::strong_actor_ptr>(client);
  if (!hdl) {
    owner->gone = true; // destroyed already: nothing to watch
    return owner;
  }
  // Records of clients that ended go when a new client comes: the map
  // holds the live clients and at most the ones gone since.
  std::erase_if(clients_, [](const auto& entry) {
    return entry.second->gone.load(std::memory_order_relaxed);
  });
  // Runs at once if the client terminated already.
  hdl->get()->attach_functor([owner, store = store_](const caf::error&) {
    owner->gone.store(true);
    store->release_owned_by(owner->key);
  });
  clients_.emplace(client, owner);
  return owner;
}

} // namespace caf_collective::detail
