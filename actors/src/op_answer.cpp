#include "op_answer.hpp"

#include <utility>

#include <caf/abstract_actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/make_message.hpp>
#include <caf/response_promise.hpp>

namespace caf_collective::detail {

op_answer::op_answer(object_store_ptr store, caf::actor_addr owner)
  : store_(std::move(store)), owner_(std::move(owner)) {
  // nop
}

void op_answer::address_to(const caf::response_promise& rp) {
  requester_ = rp.source();
  requester_addr_ = caf::actor_cast<caf::actor_addr>(requester_);
  stages_ = rp.stages();
  id_ = rp.id();
}

void op_answer::complete(const caf::error& err, caf::execution_unit* ctx) {
  if (err) {
    if (claim()) send(caf::make_message(err), ctx);
  } else if (in_place || !out) {
    if (claim()) send(caf::make_message(in_place ? in_ref : object_ref{}), ctx);
  } else {
    // Stored before the claim: a member that terminates after the claim
    // releases what it owns, this output included unless a client owns
    // it; one that withdrew first left it to us.
    auto ref =
      store_->put(std::move(*out), out_owner ? out_owner->key : owner_.id());
    // Its owner terminated before the put: nobody would release it. (The
    // owner's release marks it gone first, so one of the two drops it.)
    if (ref && out_owner && out_owner->gone.load()) store_->release(*ref);
    if (claim()) {
      // Moved, not copied: the ref was made under the store's lock.
      send(ref ? caf::make_message(std::move(*ref))
               : caf::make_message(std::move(ref.error())),
           ctx);
    } else if (ref) {
      store_->release(*ref);
    }
  }
  // The op is done with its memory.
  in.reset();
  out.reset();
}

bool op_answer::fail(caf::error err, caf::execution_unit* ctx) {
  if (!claim()) return false;
  send(caf::make_message(std::move(err)), ctx);
  return true;
}

bool op_answer::answers_other_than(const caf::actor_addr& a,
                                   const caf::actor_addr& b) const {
  return requester_addr_ && requester_addr_ != a && requester_addr_ != b;
}

bool op_answer::withdraw() {
  return claim();
}

// What caf::response_promise::deliver does, from any thread: the response
// to the requester, or the request forwarded to its next stage.
void op_answer::send(caf::message msg, caf::execution_unit* ctx) {
  if (!stages_.empty()) {
    auto next = std::move(stages_.back());
    stages_.pop_back();
    next->enqueue(caf::make_mailbox_element(std::move(requester_), id_,
                                            std::move(stages_), std::move(msg)),
                  ctx);
    return;
  }
  if (requester_)
    requester_->enqueue(caf::actor_cast<caf::strong_actor_ptr>(owner_),
                        id_.response_id(), std::move(msg), ctx);
  requester_.reset();
}

} // namespace caf_collective::detail
