// Relays to actors on other nodes (remote_relay.hpp). Used for an actor's
// request to a driver on another node (client_ops.hpp) and for a release
// the driver hands to a member on another node (driver_release.cpp). A
// driver of this node needs no relay: it answers everything it holds when
// it exits (driver_failure.hpp).
#include "remote_relay.hpp"

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "blocking_answer.hpp"
#include "caf_collective/client_ops.hpp"

namespace caf_collective::detail {

namespace {

struct relay_state {
  /// Why the target went, once it did (possibly before the request came).
  std::optional<caf::error> gone;
  /// The error for that case, naming what was asked.
  std::function<caf::error(const caf::error&)> lost;
  /// The request in flight, answered on the target's loss.
  caf::response_promise pending;
  bool waiting = false;
  static inline const char* name = "caf_collective.remote_relay";
};

using relay_actor = caf::stateful_actor<relay_state>;

void answer_lost(relay_actor* self) {
  self->state.pending.deliver(self->state.lost(*self->state.gone));
  self->quit();
}

// Forwards `xs` to the target and hands its answer (a `Result`) back.
template<class Result, class... Ts>
caf::result<Result> forward(relay_actor* self, const caf::actor& target,
                            Ts&&... xs) {
  auto rp = self->make_response_promise<Result>();
  self->state.pending = rp;
  if (self->state.gone) {
    answer_lost(self);
    return rp;
  }
  self->state.waiting = true;
  self->request(target, caf::infinite, std::forward<Ts>(xs)...)
    .then(
      [self, rp](Result& x) mutable {
        rp.deliver(std::move(x));
        self->quit();
      },
      [self, rp](caf::error& err) mutable {
        rp.deliver(std::move(err));
        self->quit();
      });
  return rp;
}

caf::behavior relay(relay_actor* self, caf::actor target) {
  self->monitor(target);
  self->set_down_handler([self](caf::down_msg& down) {
    self->state.gone = down.reason;
    if (self->state.waiting) answer_lost(self);
    // Otherwise the request is still on its way here: it is answered
    // with the loss as it arrives.
  });
  return {
    [self, target](op_request& req) -> caf::result<op_result> {
      self->state.lost = [group = req.group,
                          op = req.op](const caf::error& why) {
        return gone_before_answer(error_context{group, op, -1, -1, -1}, why);
      };
      return forward<op_result>(self, target, std::move(req));
    },
    [self, target](release_atom, object_ref& ref) -> caf::result<caf::ok_atom> {
      self->state.lost = [id = ref.id, node = ref.node](const caf::error& why) {
        return make_error(errc::aborted,
                          "release of object " + std::to_string(id) +
                            " of node " + node +
                            ": the actor asked went away (" + render(why) +
                            ") before it answered: whether the object was "
                            "released is unknown");
      };
      return forward<caf::ok_atom>(self, target, release_atom::value,
                                   std::move(ref));
    },
  };
}

} // namespace

caf::actor relay_to(caf::actor_system& sys, caf::actor target) {
  // Hidden: a relay is the library's, and must not keep the user's
  // system from shutting down on its own account.
  return sys.spawn<caf::hidden>(relay, std::move(target));
}

driver_api relay_if_remote(caf::actor_system& sys, const driver_api& driver) {
  if (!driver || driver.node() == sys.node()) return driver;
  // The relay accepts exactly the two requests the helpers send through it
  // (run and release), with the driver's answer types.
  return caf::actor_cast<driver_api>(
    relay_to(sys, caf::actor_cast<caf::actor>(driver)));
}

} // namespace caf_collective::detail
