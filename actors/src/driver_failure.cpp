// The failure path (driver_failure.hpp): breaking a group, answering its
// pending ops with the reason, member deaths, op deadlines and the history
// log that traces a hang to the rank that fell behind.
#include "driver_failure.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/log.hpp"

#include "driver_dispatch.hpp"
#include "driver_release.hpp"

namespace caf_collective::detail {

namespace {

// Asks every rank what it was doing when op `seq` missed its deadline and
// logs each answer, so that a hang can be traced to the rank that fell
// behind (the client has its error already).
void log_histories(driver_ptr self, const group_entry& g, uint64_t seq,
                   const std::string& what) {
  for (size_t r = 0; r < g.members.size(); ++r) {
    if (!g.members[r]) continue;
    // Members number ops per group (send/recv apart from collectives), so
    // their seq may differ from the driver's.
    auto head = "group '" + g.name + "' (on " + g.backend_in_use + ") op seq " +
                std::to_string(seq) +
                " (driver numbering) missed its deadline (" + what +
                "); rank " + std::to_string(r) +
                " recent operations, oldest first (member numbering):\n";
    self
      ->request(g.members[r], std::chrono::seconds{2}, history_atom::value,
                g.name)
      .then([head](std::string& text) { log_warning("driver", head + text); },
            [head](caf::error& err) {
              log_warning("driver", head + "(no answer: " + render(err) + ")");
            });
  }
}

// The ranks of `g` that `dm` takes away: the dead member's own, and when
// its node became unreachable, every member on that node. CAF delivers
// their down messages one by one; the first one must name them all. Never
// for the driver's own node, which is not lost while the driver runs: an
// actor there may have quit with that reason itself (a link to a lost
// node), and its neighbours live on.
std::vector<int> lost_ranks(const group_entry& g, const caf::down_msg& dm,
                            const caf::node_id& own_node) {
  bool node_lost = dm.reason == caf::exit_reason::remote_link_unreachable &&
                   dm.source.node() != own_node;
  std::vector<int> result;
  for (size_t r = 0; r < g.members.size(); ++r) {
    const auto& m = g.members[r];
    if (m && (m.address() == dm.source ||
              (node_lost && m.node() == dm.source.node())))
      result.push_back(static_cast<int>(r));
  }
  return result;
}

} // namespace

op_error_fn broken_by(const group_entry& g, const caf::error& cause) {
  return [&g, why = render(cause)](const pending_op& op, int64_t seq) {
    return group_error(errc::aborted, g, op.req.op, seq, -1,
                       "the group broke before this op finished: " + why);
  };
}

void fail_all(const driver_state& st, group_entry& g, const caf::error& err,
              const op_error_fn& for_op) {
  auto error_of = [&](const pending_op& op, int64_t seq) {
    return for_op ? for_op(op, seq) : err;
  };
  for (auto& rp : g.waiters)
    rp.deliver(err);
  g.waiters.clear();
  for (auto& op : g.queue)
    op.rp.deliver(error_of(op, -1));
  g.queue.clear();
  g.checking = false;
  for (auto& [seq, op] : g.running) {
    op.rp.deliver(error_of(op, static_cast<int64_t>(seq)));
    discard_outputs(st, g, op);
  }
  g.running.clear();
}

void fail_all_at_exit(driver_state& st, const caf::error& reason) {
  auto why = "the driver exited (" +
             (reason ? render(reason) : std::string{"normally"}) + ") ";
  for (auto& [name, g] : st.groups) {
    // Without its driver a group that takes its ops from it, or that is
    // still forming, can never run another op: its members break it now,
    // which also ends an op some ranks were started on. Groups whose
    // members start their own ops keep running.
    bool orphaned =
      g.state == group_state::forming ||
      (g.state == group_state::ready && g.ops_from == op_source::driver);
    if (orphaned) {
      auto err = group_error(errc::aborted, g,
                             why + "- the group cannot take another op");
      // Generation 0: whatever generation the member holds, registered
      // only (no init yet) included; no later one can come from here.
      for (auto& m : g.members)
        if (m) caf::anon_send(m, abort_atom::value, g.name, uint64_t{0}, err);
    }
    auto op_error = [&](const pending_op& op, int64_t seq) {
      return group_error(errc::aborted, g, op.req.op, seq, -1,
                         why + (seq < 0 ? "before this op started"
                                        : "before this op was answered: "
                                          "its members may have run it, but "
                                          "its result is lost"));
    };
    fail_all(st, g,
             group_error(errc::aborted, g, why + "before the group formed"),
             op_error);
  }
}

// The group cannot run ops any more: members abort their lanes, every
// pending and future op fails with `reason` (pending ones possibly with
// what `for_op` makes of it).
void break_group(driver_ptr self, group_entry& g, caf::error reason,
                 bool forming, const op_error_fn& for_op) {
  g.state = forming ? group_state::failed : group_state::broken;
  g.reason = reason;
  for (auto& m : g.members)
    if (m) self->send(m, abort_atom::value, g.name, g.gen, reason);
  fail_all(self->state, g, reason, for_op);
}

caf::error destroy_group(driver_ptr self, const std::string& name) {
  auto i = self->state.groups.find(name);
  if (i == self->state.groups.end())
    return name_error(errc::unknown_group, name,
                      "cannot destroy a group the driver does not know");
  auto& g = i->second;
  for (auto& m : g.members)
    if (m) self->send(m, leave_atom::value, name);
  fail_all(self->state, g, group_error(errc::aborted, g, "group destroyed"));
  // Its formation keys go too: a program that declares and destroys groups
  // for a long time would otherwise grow the store by every formation's.
  // Members of a later declaration form under a new generation's prefix.
  // Anonymous: its ok would reach the driver as a message it has no
  // handler for.
  caf::anon_send(self->state.store, forget_atom::value,
                 formation_prefix(g) + "/");
  self->state.groups.erase(i);
  return {};
}

void on_member_down(driver_ptr self, const caf::down_msg& dm) {
  self->state.monitored.erase(dm.source);
  for (auto& [name, g] : self->state.groups) {
    auto lost = lost_ranks(g, dm, self->node());
    for (auto r : lost)
      g.members[r] = nullptr;
    if (lost.empty() ||
        (g.state != group_state::forming && g.state != group_state::ready))
      continue;
    bool forming = g.state == group_state::forming;
    auto one = lost.size() == 1;
    auto rank = one ? lost[0] : -1;
    // A lost node is named (CAF's id holds its host and pid): which
    // process went is what the user looks for first.
    bool node_lost = dm.reason == caf::exit_reason::remote_link_unreachable &&
                     dm.source.node() != self->node();
    auto what =
      (one ? "rank " + std::to_string(rank) : "ranks " + list_ranks(lost)) +
      " died (" + render(dm.reason) +
      (node_lost ? ": node " + g.nodes[lost[0]] + " is unreachable" : "") +
      ")" + (forming ? " before the group was formed" : "");
    // A death concerns every pending op alike: each answer names its own
    // op and seq, the group's reason none.
    auto for_op = [&](const pending_op& op, int64_t seq) {
      return group_error(errc::peer_lost, g, op.req.op, seq, rank, what);
    };
    break_group(self, g, group_error(errc::peer_lost, g, what, rank), forming,
                for_op);
  }
}

void on_op_deadline(driver_ptr self, const std::string& name, uint64_t gen) {
  auto gp = find_group(self, name, gen);
  if (!gp) return;
  auto& g = *gp;
  auto now = self->clock().now();
  // Timers fire in order: this one is the armed one, or an earlier-armed
  // one that a closer deadline had overtaken.
  if (g.deadline_armed && g.armed_for <= now) g.deadline_armed = false;
  if (g.running.empty()) return;
  auto j = std::min_element(g.running.begin(), g.running.end(),
                            [](const auto& x, const auto& y) {
                              return x.second.deadline < y.second.deadline;
                            });
  if (j->second.deadline > now) {
    // The op this timer was armed for finished; the next one is due later.
    arm_deadline(self, g, j->second.deadline);
    return;
  }
  auto seq = j->first;
  std::vector<int> unfinished;
  rank_failures failed; // ranks that replied with an error
  for (size_t r = 0; r < j->second.replied.size(); ++r) {
    if (!j->second.replied[r])
      unfinished.push_back(static_cast<int>(r));
    else
      failed.add(r, j->second.errors[r]);
  }
  auto err = group_error(errc::timeout, g, j->second.req.op,
                         static_cast<int64_t>(seq), -1,
                         "deadline passed; ranks " + list_ranks(unfinished) +
                           " had not finished" + failed.details);
  j->second.rp.deliver(err);
  discard_outputs(self->state, g, j->second);
  g.running.erase(j);
  log_histories(self, g, seq, render(err));
  break_group(self, g, err, false, broken_by(g, err));
}

} // namespace caf_collective::detail
