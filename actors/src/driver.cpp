// The driver: gang formation, validation, sequencing and failure handling
// of driver-orchestrated collectives (architecture.md, 5-6).
#include "caf_collective/driver.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/log.hpp"
#include "caf_collective/rendezvous_actor.hpp"

#include "layouts.hpp"

namespace caf_collective {

namespace {

using form_tmo_atom = caf::atom_constant<caf::atom("col_ftmo")>;
using op_tmo_atom = caf::atom_constant<caf::atom("col_otmo")>;
/// Answers an op whose ranks reported a lost connection, after the grace
/// period in which the driver's own down message can name the dead rank.
using answer_atom = caf::atom_constant<caf::atom("col_answer")>;

std::string describe(const object_ref& ref) {
  std::string result{to_string(ref.type)};
  result += '[';
  for (size_t i = 0; i < ref.shape.size(); ++i) {
    if (i > 0) result += ',';
    result += std::to_string(ref.shape[i]);
  }
  return result + "]";
}

struct pending_op {
  uint64_t id = 0;
  uint64_t seq = 0;
  op_request req;
  caf::response_promise rp;
  std::vector<start_msg> starts; // per rank, computed by validation
  std::vector<bool> takes_part;  // send/recv: only the pair
  size_t outstanding = 0;
  std::vector<bool> replied;
  std::vector<caf::error> errors;
  std::vector<object_ref> outs;
  bool answer_deferred = false;
};

enum class group_state { forming, ready, broken, failed };

const char* to_cstr(group_state x) {
  switch (x) {
    case group_state::forming: return "forming";
    case group_state::ready: return "ready";
    case group_state::broken: return "broken";
    default: return "failed";
  }
}

struct group_entry {
  std::string name;
  uint64_t gen = 0;
  int32_t world_size = 0;     // 0 until the first member registers
  std::string backend;        // asked for: "gloo", "shm", "nccl" or "auto"
  std::string backend_in_use; // what every rank got; empty until formed
  std::vector<std::string> backends; // per rank, from its ready message
  int64_t timeout_ms = 0;
  op_source ops_from = op_source::driver;
  std::vector<caf::actor> members;
  std::vector<std::string> nodes;
  std::vector<bool> ready;
  group_state state = group_state::forming;
  bool inited = false;
  caf::error reason;
  uint64_t next_seq = 0;
  std::vector<caf::response_promise> waiters;
  std::deque<pending_op> queue;           // validated, not yet started
  bool checking = false;                  // the queue's head is being checked
  std::map<uint64_t, pending_op> running; // by seq
};

struct driver_state {
  store_actor store;
  // This node's object store and name: refs of members on this node are
  // checked here directly instead of by a message round trip.
  object_store_ptr local;
  std::string node;
  milliseconds grace{200};
  uint64_t next_gen = 1;
  uint64_t next_op_id = 1;
  std::map<std::string, group_entry> groups;
  std::set<caf::actor_addr> monitored;
  static inline const char* name = "caf_collective.driver";
};

using driver_ptr = caf::stateful_actor<driver_state>*;

caf::error group_error(errc code, const group_entry& g, op_kind op, int64_t seq,
                       int rank, std::string detail) {
  return make_error(code, error_context{g.name, op, seq, rank, g.world_size},
                    std::move(detail));
}

// An error about the group as a whole, or about one rank of it.
caf::error group_error(errc code, const group_entry& g, std::string detail,
                       int rank = -1) {
  error_context where;
  where.group = g.name;
  where.rank = rank;
  where.world_size = g.world_size;
  return make_error(code, where, std::move(detail));
}

// An error about a group the driver has no entry for (yet).
caf::error name_error(errc code, const std::string& name, std::string detail) {
  error_context where;
  where.group = name;
  return make_error(code, where, std::move(detail));
}

group_entry* find_group(driver_ptr self, const std::string& name,
                        uint64_t gen) {
  auto i = self->state.groups.find(name);
  if (i == self->state.groups.end() || i->second.gen != gen) return nullptr;
  return &i->second;
}

// Deadlines arrive as int64 milliseconds from clients and members and are
// bounded before use: the driver adds its grace to them, CAF and Gloo add
// them to the clock, and INT64_MAX overflowed there into a deadline in the
// past. Returns what is wrong with `ms`, or nothing.
std::string timeout_problem(int64_t ms, bool zero_means_default) {
  if (ms < 0 || (ms == 0 && !zero_means_default))
    return "timeout_ms " + std::to_string(ms) + " is not " +
           (zero_means_default ? "0 (the default) or positive" : "positive");
  if (ms > max_timeout_ms)
    return "timeout_ms " + std::to_string(ms) + " exceeds the maximum of " +
           std::to_string(max_timeout_ms) + " (24 h)";
  return {};
}

// What is wrong with a backend name a group asks for, or nothing. Whether
// nccl is built in is for the members to say when they form the group.
std::string backend_problem(const std::string& name) {
  if (is_backend_name(name)) return {};
  return "unknown backend '" + name + "' (expected gloo, shm, nccl or auto)";
}

// Requests cross the network, so their enums may hold any value: those the
// driver or a member would compute with are checked before anything else.
// The reduce op is checked even where an op ignores it, since it is passed
// on to every member all the same.
caf::error check_fields(const group_entry& g, const op_request& req) {
  auto bad = [&](std::string detail) {
    return group_error(errc::invalid_argument, g, req.op, -1, -1,
                       std::move(detail));
  };
  const auto& p = req.params;
  if (!is_valid(p.op))
    return bad("reduce op " + std::to_string(static_cast<int>(p.op)) +
               " is not one of sum, product, min, max, avg, band, bor, bxor");
  if (req.op == op_kind::allreduce &&
      p.algorithm > allreduce_algorithm::ring_options_api)
    return bad("allreduce algorithm " +
               std::to_string(static_cast<int>(p.algorithm)) +
               " is not one of the allreduce_algorithm enum");
  if (auto problem = timeout_problem(p.timeout_ms, true); !problem.empty())
    return bad(std::move(problem));
  std::vector<int> odd;
  for (size_t r = 0; r < req.refs.size(); ++r)
    if (req.refs[r].valid() && !is_valid(req.refs[r].type))
      odd.push_back(static_cast<int>(r));
  if (!odd.empty())
    return bad("the refs of ranks " + list_ranks(odd) +
               " have a dtype outside the enum (rank " +
               std::to_string(odd[0]) + ": dtype " +
               std::to_string(static_cast<int>(req.refs[odd[0]].type)) + ")");
  return {};
}

// Checks a request against every rank's ref fingerprint and computes what
// each rank runs. Nothing has been sent to any member yet, and no sequence
// number is taken: a refused request leaves the group as it was.
caf::error validate(const group_entry& g, pending_op& op) {
  auto& req = op.req;
  auto ws = g.world_size;
  auto W = static_cast<size_t>(ws);
  // Before anything names the op: an unknown kind has no name.
  if (!is_valid(req.op))
    return group_error(errc::invalid_argument, g,
                       "op kind " + std::to_string(static_cast<int>(req.op)) +
                         " is not one of the collective or point-to-point "
                         "ops");
  if (auto err = check_fields(g, req)) return err;
  auto bad = [&](errc code, std::string detail) {
    return group_error(code, g, req.op, -1, -1, std::move(detail));
  };
  if (req.op == op_kind::barrier && req.refs.empty()) req.refs.resize(W);
  if (req.refs.size() != W)
    return bad(errc::invalid_argument,
               "request names " + std::to_string(req.refs.size()) +
                 " refs for a group of " + std::to_string(ws));
  const auto& p = req.params;
  bool rooted = req.op == op_kind::broadcast || req.op == op_kind::reduce ||
                req.op == op_kind::gather || req.op == op_kind::scatter ||
                req.op == op_kind::send || req.op == op_kind::recv;
  if (rooted && (p.root < 0 || p.root >= ws))
    return bad(errc::invalid_argument, "root " + std::to_string(p.root) +
                                         " is out of range [0, " +
                                         std::to_string(ws) + ")");
  bool p2p = req.op == op_kind::send || req.op == op_kind::recv;
  if (p2p) {
    if (p.peer < 0 || p.peer >= ws || p.peer == p.root)
      return bad(errc::invalid_argument,
                 "peer " + std::to_string(p.peer) +
                   " is out of range or equals the source");
  }
  // Which ranks must name an input.
  std::vector<bool> needs(W, true);
  if (req.op == op_kind::barrier) needs.assign(W, false);
  if (req.op == op_kind::scatter || p2p) {
    needs.assign(W, false);
    needs[p.root] = true;
  }
  std::vector<int> missing, foreign;
  for (size_t r = 0; r < W; ++r) {
    const auto& ref = req.refs[r];
    if (needs[r] && !ref.valid()) missing.push_back(static_cast<int>(r));
    if (ref.valid() && ref.node != g.nodes[r])
      foreign.push_back(static_cast<int>(r));
  }
  if (!missing.empty())
    return bad(errc::invalid_argument,
               "ranks " + list_ranks(missing) + " name no object");
  if (!foreign.empty())
    return bad(errc::unknown_object,
               "the refs of ranks " + list_ranks(foreign) +
                 " live on another node than their member");
  // The reference rank whose fingerprint the others must match.
  size_t ref_rank = needs[0] || req.op == op_kind::barrier ? 0 : p.root;
  const auto& first = req.refs[ref_rank];
  bool same_shape =
    req.op != op_kind::allgatherv && req.op != op_kind::alltoallv;
  std::vector<int> off;
  for (size_t r = 0; r < W; ++r) {
    const auto& ref = req.refs[r];
    if (!needs[r] || r == ref_rank) continue;
    if (ref.type != first.type || (same_shape && ref.shape != first.shape))
      off.push_back(static_cast<int>(r));
  }
  if (!off.empty())
    return bad(
      errc::mismatch, "ranks " + list_ranks(off) + " disagree with rank " +
                        std::to_string(ref_rank) + " (" + describe(first) +
                        "): " + [&] {
                          std::string s;
                          for (auto r : off)
                            s += (s.empty() ? "" : ", ") + std::to_string(r) +
                                 " has " + describe(req.refs[r]);
                          return s;
                        }());
  bool reduces = req.op == op_kind::allreduce || req.op == op_kind::reduce ||
                 req.op == op_kind::reduce_scatter;
  if (reduces && !is_defined(p.op, first.type))
    return bad(errc::invalid_argument,
               std::string{"reduce op "} + std::string{to_string(p.op)} +
                 " is not defined on " + std::string{to_string(first.type)});
  auto n = first.numel();
  auto divisible = [&]() -> caf::error {
    if (n % W != 0)
      return bad(errc::invalid_argument,
                 describe(first) + " has " + std::to_string(n) +
                   " elements, not divisible by world size " +
                   std::to_string(ws));
    return {};
  };
  auto slice_shape = [&](const object_ref& ref) {
    return detail::slice_shape(ref.shape, ref.numel(), ws);
  };
  auto stacked = [&](const object_ref& ref) {
    return detail::stacked_shape(ref.shape, ws);
  };
  op.takes_part.assign(W, !p2p);
  if (p2p) op.takes_part[p.root] = op.takes_part[p.peer] = true;
  op.starts.assign(W, start_msg{});
  for (size_t r = 0; r < W; ++r) {
    auto& s = op.starts[r];
    s.group = g.name;
    s.gen = g.gen;
    s.op = req.op;
    s.in = req.refs[r];
    s.params = p;
    s.out_type = first.type;
  }
  switch (req.op) {
    case op_kind::allreduce:
    case op_kind::broadcast:
    case op_kind::reduce:
    case op_kind::barrier: break;
    case op_kind::allgather:
      for (auto& s : op.starts) {
        s.has_out = true;
        s.out_shape = stacked(first);
      }
      break;
    case op_kind::gather:
      op.starts[p.root].has_out = true;
      op.starts[p.root].out_shape = stacked(first);
      break;
    case op_kind::scatter:
    case op_kind::reduce_scatter:
    case op_kind::alltoall: {
      if (auto err = divisible()) return err;
      for (auto& s : op.starts) {
        s.has_out = true;
        s.out_shape =
          req.op == op_kind::alltoall ? first.shape : slice_shape(first);
      }
      break;
    }
    case op_kind::allgatherv: {
      if (p.counts.size() != W)
        return bad(errc::invalid_argument, "counts has " +
                                             std::to_string(p.counts.size()) +
                                             " entries, the group has " +
                                             std::to_string(ws) + " ranks");
      std::vector<int> wrong;
      for (size_t r = 0; r < W; ++r)
        if (req.refs[r].numel() != p.counts[r])
          wrong.push_back(static_cast<int>(r));
      if (!wrong.empty())
        return bad(errc::mismatch, "the refs of ranks " + list_ranks(wrong) +
                                     " do not hold counts[rank] elements");
      auto total =
        std::accumulate(p.counts.begin(), p.counts.end(), uint64_t{0});
      for (auto& s : op.starts) {
        s.has_out = true;
        s.out_shape = {static_cast<int64_t>(total)};
      }
      break;
    }
    case op_kind::alltoallv: {
      if (p.counts.size() != W * W)
        return bad(errc::invalid_argument,
                   "counts has " + std::to_string(p.counts.size()) +
                     " entries, a world_size x world_size matrix has " +
                     std::to_string(W * W));
      std::vector<int> wrong;
      for (size_t r = 0; r < W; ++r) {
        uint64_t row = 0, col = 0;
        for (size_t j = 0; j < W; ++j) {
          row += p.counts[r * W + j];
          col += p.counts[j * W + r];
        }
        if (req.refs[r].numel() != row) wrong.push_back(static_cast<int>(r));
        op.starts[r].has_out = true;
        op.starts[r].out_shape = {static_cast<int64_t>(col)};
      }
      if (!wrong.empty())
        return bad(errc::mismatch,
                   "the refs of ranks " + list_ranks(wrong) +
                     " do not hold the sum of their row of counts");
      break;
    }
    case op_kind::send:
    case op_kind::recv:
      op.starts[p.peer].has_out = true;
      op.starts[p.peer].out_shape = first.shape;
      break;
  }
  return {};
}

void pump(driver_ptr self, group_entry& g);

// The error a pending op gets when its group breaks, given the op and its
// seq (-1: still queued). Empty: every op gets the group's reason.
using op_error_fn = std::function<caf::error(const pending_op&, int64_t)>;

// Answers every waiting client and queued or running op with `err`, or
// with what `for_op` makes of it.
void fail_all(group_entry& g, const caf::error& err,
              const op_error_fn& for_op = {}) {
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
  for (auto& [seq, op] : g.running)
    op.rp.deliver(error_of(op, static_cast<int64_t>(seq)));
  g.running.clear();
}

// The group cannot run ops any more: members abort their lanes, every
// pending and future op fails with `reason` (pending ones possibly with
// what `for_op` makes of it).
void break_group(driver_ptr self, group_entry& g, caf::error reason,
                 bool forming, const op_error_fn& for_op = {}) {
  g.state = forming ? group_state::failed : group_state::broken;
  g.reason = reason;
  for (auto& m : g.members)
    if (m) self->send(m, abort_atom::value, g.name, g.gen, reason);
  fail_all(g, reason, for_op);
}

// The ranks that reported ready must have formed the group on one backend,
// and on the one asked for unless that was "auto". Returns the mismatch
// naming each backend's ranks, or none.
caf::error backend_mismatch(const group_entry& g) {
  std::vector<std::pair<std::string, std::vector<int>>> got; // first seen first
  for (size_t r = 0; r < g.ready.size(); ++r) {
    if (!g.ready[r]) continue;
    auto i = std::find_if(got.begin(), got.end(), [&](const auto& x) {
      return x.first == g.backends[r];
    });
    if (i == got.end()) {
      got.emplace_back(g.backends[r], std::vector<int>{});
      i = std::prev(got.end());
    }
    i->second.push_back(static_cast<int>(r));
  }
  if (got.empty()) return {};
  bool asked = g.backend == "auto" || got[0].first == g.backend;
  if (got.size() == 1 && asked) return {};
  std::string detail =
    got.size() > 1 ? "ranks formed the group on different backends (asked for "
                   : "ranks formed the group on another backend than asked (";
  detail += g.backend + "):";
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& [name, ranks] = got[i];
    detail +=
      (i == 0 ? " " : ", ") +
      std::string{ranks.size() == 1 ? "rank " : "ranks "} +
      (ranks.size() == 1 ? std::to_string(ranks[0]) : list_ranks(ranks)) +
      " on " + (name.empty() ? std::string{"no backend"} : name);
  }
  return group_error(errc::mismatch, g, std::move(detail));
}

void formation_complete(driver_ptr self, group_entry& g) {
  g.state = group_state::ready;
  for (auto& rp : g.waiters)
    rp.deliver(caf::ok_atom::value);
  g.waiters.clear();
  pump(self, g);
}

void answer(driver_ptr self, group_entry& g, uint64_t seq) {
  auto i = g.running.find(seq);
  if (i == g.running.end()) return;
  auto op = std::move(i->second);
  g.running.erase(i);
  std::vector<int> failed;
  caf::error first;
  std::string details;
  for (size_t r = 0; r < op.errors.size(); ++r) {
    if (!op.errors[r]) continue;
    failed.push_back(static_cast<int>(r));
    if (!first) first = op.errors[r];
    details += "; rank " + std::to_string(r) + ": " + render(op.errors[r]);
  }
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
  if (failed.empty()) {
    op_result res{g.name, seq, {}};
    if (op.req.op == op_kind::allreduce || op.req.op == op_kind::broadcast ||
        op.req.op == op_kind::reduce)
      res.refs = op.req.refs;
    else if (op.req.op != op_kind::barrier)
      res.refs = std::move(op.outs);
    op.rp.deliver(std::move(res));
    return;
  }
  auto code = is_collective_error(first) ? code_of(first) : errc::backend_error;
  auto err = group_error(code, g, op.req.op, static_cast<int64_t>(seq), -1,
                         "failed on ranks " + list_ranks(failed) + details);
  op.rp.deliver(err);
  // The ranks may have diverged mid-op: nothing later can run safely.
  if (g.state == group_state::ready) break_group(self, g, err, false);
}

void start_op(driver_ptr self, group_entry& g, pending_op op) {
  auto seq = g.next_seq++;
  op.seq = seq;
  auto W = static_cast<size_t>(g.world_size);
  op.replied.assign(W, false);
  // Ranks outside a send/recv pair get no start: their lanes number
  // point-to-point ops separately and stay in step without it.
  for (size_t r = 0; r < W; ++r)
    if (!op.takes_part[r]) op.replied[r] = true;
  op.outstanding = static_cast<size_t>(
    std::count(op.takes_part.begin(), op.takes_part.end(), true));
  op.errors.assign(W, caf::error{});
  op.outs.assign(W, object_ref{});
  auto deadline = milliseconds{
    op.req.params.timeout_ms > 0 ? op.req.params.timeout_ms : g.timeout_ms};
  auto name = g.name;
  auto gen = g.gen;
  for (size_t r = 0; r < W; ++r) {
    if (!op.takes_part[r]) continue;
    auto& s = op.starts[r];
    s.seq = seq;
    if (s.params.timeout_ms <= 0) s.params.timeout_ms = g.timeout_ms;
    auto rank = r;
    // The request's own timeout is only a backstop: the driver's deadline
    // message below fires first and names the unfinished ranks.
    self
      ->request(g.members[r],
                deadline + self->state.grace + std::chrono::seconds{5},
                start_atom::value, s)
      .then(
        [=](object_ref& out) {
          auto i = self->state.groups.find(name);
          if (i == self->state.groups.end() || i->second.gen != gen) return;
          auto j = i->second.running.find(seq);
          if (j == i->second.running.end() || j->second.replied[rank]) return;
          j->second.replied[rank] = true;
          j->second.outs[rank] = std::move(out);
          if (--j->second.outstanding == 0) answer(self, i->second, seq);
        },
        [=](caf::error& err) {
          auto i = self->state.groups.find(name);
          if (i == self->state.groups.end() || i->second.gen != gen) return;
          auto j = i->second.running.find(seq);
          if (j == i->second.running.end() || j->second.replied[rank]) return;
          j->second.replied[rank] = true;
          j->second.errors[rank] = std::move(err);
          if (--j->second.outstanding == 0) answer(self, i->second, seq);
        });
  }
  self->delayed_send(self, deadline + self->state.grace, op_tmo_atom::value,
                     name, gen, seq);
  g.running.emplace(seq, std::move(op));
}

// The head op's checks are complete: start it, or refuse it naming the
// ranks whose objects are missing.
void checked(driver_ptr self, group_entry& g,
             const std::map<size_t, caf::error>& results) {
  auto head = std::move(g.queue.front());
  g.queue.pop_front();
  g.checking = false;
  std::vector<int> bad;
  caf::error first;
  std::string details;
  for (auto& [r, e] : results) {
    if (!e) continue;
    bad.push_back(static_cast<int>(r));
    if (!first) first = e;
    details += "; rank " + std::to_string(r) + ": " + render(e);
  }
  if (bad.empty()) {
    start_op(self, g, std::move(head));
  } else {
    auto code = is_collective_error(first) ? code_of(first) : errc::peer_lost;
    head.rp.deliver(group_error(code, g, head.req.op, -1, -1,
                                "refused before any data moved: ranks " +
                                  list_ranks(bad) + details));
  }
}

// Makes sure every object the head op names exists (and matches its
// fingerprint) before any rank starts moving data: refs on this node are
// looked up in its store, the others by asking their member.
void pump(driver_ptr self, group_entry& g) {
  std::shared_ptr<std::map<size_t, caf::error>> results;
  std::vector<size_t> remote;
  // Ops whose refs are all on this node start (or are refused) at once.
  while (remote.empty()) {
    if (g.state != group_state::ready || g.checking || g.queue.empty()) return;
    auto& op = g.queue.front();
    results = std::make_shared<std::map<size_t, caf::error>>();
    for (size_t r = 0; r < op.req.refs.size(); ++r) {
      const auto& ref = op.req.refs[r];
      // Ranks outside a send/recv pair do not touch their refs.
      if (!ref.valid() || !op.takes_part[r]) continue;
      if (ref.node != self->state.node) {
        remote.push_back(r);
        continue;
      }
      auto pin = self->state.local->pin(ref);
      (*results)[r] = pin ? caf::error{} : std::move(pin.error());
    }
    g.checking = true;
    if (remote.empty()) checked(self, g, *results);
  }
  auto& op = g.queue.front();
  auto id = op.id;
  auto name = g.name;
  auto gen = g.gen;
  auto expected = results->size() + remote.size();
  auto on_reply = [self, id, name, gen, results, expected](size_t rank,
                                                           caf::error err) {
    auto i = self->state.groups.find(name);
    if (i == self->state.groups.end() || i->second.gen != gen) return;
    auto& g = i->second;
    if (g.queue.empty() || g.queue.front().id != id) return;
    (*results)[rank] = std::move(err);
    if (results->size() < expected) return;
    checked(self, g, *results);
    pump(self, g);
  };
  for (auto r : remote) {
    self
      ->request(g.members[r], milliseconds{g.timeout_ms}, check_atom::value,
                g.name, g.gen, op.req.refs[r])
      .then([=](caf::ok_atom) { on_reply(r, caf::error{}); },
            [=](caf::error& err) { on_reply(r, std::move(err)); });
  }
}

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

// What is wrong with a membership on its own, before any group compares.
std::string membership_problem(const membership& m) {
  if (m.world_size < 1)
    return "world size " + std::to_string(m.world_size) + " is below 1";
  if (m.rank < 0 || m.rank >= m.world_size)
    return "rank " + std::to_string(m.rank) + " is outside [0, " +
           std::to_string(m.world_size) + ")";
  if (auto problem = backend_problem(m.backend); !problem.empty())
    return problem;
  if (!is_valid(m.ops_from))
    return "ops_from " + std::to_string(static_cast<int>(m.ops_from)) +
           " is neither driver nor members";
  return timeout_problem(m.timeout_ms, false);
}

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
  if (self->state.monitored.insert(member.address()).second)
    self->monitor(member);
  for (auto& x : g.members)
    if (!x) return;
  auto prefix = g.name + "/" + std::to_string(g.gen);
  g.inited = true;
  for (auto& x : g.members)
    self->send(x, init_atom::value, g.name, g.gen, self->state.store, prefix,
               g.timeout_ms);
}

// Refuses a declaration that cannot form, before any member hears of it.
caf::error check_declaration(driver_ptr self, const std::string& name,
                             const std::vector<caf::actor>& members,
                             const std::string& backend, int64_t timeout_ms) {
  auto invalid = [&](std::string detail) {
    return name_error(errc::invalid_argument, name, std::move(detail));
  };
  if (self->state.groups.count(name) > 0)
    return make_error(errc::duplicate_group,
                      "group '" + name + "' exists; destroy it first");
  if (members.empty()) return invalid("a group needs at least one member");
  if (auto problem = backend_problem(backend); !problem.empty())
    return invalid(std::move(problem));
  if (auto problem = timeout_problem(timeout_ms, false); !problem.empty())
    return invalid(std::move(problem));
  for (size_t r = 0; r < members.size(); ++r) {
    if (!members[r])
      return invalid("position " + std::to_string(r) + " is a null actor");
    for (size_t q = 0; q < r; ++q)
      if (members[q] == members[r])
        return invalid("positions " + std::to_string(q) + " and " +
                       std::to_string(r) +
                       " name the same actor; an actor holds one rank");
  }
  return {};
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

// The ranks of `g` that `dm` takes away: the dead member's own, and when
// its node became unreachable, every member on that node. CAF delivers
// their down messages one by one; the first one must name them all.
std::vector<int> lost_ranks(const group_entry& g, const caf::down_msg& dm) {
  bool node_lost = dm.reason == caf::exit_reason::remote_link_unreachable;
  std::vector<int> result;
  for (size_t r = 0; r < g.members.size(); ++r) {
    const auto& m = g.members[r];
    if (m && (m.address() == dm.source ||
              (node_lost && m.node() == dm.source.node())))
      result.push_back(static_cast<int>(r));
  }
  return result;
}

void on_member_down(driver_ptr self, const caf::down_msg& dm) {
  self->state.monitored.erase(dm.source);
  for (auto& [name, g] : self->state.groups) {
    auto lost = lost_ranks(g, dm);
    for (auto r : lost)
      g.members[r] = nullptr;
    if (lost.empty() ||
        (g.state != group_state::forming && g.state != group_state::ready))
      continue;
    bool forming = g.state == group_state::forming;
    auto one = lost.size() == 1;
    auto rank = one ? lost[0] : -1;
    auto what =
      (one ? "rank " + std::to_string(rank) : "ranks " + list_ranks(lost)) +
      " died (" + render(dm.reason) + ")" +
      (forming ? " before the group was formed" : "");
    // A death concerns every pending op alike: each answer names its own
    // op and seq, the group's reason none.
    auto for_op = [&](const pending_op& op, int64_t seq) {
      return group_error(errc::peer_lost, g, op.req.op, seq, rank, what);
    };
    break_group(self, g, group_error(errc::peer_lost, g, what, rank), forming,
                for_op);
  }
}

caf::behavior driver_impl(driver_ptr self, driver_config cfg, bool owns_store) {
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
  return {
    [=](reg_atom, membership& m, std::string& node) {
      auto member = caf::actor_cast<caf::actor>(self->current_sender());
      if (member) on_register(self, member, m, node);
    },
    [=](ready_atom, const std::string& name, uint64_t gen, int32_t rank,
        caf::error& err, std::string& backend) {
      auto gp = find_group(self, name, gen);
      if (!gp || gp->state != group_state::forming) return;
      auto& g = *gp;
      // Only the member holding `rank` speaks for it.
      if (rank < 0 || rank >= g.world_size ||
          g.members[rank] !=
            caf::actor_cast<caf::actor>(self->current_sender()))
        return;
      if (err) {
        auto code =
          is_collective_error(err) ? code_of(err) : errc::backend_error;
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
    },
    [=](form_tmo_atom, const std::string& name, uint64_t gen) {
      auto i = self->state.groups.find(name);
      if (i == self->state.groups.end() || i->second.gen != gen) return;
      auto& g = i->second;
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
      if (!absent.empty())
        detail += " ranks " + list_ranks(absent) + " never registered";
      if (!unready.empty())
        detail += (absent.empty() ? " ranks " : "; ranks ") +
                  list_ranks(unready) + " did not report ready";
      break_group(self, g, group_error(errc::timeout, g, detail), true);
    },
    [=](answer_atom, const std::string& name, uint64_t gen, uint64_t seq) {
      auto i = self->state.groups.find(name);
      if (i != self->state.groups.end() && i->second.gen == gen)
        answer(self, i->second, seq);
    },
    [=](op_tmo_atom, const std::string& name, uint64_t gen, uint64_t seq) {
      auto i = self->state.groups.find(name);
      if (i == self->state.groups.end() || i->second.gen != gen) return;
      auto& g = i->second;
      auto j = g.running.find(seq);
      if (j == g.running.end()) return;
      std::vector<int> unfinished;
      std::string details;
      for (size_t r = 0; r < j->second.replied.size(); ++r) {
        if (!j->second.replied[r])
          unfinished.push_back(static_cast<int>(r));
        else if (j->second.errors[r])
          details +=
            "; rank " + std::to_string(r) + ": " + render(j->second.errors[r]);
      }
      auto err = group_error(
        errc::timeout, g, j->second.req.op, static_cast<int64_t>(seq), -1,
        "deadline passed; ranks " + list_ranks(unfinished) +
          " had not finished" + details);
      j->second.rp.deliver(err);
      g.running.erase(j);
      log_histories(self, g, seq, render(err));
      break_group(self, g, err, false);
    },
    [=](op_request& req) -> caf::result<op_result> {
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
      op.id = self->state.next_op_id++;
      op.req = std::move(req);
      if (auto err = validate(g, op)) return err;
      op.rp = self->make_response_promise();
      g.queue.push_back(std::move(op));
      pump(self, g);
      return caf::delegated<op_result>{};
    },
    [=](declare_atom, const std::string& name,
        const std::vector<caf::actor>& members, const std::string& backend,
        int64_t timeout_ms) -> caf::result<caf::ok_atom> {
      if (auto err =
            check_declaration(self, name, members, backend, timeout_ms))
        return err;
      auto ws = static_cast<int32_t>(members.size());
      auto& g = open_group(self, name, ws, backend, timeout_ms);
      g.waiters.push_back(self->make_response_promise());
      for (int32_t r = 0; r < ws; ++r)
        send_join(self, g, r, members[r]);
      return caf::delegated<caf::ok_atom>{};
    },
    [=](wait_atom, const std::string& name) -> caf::result<caf::ok_atom> {
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
    },
    [=](destroy_atom, const std::string& name) -> caf::result<caf::ok_atom> {
      auto i = self->state.groups.find(name);
      if (i == self->state.groups.end())
        return name_error(errc::unknown_group, name,
                          "cannot destroy a group the driver does not know");
      auto& g = i->second;
      for (auto& m : g.members)
        if (m) self->send(m, leave_atom::value, name);
      fail_all(g, group_error(errc::aborted, g, "group destroyed"));
      self->state.groups.erase(i);
      return caf::ok_atom::value;
    },
    [=](status_atom, const std::string& name) {
      group_status result;
      result.group = name;
      auto i = self->state.groups.find(name);
      if (i == self->state.groups.end()) {
        result.state = "unknown";
        return result;
      }
      result.world_size = i->second.world_size;
      result.state = to_cstr(i->second.state);
      result.reason = i->second.reason;
      result.next_seq = i->second.next_seq;
      result.backend = i->second.backend_in_use;
      return result;
    },
  };
}

} // namespace

driver_actor spawn_driver(caf::actor_system& sys, driver_config cfg) {
  bool owns_store = !cfg.store;
  if (owns_store) cfg.store = spawn_store_actor(sys);
  return sys.spawn(driver_impl, std::move(cfg), owns_store);
}

} // namespace caf_collective
