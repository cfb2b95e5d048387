// The formation path (driver_formation.hpp): registrations, declarations
// and their joins, init, ready reports and the formation deadline.
#include "driver_formation.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/log.hpp"

#include "driver_dispatch.hpp"
#include "driver_failure.hpp"
#include "driver_validation.hpp"

namespace caf_collective::detail {

namespace {

// Creates the entry of a group whose shape is now known, from its first
// registration or its declaration, and starts its formation deadline.
group_entry& open_group(driver_ptr self, const std::string& name,
                        int32_t world_size, const std::string& backend,
                        int64_t timeout_ms,
                        op_source ops_from = op_source::driver) {
  auto& g = self->state.groups[name];
  g.name = name;
  g.gen = self->state.next_gen++;
  g.world_size = world_size;
  g.backend = backend;
  g.timeout_ms = timeout_ms;
  g.ops_from = ops_from;
  g.members.resize(world_size);
  g.nodes.resize(world_size);
  g.ready.assign(world_size, false);
  g.backends.assign(world_size, std::string{});
  self->delayed_send(self, milliseconds{timeout_ms} + self->state.grace,
                     form_tmo_atom::value, name, g.gen);
  return g;
}

void formation_complete(driver_ptr self, group_entry& g) {
  g.state = group_state::ready;
  for (auto& rp : g.waiters)
    rp.deliver(caf::ok_atom::value);
  g.waiters.clear();
  pump(self, g);
}

// A declared actor did not take its join: the group cannot form.
void join_failed(driver_ptr self, const std::string& name, uint64_t gen,
                 int32_t rank, const caf::error& err) {
  auto g = find_group(self, name, gen);
  if (!g || g->state != group_state::forming) return;
  std::string why;
  if (err == caf::sec::unexpected_message)
    why = "is no member: it does not speak the member protocol (" +
          render(err) + ")";
  else if (err == caf::sec::request_receiver_down)
    why = "is dead (" + render(err) + ")";
  else
    why = "did not join: " + render(err);
  break_group(
    self, *g,
    group_error(errc::invalid_argument, *g,
                "the actor at position " + std::to_string(rank) + " " + why,
                rank),
    true);
}

// Asks the actor at `rank` of a declaration to join as a request: a member
// answers once it sent its registration; an actor that is no member or is
// dead answers with an error, which fails the formation at once. (Sent
// plainly, that error came back as a plain message and stopped the
// driver.)
void send_join(driver_ptr self, const group_entry& g, int32_t rank,
               const caf::actor& who) {
  auto name = g.name;
  auto gen = g.gen;
  // Longer than the formation deadline, which names every missing rank.
  auto deadline = milliseconds{g.timeout_ms} + 2 * self->state.grace;
  self
    ->request(
      who, deadline, join_atom::value,
      membership{g.name, rank, g.world_size, g.backend, g.timeout_ms, 0})
    .then([] {},
          [=](caf::error& err) { join_failed(self, name, gen, rank, err); });
}

} // namespace

void on_register(driver_ptr self, const caf::actor& member, membership& m,
                 std::string& node) {
  auto reject = [&](caf::error err) {
    self->send(member, abort_atom::value, m.group, uint64_t{0}, err);
  };
  // A refused registration leaves no entry behind: only groups whose shape
  // is known exist at the driver.
  if (auto problem = membership_problem(m); !problem.empty()) {
    reject(name_error(errc::invalid_argument, m.group,
                      "registration refused: " + problem));
    return;
  }
  auto i = self->state.groups.find(m.group);
  auto& g = i != self->state.groups.end()
              ? i->second
              : open_group(self, m.group, m.world_size, m.backend, m.timeout_ms,
                           m.ops_from);
  if (g.state != group_state::forming) {
    reject(make_error(errc::duplicate_group,
                      "group '" + m.group + "' exists and is " +
                        to_cstr(g.state) + "; destroy it first"));
    return;
  }
  // Every rank has been sent init already: this member's join aborted its
  // formation, which therefore fails. Failing it now names the cause (the
  // formation deadline would name an unready rank); a second init to every
  // rank would start a second formation under the same keys.
  bool init_sent = std::all_of(g.members.begin(), g.members.end(),
                               [](const caf::actor& x) { return bool{x}; });
  if (init_sent && g.members[m.rank] == member) {
    break_group(self, g,
                group_error(errc::duplicate_group, g,
                            "rank " + std::to_string(m.rank) +
                              " registered again (a repeated join) after the "
                              "group began to form; destroy it and declare it "
                              "again"),
                true);
    return;
  }
  auto held = std::find(g.members.begin(), g.members.end(), member);
  if (m.world_size != g.world_size || m.backend != g.backend ||
      m.ops_from != g.ops_from ||
      (g.members[m.rank] && g.members[m.rank] != member) ||
      (held != g.members.end() && held - g.members.begin() != m.rank)) {
    reject(group_error(
      errc::mismatch, g,
      "registration of rank " + std::to_string(m.rank) + " (world size " +
        std::to_string(m.world_size) + ", backend " + m.backend +
        ", ops from " + to_cstr(m.ops_from) +
        ") conflicts with the group (world size " +
        std::to_string(g.world_size) + ", backend " + g.backend +
        ", ops from " + to_cstr(g.ops_from) + ") or a rank taken already"));
    return;
  }
  g.members[m.rank] = member;
  g.nodes[m.rank] = std::move(node);
  self->send(member, grace_atom::value,
             static_cast<int64_t>(self->state.grace.count()));
  if (self->state.monitored.emplace(member.address(), g.nodes[m.rank]).second)
    self->monitor(member);
  for (auto& x : g.members)
    if (!x) return;
  // The generation first: it is unique, so "<gen>/" covers this formation's
  // keys and no other group's, whatever '/' the names hold (destroy_group
  // makes the store forget them by that prefix).
  auto prefix = formation_prefix(g);
  for (auto& x : g.members)
    self->send(x, init_atom::value, g.name, g.gen, self->state.store, prefix,
               g.timeout_ms);
}

void on_ready(driver_ptr self, const caf::actor& sender,
              const std::string& name, uint64_t gen, int32_t rank,
              caf::error& err, std::string& backend) {
  auto gp = find_group(self, name, gen);
  if (!gp || gp->state != group_state::forming) return;
  auto& g = *gp;
  // Only the member holding `rank` speaks for it.
  if (rank < 0 || rank >= g.world_size || g.members[rank] != sender) return;
  if (err) {
    auto code = is_collective_error(err) ? code_of(err) : errc::backend_error;
    break_group(self, g,
                group_error(code, g,
                            "rank " + std::to_string(rank) +
                              " could not form the group: " + render(err),
                            rank),
                true);
    return;
  }
  g.ready[rank] = true;
  g.backends[rank] = std::move(backend);
  if (auto mismatch = backend_mismatch(g)) {
    log_warning("driver", render(mismatch));
    break_group(self, g, std::move(mismatch), true);
    return;
  }
  for (bool x : g.ready)
    if (!x) return;
  g.backend_in_use = g.backends[0];
  formation_complete(self, g);
}

void on_formation_deadline(driver_ptr self, const std::string& name,
                           uint64_t gen) {
  auto gp = find_group(self, name, gen);
  if (!gp) return;
  auto& g = *gp;
  if (g.state != group_state::forming) return;
  std::vector<int> absent, unready;
  for (int r = 0; r < g.world_size; ++r) {
    if (!g.members[r])
      absent.push_back(r);
    else if (!g.ready[r])
      unready.push_back(r);
  }
  std::string detail =
    "group not formed within " + std::to_string(g.timeout_ms) + " ms:";
  // Init goes out only once every rank registered: while one is absent,
  // the registered ranks were never asked to form and are not to blame.
  if (!absent.empty()) {
    detail += " ranks " + list_ranks(absent) + " never registered";
    if (!unready.empty())
      detail += " (ranks " + list_ranks(unready) +
                " registered and waited for them)";
  } else if (!unready.empty())
    detail += " ranks " + list_ranks(unready) + " did not report ready";
  break_group(self, g, group_error(errc::timeout, g, detail), true);
}

caf::result<caf::ok_atom> declare_group(driver_ptr self,
                                        const std::string& name,
                                        const std::vector<caf::actor>& members,
                                        const std::string& backend,
                                        int64_t timeout_ms) {
  if (auto err = check_declaration(self->state.groups.count(name) > 0, name,
                                   members, backend, timeout_ms))
    return err;
  auto ws = static_cast<int32_t>(members.size());
  auto& g = open_group(self, name, ws, backend, timeout_ms);
  g.waiters.push_back(self->make_response_promise());
  for (int32_t r = 0; r < ws; ++r)
    send_join(self, g, r, members[r]);
  return caf::delegated<caf::ok_atom>{};
}

caf::result<caf::ok_atom> wait_for_group(driver_ptr self,
                                         const std::string& name) {
  // A group exists from its first registration or its declaration on;
  // before that the driver cannot tell a group about to register from
  // a misspelt name, so it says so at once. Members register only once
  // they run: await_group asks again until its own timeout.
  auto i = self->state.groups.find(name);
  if (i == self->state.groups.end())
    return name_error(errc::unknown_group, name,
                      "no member has registered and no declaration is "
                      "under way");
  auto& g = i->second;
  if (g.state == group_state::ready) return caf::ok_atom::value;
  if (g.state != group_state::forming) return g.reason;
  g.waiters.push_back(self->make_response_promise());
  return caf::delegated<caf::ok_atom>{};
}

} // namespace caf_collective::detail
