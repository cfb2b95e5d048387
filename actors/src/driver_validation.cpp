// Pure checks of the driver (driver_validation.hpp): declarations,
// memberships, deadlines, backends and op requests, each refused with an
// error that names what is wrong. No actor, no messages, no state changes
// beyond the op whose per-rank starts `validate` computes.
#include "driver_validation.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "caf_collective/error.hpp"

#include "layouts.hpp"
#include "op_plan.hpp"

namespace caf_collective::detail {

namespace {

std::string describe(const object_ref& ref) {
  std::string result{to_string(ref.type)};
  result += '[';
  for (size_t i = 0; i < ref.shape.size(); ++i) {
    if (i > 0) result += ',';
    result += std::to_string(ref.shape[i]);
  }
  return result + "]";
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

// The ranks of the first object that more than one rank names (they
// share its node and id), in rank order; empty when each names its own.
std::vector<int> ranks_sharing_an_object(const op_request& req) {
  for (size_t r = 0; r < req.refs.size(); ++r) {
    const auto& ref = req.refs[r];
    if (!ref.valid()) continue;
    std::vector<int> sharing{static_cast<int>(r)};
    for (size_t q = r + 1; q < req.refs.size(); ++q)
      if (req.refs[q].id == ref.id && req.refs[q].node == ref.node)
        sharing.push_back(static_cast<int>(q));
    if (sharing.size() > 1) return sharing;
  }
  return {};
}

// a + b, or nothing where the sum does not fit in 64 bits.
std::optional<uint64_t> add_counts(uint64_t a, uint64_t b) {
  if (b > UINT64_MAX - a) return std::nullopt;
  return a + b;
}

} // namespace

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
  if (m.cuda_device < 0)
    return "cuda device " + std::to_string(m.cuda_device) + " is negative";
  return timeout_problem(m.timeout_ms, false);
}

caf::error check_declaration(bool name_taken, const std::string& name,
                             const std::vector<caf::actor>& members,
                             const std::string& backend, int64_t timeout_ms) {
  auto invalid = [&](std::string detail) {
    return name_error(errc::invalid_argument, name, std::move(detail));
  };
  if (name_taken)
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
  // What the client named for the ranks that read no input (a barrier's,
  // off a scatter's root, a send's receiver) is ignored, as MPI ignores
  // those buffers: passed on, a ref of another dtype or size failed that
  // rank's own check alone, and its peers waited for it until the deadline;
  // a released one refused a barrier.
  for (size_t r = 0; r < W; ++r)
    if (!needs[r]) req.refs[r] = object_ref{};
  std::vector<int> missing, foreign;
  for (size_t r = 0; r < W; ++r) {
    const auto& ref = req.refs[r];
    if (needs[r] && !ref.valid()) missing.push_back(static_cast<int>(r));
    // A rank still to register has no node yet: its ref is checked when
    // the op reaches the head of the queue (pump asks its member).
    if (ref.valid() && !g.nodes[r].empty() && ref.node != g.nodes[r])
      foreign.push_back(static_cast<int>(r));
  }
  if (!missing.empty())
    return bad(errc::invalid_argument,
               "ranks " + list_ranks(missing) + " name no object");
  if (!foreign.empty())
    return bad(errc::unknown_object,
               "the refs of ranks " + list_ranks(foreign) +
                 " live on another node than their member");
  if (auto shared =
        in_place(req.op) ? ranks_sharing_an_object(req) : std::vector<int>{};
      !shared.empty())
    return bad(errc::invalid_argument,
               "ranks " + list_ranks(shared) + " name the same object (" +
                 to_string(req.refs[shared[0]]) + "); " +
                 std::string{to_string(req.op)} +
                 " writes each rank's object in place, so two ranks on one "
                 "object would read and write it at once: give each rank an "
                 "object of its own");
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
      std::optional<uint64_t> total = 0;
      for (auto c : p.counts)
        if (total) total = add_counts(*total, c);
      if (!total || *total > uint64_t{INT64_MAX})
        return bad(errc::invalid_argument,
                   "the counts add up to more than an output can hold "
                   "(2^63 - 1 elements)");
      for (auto& s : op.starts) {
        s.has_out = true;
        s.out_shape = {static_cast<int64_t>(*total)};
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
        std::optional<uint64_t> row = 0, col = 0;
        for (size_t j = 0; j < W; ++j) {
          if (row) row = add_counts(*row, p.counts[r * W + j]);
          if (col) col = add_counts(*col, p.counts[j * W + r]);
        }
        if (!row || !col || *col > uint64_t{INT64_MAX})
          return bad(errc::invalid_argument,
                     "the counts of rank " + std::to_string(r) +
                       " (its row, what it sends, or its column, what it "
                       "receives) add up to more than an object can hold "
                       "(2^63 - 1 elements)");
        if (req.refs[r].numel() != *row) wrong.push_back(static_cast<int>(r));
        op.starts[r].has_out = true;
        op.starts[r].out_shape = {static_cast<int64_t>(*col)};
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

} // namespace caf_collective::detail
