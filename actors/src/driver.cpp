// The driver actor: forms groups of members and orchestrates collectives on
// object refs (docs/actors.md). This file only wires CAF's handlers
// to the driver's phases, each in its own file with the state it touches:
// - driver_state.hpp: the group entries, pending ops and the driver's state;
// - driver_formation: registration, declaration and joins, init, ready
//   reports, the formation deadline;
// - driver_validation: pure checks of declarations and op requests;
// - driver_dispatch: the op queue, ref checks, start messages, answers;
// - driver_failure: broken groups, member deaths, op deadlines, destroy;
// - driver_release: releasing refs of any node.
#include "caf_collective/driver.hpp"

#include <caf/all.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/log.hpp"
#include "caf_collective/rendezvous_actor.hpp"

#include "driver_dispatch.hpp"
#include "driver_failure.hpp"
#include "driver_formation.hpp"
#include "driver_release.hpp"
#include "driver_state.hpp"

namespace caf_collective {

namespace {

using namespace detail;

} // namespace

namespace detail {

driver_state::~driver_state() {
  if (timing.on()) log_warning("driver", "timing: " + timing.summary());
  fail_all_at_exit(*this,
                   owner != nullptr ? owner->fail_state() : caf::error{});
}

} // namespace detail

namespace {

group_status status_of(const driver_state& st, const std::string& name) {
  group_status result;
  result.group = name;
  auto i = st.groups.find(name);
  if (i == st.groups.end()) {
    result.state = "unknown";
    return result;
  }
  result.world_size = i->second.world_size;
  result.state = to_cstr(i->second.state);
  result.reason = i->second.reason;
  result.next_seq = i->second.next_seq;
  result.backend = i->second.backend_in_use;
  return result;
}

caf::behavior driver_impl(driver_ptr self, driver_config cfg, bool owns_store) {
  self->state.owner = self;
  self->state.grace = cfg.grace;
  self->state.local = local_store(self->system());
  self->state.node = node_name(self->system());
  self->state.store = std::move(cfg.store);
  // A store the driver created lives exactly as long as the driver.
  if (owns_store) self->link_to(self->state.store);
  self->set_down_handler([=](caf::down_msg& dm) { on_member_down(self, dm); });
  // CAF's default stops an actor that receives an error as a plain message
  // (e.g. an actor answering a plain send with unexpected_message): one
  // stray error must not take every group down with the driver.
  self->set_error_handler([=](caf::error& err) {
    log_warning("driver", "ignored an error message: " + render(err));
  });
  auto sender = [self] {
    return caf::actor_cast<caf::actor>(self->current_sender());
  };
  return {
    // -- formation (driver_formation) --
    [=](reg_atom, membership& m, std::string& node) {
      if (auto member = sender()) on_register(self, member, m, node);
    },
    [=](ready_atom, const std::string& name, uint64_t gen, int32_t rank,
        caf::error& err, std::string& backend) {
      on_ready(self, sender(), name, gen, rank, err, backend);
    },
    [=](form_tmo_atom, const std::string& name, uint64_t gen) {
      on_formation_deadline(self, name, gen);
    },
    [=](declare_atom, const std::string& name,
        const std::vector<caf::actor>& members, const std::string& backend,
        int64_t timeout_ms) -> caf::result<caf::ok_atom> {
      return declare_group(self, name, members, backend, timeout_ms);
    },
    [=](wait_atom, const std::string& name) -> caf::result<caf::ok_atom> {
      return wait_for_group(self, name);
    },
    // -- ops (driver_dispatch) --
    [=](op_request& req) -> caf::result<op_result> {
      return submit_op(self, req);
    },
    [=](answer_atom, const std::string& name, uint64_t gen, uint64_t seq) {
      if (auto g = find_group(self, name, gen)) answer(self, *g, seq);
    },
    // -- failures and the end of groups (driver_failure) --
    [=](op_tmo_atom, const std::string& name, uint64_t gen) {
      on_op_deadline(self, name, gen);
    },
    [=](destroy_atom, const std::string& name) -> caf::result<caf::ok_atom> {
      if (auto err = destroy_group(self, name)) return err;
      return caf::ok_atom::value;
    },
    [=](status_atom, const std::string& name) {
      return status_of(self->state, name);
    },
    // -- refs (driver_release) --
    [=](release_atom, const object_ref& ref) -> caf::result<caf::ok_atom> {
      return release_ref(self, ref);
    },
    [=](hand_atom, const object_ref& ref, const caf::actor_addr& to)
      -> caf::result<caf::ok_atom> { return hand_over_ref(self, ref, to); },
  };
}

} // namespace

driver_actor spawn_driver(caf::actor_system& sys, driver_config cfg) {
  bool owns_store = !cfg.store;
  if (owns_store) cfg.store = spawn_store_actor(sys);
  return sys.spawn(driver_impl, std::move(cfg), owns_store);
}

} // namespace caf_collective
