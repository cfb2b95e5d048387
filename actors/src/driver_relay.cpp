// An actor's request to a driver on another node (client_ops.hpp). CAF
// 0.17 answers nothing once that node is lost, so the response handle the
// typed helpers return would wait forever. Such a request goes through a
// relay of the client's own node instead: it forwards the request, passes
// the driver's answer back, and answers aborted itself when the driver goes
// away first. One relay per request; it quits once it has answered, so
// nothing outlives the request. A driver of this node needs no relay: it
// answers everything it holds when it exits (driver_failure.hpp).
#include "caf_collective/client_ops.hpp"

#include <optional>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "blocking_answer.hpp"

namespace caf_collective::detail {

namespace {

struct relay_state {
  /// Why the driver went, once it did (possibly before the request came).
  std::optional<caf::error> gone;
  /// The group asked about; error_context keeps a view of it.
  std::string group;
  error_context where;
  /// The request in flight, answered on the driver's loss.
  caf::response_promise pending;
  bool waiting = false;
  static inline const char* name = "caf_collective.driver_relay";
};

using relay_actor = caf::stateful_actor<relay_state>;

void answer_lost(relay_actor* self) {
  self->state.pending.deliver(
    gone_before_answer(self->state.where, *self->state.gone));
  self->quit();
}

// Forwards `xs` to the driver and hands its answer (a `Result`) back.
template<class Result, class... Ts>
caf::result<Result> forward(relay_actor* self, const caf::actor& driver,
                            Ts&&... xs) {
  auto rp = self->make_response_promise<Result>();
  self->state.pending = rp;
  if (self->state.gone) {
    answer_lost(self);
    return rp;
  }
  self->state.waiting = true;
  self->request(driver, caf::infinite, std::forward<Ts>(xs)...)
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

caf::behavior relay(relay_actor* self, caf::actor driver) {
  self->monitor(driver);
  self->set_down_handler([self](caf::down_msg& down) {
    self->state.gone = down.reason;
    if (self->state.waiting) answer_lost(self);
    // Otherwise the request is still on its way here: it is answered
    // with the loss as it arrives.
  });
  return {
    [self, driver](op_request& req) -> caf::result<op_result> {
      self->state.group = req.group;
      self->state.where = error_context{self->state.group, req.op, -1, -1, -1};
      return forward<op_result>(self, driver, std::move(req));
    },
    [self, driver](release_atom, object_ref& ref) -> caf::result<caf::ok_atom> {
      return forward<caf::ok_atom>(self, driver, release_atom::value,
                                   std::move(ref));
    },
  };
}

} // namespace

driver_api relay_if_remote(caf::actor_system& sys, const driver_api& driver) {
  if (!driver || driver.node() == sys.node()) return driver;
  // Hidden: a relay is the library's, and must not keep the user's
  // system from shutting down on its own account.
  auto r = sys.spawn<caf::hidden>(relay, caf::actor_cast<caf::actor>(driver));
  // The relay accepts exactly the two requests the helpers send through it
  // (run and release), both with the driver's answer types.
  return caf::actor_cast<driver_api>(r);
}

} // namespace caf_collective::detail
