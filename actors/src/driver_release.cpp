#include "driver_release.hpp"

#include <caf/all.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/interfaces.hpp"

#include "op_plan.hpp"
#include "output_owners.hpp"
#include "remote_relay.hpp"

namespace caf_collective::detail {

namespace {

// A live member the driver monitors on `node` (every registered member,
// also one whose group was destroyed), or null.
caf::actor member_on(const driver_state& st, const std::string& node) {
  for (auto& [addr, its_node] : st.monitored)
    if (its_node == node)
      if (auto member = caf::actor_cast<caf::actor>(addr)) return member;
  return nullptr;
}

// The member of the ref's node, behind a relay that answers aborted if
// that node is lost first (the client does not watch the member, whose
// node it may not even know), or why there is none.
caf::expected<member_api> holder_of(driver_ptr self, const object_ref& ref,
                                    const char* verb) {
  auto member = member_on(self->state, ref.node);
  if (!member)
    return make_error(errc::unknown_object,
                      std::string{verb} + ": no member of node " + ref.node +
                        " is known to the driver, so object " +
                        std::to_string(ref.id) + " cannot be reached");
  return typed_member(relay_to(self->system(), self, std::move(member)));
}

} // namespace

caf::result<caf::ok_atom> release_ref(driver_ptr self, const object_ref& ref) {
  if (!ref.valid())
    return make_error(errc::invalid_argument, "release: the ref is empty");
  if (ref.node == self->state.node) {
    if (auto err = self->state.local->release(ref)) return err;
    return caf::ok_atom::value;
  }
  auto holder = holder_of(self, ref, "release");
  if (!holder) return std::move(holder.error());
  // The member of that node answers the client directly.
  return self->delegate(*holder, release_atom::value, ref);
}

caf::result<caf::ok_atom> hand_over_ref(driver_ptr self, const object_ref& ref,
                                        const caf::actor_addr& to) {
  if (!ref.valid())
    return make_error(errc::invalid_argument, "hand over: the ref is empty");
  if (ref.node == self->state.node) {
    if (auto err = hand_over(self->state.local, ref, to)) return err;
    return caf::ok_atom::value;
  }
  auto holder = holder_of(self, ref, "hand over");
  if (!holder) return std::move(holder.error());
  return self->delegate(*holder, hand_atom::value, ref, to);
}

void discard_output(const driver_state& st, const caf::actor& holder,
                    const object_ref& ref) {
  if (!ref.valid()) return;
  if (ref.node == st.node) {
    // Already gone (its member exited and released what it owned): fine.
    static_cast<void>(st.local->release(ref));
    return;
  }
  // Sent without a sender: the member's answer goes nowhere. The output
  // belongs to the op's client, not to the member that made it, so it
  // outlives a holder that died: another member of its node releases it
  // (none left: the node is gone, and its store with it).
  auto via = holder ? holder : member_on(st, ref.node);
  if (via) caf::anon_send(via, release_atom::value, ref);
}

void discard_outputs(const driver_state& st, const group_entry& g,
                     const pending_op& op) {
  if (in_place(op.req.op)) return;
  for (size_t r = 0; r < op.outs.size(); ++r)
    discard_output(st, r < g.members.size() ? g.members[r] : caf::actor{},
                   op.outs[r]);
}

} // namespace caf_collective::detail
