#include "output_owners.hpp"

#include <map>
#include <mutex>
#include <utility>

#include <caf/abstract_actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>
#include <caf/local_actor.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/member_ops.hpp"
#include "caf_collective/messages.hpp"

namespace caf_collective::detail {

namespace {

// Owner keys with the top bit set: actor ids (which members use as their
// own owner key) count up from 1 and never get there.
uint64_t next_key() {
  static std::atomic<uint64_t> count{0};
  return (uint64_t{1} << 63) | count.fetch_add(1, std::memory_order_relaxed);
}

// The watched clients of every store in this process. A store stays alive
// while a watch on one of its clients is pending (the watch holds it), so
// its address names it until that client is gone.
class registry {
 public:
  static registry& instance() {
    // Never destroyed: clients may terminate during static destruction.
    static auto* self = new registry;
    return *self;
  }

  output_owner_ptr of(const object_store_ptr& store,
                      const caf::actor_addr& client) {
    std::unique_lock<std::mutex> guard{mtx_};
    auto key = std::make_pair(store.get(), client);
    auto i = owners_.find(key);
    if (i != owners_.end()) return i->second;
    auto owner = std::make_shared<output_owner>(next_key());
    auto hdl = caf::actor_cast<caf::strong_actor_ptr>(client);
    if (!hdl) {
      owner->gone = true; // destroyed already: nothing to watch
      return owner;
    }
    // Records of clients that ended go when a new client comes: the map
    // holds the live clients and at most the ones gone since.
    std::erase_if(owners_, [](const auto& entry) {
      return entry.second->gone.load(std::memory_order_relaxed);
    });
    owners_.emplace(std::move(key), owner);
    guard.unlock();
    // Runs at once, on this thread, if the client terminated already.
    hdl->get()->attach_functor([owner, store](const caf::error&) {
      owner->gone.store(true);
      store->release_owned_by(owner->key);
    });
    return owner;
  }

 private:
  std::mutex mtx_;
  std::map<std::pair<const object_store*, caf::actor_addr>, output_owner_ptr>
    owners_;
};

} // namespace

output_owner_ptr output_owner_of(const object_store_ptr& store,
                                 const caf::actor_addr& client) {
  if (!client) return nullptr;
  return registry::instance().of(store, client);
}

caf::expected<object_ref> put_owned(caf::local_actor* self, tensor&& t) {
  // Under the watched owner's key, not the actor's id: only members release
  // what their id owns when they end (member.cpp), while the watch serves
  // every actor, member or not.
  auto store = local_store(self->system());
  auto owner = output_owner_of(store, self->address());
  return store->put(std::move(t), owner->key);
}

caf::error hand_over(const object_store_ptr& store, const object_ref& ref,
                     const caf::actor_addr& to) {
  if (!to)
    return make_error(errc::invalid_argument,
                      "hand over: object " + std::to_string(ref.id) +
                        " cannot go to no actor (release it instead)");
  auto owner = output_owner_of(store, to);
  if (auto err = store->set_owner(ref, owner->key)) return err;
  // The owner's watch marks it gone before it releases its objects: an
  // object set after that release is dropped here.
  if (owner->gone.load()) static_cast<void>(store->release(ref));
  return {};
}

} // namespace caf_collective::detail
