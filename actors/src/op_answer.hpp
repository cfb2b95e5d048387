// The answer to one tensor op of a member, and the memory the op holds on
// to until it is answered.
//
// The op's completion answers the requester (the driver, or the member
// itself for an op it started) from whatever thread the op finished on,
// usually the group's lane: the answer goes straight into the requester's
// mailbox instead of through the member's, one message and one scheduler
// wake-up fewer per rank and op. The member may answer first instead, when
// it fails its ops (an abort, a leave, a formation that failed): whichever
// side claims the answer first sends it, so the requester hears exactly
// once. A member that terminates withdraws its answers: its down message
// tells the requester.
//
// The pins live here too, shared by the member and the op's completion, so
// that an op the member gave up on keeps its memory until the lane has let
// go of it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/fwd.hpp>
#include <caf/message_id.hpp>

#include "caf_collective/object_store.hpp"

#include "output_owners.hpp"

namespace caf_collective::detail {

class op_answer {
 public:
  /// `owner`: the member, the sender of the answer and the owner of the
  /// op's output in `store`.
  op_answer(object_store_ptr store, caf::actor_addr owner);

  op_answer(const op_answer&) = delete;
  op_answer& operator=(const op_answer&) = delete;

  /// What the op reads and writes: set by the member before the op is
  /// launched, released once the op completed (the lane is done with it).
  object_ref in_ref;
  pinned_tensor in;
  std::shared_ptr<tensor> out;
  /// The answer is the input's ref (allreduce, broadcast, reduce).
  bool in_place = false;
  /// Who owns the output; null: the member (the `owner` of the ctor).
  output_owner_ptr out_owner;

  /// Where the answer goes: the request the member is handling (call it
  /// before the op is launched).
  void address_to(const caf::response_promise& rp);

  /// The op's outcome, from the thread it finished on (`ctx`: the CAF
  /// worker's execution unit there, else nullptr). Stores the output
  /// (owned by `out_owner`, else the member) and answers with its ref, the
  /// input's ref or the error, unless the member answered first.
  void complete(const caf::error& err, caf::execution_unit* ctx);

  /// The member fails the op with `err`, unless the op answered first
  /// (then false). The memory stays until the op's completion lets go of
  /// it.
  bool fail(caf::error err, caf::execution_unit* ctx);

  /// Whether the answer goes to an actor other than `a` and `b`.
  bool answers_other_than(const caf::actor_addr& a,
                          const caf::actor_addr& b) const;

  /// The member is terminating: nobody answers. True if the op was still
  /// unanswered (in flight).
  bool withdraw();

  bool answered() const noexcept {
    return claimed_.load(std::memory_order_acquire);
  }

 private:
  bool claim() noexcept {
    return !claimed_.exchange(true, std::memory_order_acq_rel);
  }
  void send(caf::message msg, caf::execution_unit* ctx);

  std::atomic<bool> claimed_{false};
  object_store_ptr store_;
  caf::actor_addr owner_;
  caf::strong_actor_ptr requester_;
  /// The requester's address, kept apart from `requester_`, which the
  /// answer's sender resets on whatever thread the op finished on.
  caf::actor_addr requester_addr_;
  std::vector<caf::strong_actor_ptr> stages_;
  caf::message_id id_;
};

using op_answer_ptr = std::shared_ptr<op_answer>;

} // namespace caf_collective::detail
