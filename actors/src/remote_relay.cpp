// Relays to actors on other nodes (remote_relay.hpp). Used for an actor's
// request to a driver on another node (client_ops.hpp) and for a release
// the driver hands to a member on another node (driver_release.cpp). A
// driver of this node needs no relay: it answers everything it holds when
// it exits (driver_failure.hpp).
//
// One relay serves one sender and one target at a time, so the sender's
// requests reach the target in the order it sent them (CAF keeps the order
// of one sender's messages to one receiver, and the relay is that one
// sender). A relay quits once every request routed to it was answered;
// the next request starts a new one.
#include "remote_relay.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "blocking_answer.hpp"
#include "caf_collective/client_ops.hpp"

namespace caf_collective::detail {

namespace {

using pair_key =
  std::pair<const caf::actor_control_block*, const caf::actor_control_block*>;

// A relay and the requests routed to it that it has not answered yet. The
// record holds the relay weakly: a static table must not own an actor
// that could outlive its actor system. The relay keeps itself alive until
// it quits (relay_state::me).
struct relay_record {
  caf::weak_actor_ptr relay;
  size_t outstanding = 0;
};

using record_ptr = std::shared_ptr<relay_record>;

// The live relay of each (sender, target) pair.
struct relay_registry {
  std::mutex mtx;
  std::map<pair_key, record_ptr> by_pair;
};

relay_registry& registry() {
  static relay_registry instance;
  return instance;
}

// Takes the pair's relay out of service (new requests get a new one),
// unless a newer relay serves the pair already. Call with r.mtx held.
void retire_locked(relay_registry& r, const pair_key& key,
                   const record_ptr& rec) {
  auto i = r.by_pair.find(key);
  if (i != r.by_pair.end() && i->second == rec) r.by_pair.erase(i);
}

void retire(const pair_key& key, const record_ptr& rec) {
  auto& r = registry();
  std::lock_guard<std::mutex> guard{r.mtx};
  retire_locked(r, key, rec);
}

struct pending_request {
  caf::response_promise rp;
  /// The error for a target that went away first, naming what was asked.
  std::function<caf::error(const caf::error&)> lost;
};

struct relay_state {
  /// The relay itself, until it quits: once the node of its target is
  /// lost, nothing else may hold it, and its down message must still be
  /// handled.
  caf::actor me;
  pair_key key;
  record_ptr record;
  /// Why the target went, once it did.
  std::optional<caf::error> gone;
  std::map<uint64_t, pending_request> pending;
  uint64_t next_serial = 0;
  static inline const char* name = "caf_collective.remote_relay";
};

using relay_actor = caf::stateful_actor<relay_state>;

// `n` requests routed here are answered; quits when none is left.
void answered(relay_actor* self, size_t n) {
  auto& r = registry();
  std::unique_lock<std::mutex> guard{r.mtx};
  auto& rec = *self->state.record;
  rec.outstanding -= n;
  if (rec.outstanding > 0) return;
  retire_locked(r, self->state.key, self->state.record);
  guard.unlock();
  self->quit();
}

void settle(relay_actor* self, uint64_t serial, caf::message answer) {
  auto i = self->state.pending.find(serial);
  if (i == self->state.pending.end()) return;
  auto rp = std::move(i->second.rp);
  self->state.pending.erase(i);
  rp.deliver(std::move(answer));
  answered(self, 1);
}

// Forwards `xs` to the target and hands its answer (a `Result`) back.
template<class Result, class... Ts>
caf::result<Result> forward(relay_actor* self, const caf::actor& target,
                            std::function<caf::error(const caf::error&)> lost,
                            Ts&&... xs) {
  auto rp = self->make_response_promise<Result>();
  if (self->state.gone) {
    rp.deliver(lost(*self->state.gone));
    answered(self, 1);
    return rp;
  }
  auto serial = self->state.next_serial++;
  self->state.pending.emplace(serial, pending_request{rp, std::move(lost)});
  self->request(target, caf::infinite, std::forward<Ts>(xs)...)
    .then(
      [self, serial](Result& x) {
        settle(self, serial, caf::make_message(std::move(x)));
      },
      [self, serial](caf::error& err) {
        settle(self, serial, caf::make_message(std::move(err)));
      });
  return rp;
}

caf::behavior relay(relay_actor* self, caf::actor target, pair_key key,
                    record_ptr record) {
  self->state.me = caf::actor_cast<caf::actor>(self);
  self->state.key = key;
  self->state.record = std::move(record);
  self->monitor(target);
  self->set_down_handler([self](caf::down_msg& down) {
    self->state.gone = down.reason;
    // Requests still on their way here are answered as they arrive; new
    // ones get a new relay, which learns of the loss at once.
    retire(self->state.key, self->state.record);
    auto pending = std::move(self->state.pending);
    self->state.pending.clear();
    for (auto& [serial, req] : pending)
      req.rp.deliver(req.lost(down.reason));
    if (!pending.empty()) answered(self, pending.size());
  });
  return {
    [self, target](op_request& req) -> caf::result<op_result> {
      // The client, not this relay (which quits when idle), owns outputs.
      if (!req.owner)
        req.owner = caf::actor_cast<caf::actor_addr>(self->current_sender());
      auto lost = [group = req.group, op = req.op](const caf::error& why) {
        return gone_before_answer(error_context{group, op, -1, -1, -1}, why);
      };
      return forward<op_result>(self, target, std::move(lost), std::move(req));
    },
    [self, target](release_atom, object_ref& ref) -> caf::result<caf::ok_atom> {
      auto lost =
        lost_object_request(ref, "release", "the object was released");
      return forward<caf::ok_atom>(self, target, std::move(lost),
                                   release_atom::value, std::move(ref));
    },
    [self, target](hand_atom, object_ref& ref,
                   caf::actor_addr& to) -> caf::result<caf::ok_atom> {
      auto lost =
        lost_object_request(ref, "hand over", "the object changed hands");
      return forward<caf::ok_atom>(self, target, std::move(lost),
                                   hand_atom::value, std::move(ref),
                                   std::move(to));
    },
  };
}

} // namespace

caf::actor relay_to(caf::actor_system& sys, const caf::abstract_actor* sender,
                    caf::actor target) {
  pair_key key{sender->ctrl(),
               caf::actor_cast<caf::actor_control_block*>(target)};
  auto& r = registry();
  std::lock_guard<std::mutex> guard{r.mtx};
  auto& rec = r.by_pair[key];
  caf::actor live;
  if (rec) live = caf::actor_cast<caf::actor>(rec->relay);
  if (!live) {
    rec = std::make_shared<relay_record>();
    // Hidden: a relay is the library's, and must not keep the user's
    // system from shutting down on its own account.
    live = sys.spawn<caf::hidden>(relay, std::move(target), key, rec);
    rec->relay = caf::actor_cast<caf::weak_actor_ptr>(live);
  }
  ++rec->outstanding;
  return live;
}

driver_api relay_if_remote(caf::actor_system& sys,
                           const caf::abstract_actor* sender,
                           const driver_api& driver) {
  if (!driver || driver.node() == sys.node()) return driver;
  // The relay accepts exactly the two requests the helpers send through it
  // (run and release), with the driver's answer types.
  return caf::actor_cast<driver_api>(
    relay_to(sys, sender, caf::actor_cast<caf::actor>(driver)));
}

} // namespace caf_collective::detail
