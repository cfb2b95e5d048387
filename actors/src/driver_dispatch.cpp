// The dispatch path (driver_dispatch.hpp): queue, ref checks, start
// messages to the members, collecting their reports, answering the client.
#include "driver_dispatch.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"

#include "driver_failure.hpp"
#include "driver_release.hpp"
#include "driver_validation.hpp"
#include "op_plan.hpp"

namespace caf_collective::detail {

namespace {

// A rank's report on its start: its output ref or its error. The last
// report answers the client at once. A report that comes after its op was
// answered (failed, timed out, its group broken or destroyed) carries an
// output nobody will receive: it is dropped (`has_output`: the op is not in
// place, so `out` is new).
void report(driver_ptr self, const std::string& name, uint64_t gen,
            uint64_t seq, size_t rank, bool has_output, object_ref* out,
            caf::error* err) {
  auto late = [&] {
    if (out && has_output)
      discard_output(self->state,
                     caf::actor_cast<caf::actor>(self->current_sender()), *out);
  };
  auto g = find_group(self, name, gen);
  if (!g) return late();
  auto j = g->running.find(seq);
  if (j == g->running.end() || j->second.replied[rank]) return late();
  auto& op = j->second;
  op.replied[rank] = true;
  if (out)
    op.outs[rank] = std::move(*out);
  else
    op.errors[rank] = std::move(*err);
  if (self->state.timing.on()) {
    auto now = driver_timing::clock::now();
    if (op.stamps.first_report == driver_timing::clock::time_point{})
      op.stamps.first_report = now;
    op.stamps.last_report = now;
  }
  if (--op.outstanding == 0) answer(self, *g, seq);
}

void start_op(driver_ptr self, group_entry& g, pending_op op) {
  auto seq = g.next_seq++;
  auto W = static_cast<size_t>(g.world_size);
  op.replied.assign(W, false);
  // Ranks outside a send/recv pair get no start: their lanes number
  // point-to-point ops separately and stay in step without it.
  for (size_t r = 0; r < W; ++r)
    if (!op.takes_part[r]) op.replied[r] = true;
  op.outstanding = static_cast<size_t>(
    std::count(op.takes_part.begin(), op.takes_part.end(), true));
  op.errors.resize(W);
  op.outs.resize(W);
  auto timeout = milliseconds{
    op.req.params.timeout_ms > 0 ? op.req.params.timeout_ms : g.timeout_ms};
  op.deadline = self->clock().now() + timeout + self->state.grace;
  const auto& name = g.name;
  auto gen = g.gen;
  bool has_output = !in_place(op.req.op);
  // The client owns the outputs (released when it terminates).
  auto owner = op.req.owner ? op.req.owner
                            : caf::actor_cast<caf::actor_addr>(op.rp.source());
  for (size_t r = 0; r < W; ++r) {
    if (!op.takes_part[r]) continue;
    auto& s = op.starts[r];
    s.seq = seq;
    // Only out-of-place ops have outputs (driver_validation.cpp).
    if (s.has_out) s.owner = owner;
    if (s.params.timeout_ms <= 0) s.params.timeout_ms = g.timeout_ms;
    // No timeout on the request itself (each would be one more timer): the
    // group's deadline timer names the unfinished ranks, and a dead member
    // is reported by its down message.
    self->request(g.members[r], caf::infinite, start_atom::value, std::move(s))
      .then(
        [self, name, gen, seq, r, has_output](object_ref& out) {
          report(self, name, gen, seq, r, has_output, &out, nullptr);
        },
        [self, name, gen, seq, r, has_output](caf::error& err) {
          report(self, name, gen, seq, r, has_output, nullptr, &err);
        });
  }
  op.starts.clear(); // moved into the start messages
  op.stamps.started = self->state.timing.now();
  arm_deadline(self, g, op.deadline);
  g.running.emplace(seq, std::move(op));
}

// Whether rank `r`'s object is checked (and held) by its member rather
// than pinned here: it lives on the member's node, not the driver's.
bool checked_by_member(const driver_state& st, const group_entry& g,
                       const pending_op& op, size_t r) {
  const auto& ref = op.req.refs[r];
  return ref.valid() && op.takes_part[r] && ref.node == g.nodes[r] &&
         ref.node != st.node;
}

// The head op's checks are complete: start it, or refuse it naming the
// ranks whose objects are missing (`failures`: by rank, errors only).
void checked(driver_ptr self, group_entry& g,
             const std::map<size_t, caf::error>& failures) {
  auto head = std::move(g.queue.front());
  g.queue.pop_front();
  g.checking = false;
  rank_failures bad;
  for (auto& [r, e] : failures)
    bad.add(r, e);
  if (bad.empty()) {
    start_op(self, g, std::move(head));
  } else {
    // The members asked hold their objects for a start that will not come
    // (the pins taken here go with `head`). Every one of them: a check that
    // timed out here may still have been answered, and held, later.
    for (size_t r = 0; r < head.req.refs.size(); ++r)
      if (checked_by_member(self->state, g, head, r))
        self->send(g.members[r], unhold_atom::value, g.name, g.gen, g.next_seq);
    // A member that did not answer its check in time is busy, not lost.
    auto code = is_collective_error(bad.first)           ? code_of(bad.first)
                : bad.first == caf::sec::request_timeout ? errc::timeout
                                                         : errc::peer_lost;
    head.rp.deliver(group_error(code, g, head.req.op, -1, -1,
                                "refused before any data moved: ranks " +
                                  list_ranks(bad.ranks) + bad.details));
  }
}

} // namespace

void arm_deadline(driver_ptr self, group_entry& g,
                  caf::actor_clock::time_point deadline) {
  if (g.deadline_armed && g.armed_for <= deadline) return;
  g.deadline_armed = true;
  g.armed_for = deadline;
  self->delayed_send(self, deadline - self->clock().now(), op_tmo_atom::value,
                     g.name, g.gen);
}

caf::result<op_result> submit_op(driver_ptr self, op_request& req) {
  auto i = self->state.groups.find(req.group);
  if (i == self->state.groups.end())
    return make_error(errc::unknown_group,
                      "no group '" + req.group + "' at the driver");
  auto& g = i->second;
  if (g.state == group_state::broken || g.state == group_state::failed)
    return g.reason;
  if (g.ops_from != op_source::driver)
    return group_error(errc::unsupported, g, req.op, -1, -1,
                       "the group takes its ops from its members "
                       "(ops_from = members); the driver refuses op "
                       "requests on it");
  pending_op op;
  op.stamps.arrived = self->state.timing.now();
  op.id = self->state.next_op_id++;
  op.req = std::move(req);
  if (auto err = validate(g, op)) return err;
  op.rp = self->make_response_promise();
  g.queue.push_back(std::move(op));
  pump(self, g);
  return caf::delegated<op_result>{};
}

// Makes sure every object the head op names exists (and matches its
// fingerprint) before any rank starts moving data: refs on this node are
// looked up in its store, the others by asking their member.
void pump(driver_ptr self, group_entry& g) {
  std::vector<size_t> remote;
  std::map<size_t, caf::error> failures; // by rank; no allocation if empty
  // Ops whose refs are all on this node start (or are refused) at once.
  while (remote.empty()) {
    if (g.state != group_state::ready || g.checking || g.queue.empty()) return;
    auto& op = g.queue.front();
    failures.clear();
    for (size_t r = 0; r < op.req.refs.size(); ++r) {
      const auto& ref = op.req.refs[r];
      // Ranks outside a send/recv pair do not touch their refs.
      if (!ref.valid() || !op.takes_part[r]) continue;
      // Checked at submission unless the rank had not registered yet: a ref
      // of the driver's node for a member elsewhere would pin here and
      // fail only at the member, once its peers had started.
      if (ref.node != g.nodes[r]) {
        failures.emplace(r,
                         make_error(errc::unknown_object,
                                    "its ref lives on node '" + ref.node +
                                      "', its member on '" + g.nodes[r] + "'"));
        continue;
      }
      if (ref.node != self->state.node) {
        remote.push_back(r);
        continue;
      }
      // Pinned until the start: a release meanwhile must not take the
      // object from a member whose peers already began.
      if (auto pin = self->state.local->pin(ref); !pin)
        failures.emplace(r, std::move(pin.error()));
      else
        op.starts[r].checked_in = std::move(*pin);
    }
    g.checking = true;
    if (remote.empty()) checked(self, g, failures);
  }
  // The members holding the other refs check them and hold them for the
  // op's start (as the seq it will get); the last answer decides.
  struct remote_checks {
    std::map<size_t, caf::error> failures;
    size_t waiting = 0;
  };
  auto checks = std::make_shared<remote_checks>();
  checks->failures = std::move(failures);
  checks->waiting = remote.size();
  auto& op = g.queue.front();
  auto id = op.id;
  auto name = g.name;
  auto gen = g.gen;
  auto on_reply = [self, id, name, gen, checks](size_t rank, caf::error err) {
    auto g = find_group(self, name, gen);
    if (!g || g->queue.empty() || g->queue.front().id != id) return;
    if (err) checks->failures[rank] = std::move(err);
    if (--checks->waiting > 0) return;
    checked(self, *g, checks->failures);
    pump(self, *g);
  };
  for (auto r : remote) {
    self
      ->request(g.members[r], milliseconds{g.timeout_ms}, check_atom::value,
                g.name, g.gen, g.next_seq, op.req.refs[r])
      .then([=](caf::ok_atom) { on_reply(r, caf::error{}); },
            [=](caf::error& err) { on_reply(r, std::move(err)); });
  }
}

void answer(driver_ptr self, group_entry& g, uint64_t seq) {
  auto i = g.running.find(seq);
  if (i == g.running.end()) return;
  auto op = std::move(i->second);
  g.running.erase(i);
  rank_failures failed;
  for (size_t r = 0; r < op.errors.size(); ++r)
    failed.add(r, op.errors[r]);
  if (!failed.empty() && !op.answer_deferred &&
      std::any_of(op.errors.begin(), op.errors.end(), [](const auto& e) {
        return e && is_collective_error(e) && code_of(e) == errc::peer_lost;
      })) {
    // Survivors notice a dead peer's closed connections before the
    // driver's monitor does: wait for the down message, which names it.
    op.answer_deferred = true;
    g.running.emplace(seq, std::move(op));
    self->delayed_send(self, self->state.grace, answer_atom::value, g.name,
                       g.gen, seq);
    return;
  }
  if (self->state.timing.on()) self->state.timing.answered(op.stamps);
  if (failed.empty()) {
    op_result res{g.name, seq, {}};
    if (in_place(op.req.op))
      res.refs = std::move(op.req.refs);
    else if (op.req.op != op_kind::barrier)
      res.refs = std::move(op.outs);
    op.rp.deliver(std::move(res));
    return;
  }
  auto code = is_collective_error(failed.first) ? code_of(failed.first)
                                                : errc::backend_error;
  auto err =
    group_error(code, g, op.req.op, static_cast<int64_t>(seq), -1,
                "failed on ranks " + list_ranks(failed.ranks) + failed.details);
  op.rp.deliver(err);
  discard_outputs(self->state, g, op);
  // The ranks may have diverged mid-op: nothing later can run safely.
  if (g.state == group_state::ready)
    break_group(self, g, err, false, broken_by(g, err));
}

} // namespace caf_collective::detail
