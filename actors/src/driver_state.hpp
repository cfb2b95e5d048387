// What the driver knows: one entry per group (its members, formation
// progress, queued and running ops) and the driver's own settings. Every
// phase of the driver (driver_formation, driver_dispatch, driver_failure)
// works on this state; driver.cpp wires CAF's handlers to those phases.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_clock.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/messages.hpp"
#include "caf_collective/options.hpp"

#include "driver_timing.hpp"

namespace caf_collective::detail {

// -- the driver's messages to itself ------------------------------------------

/// (form_tmo, group, gen): the formation deadline of generation `gen`.
using form_tmo_atom = caf::atom_constant<caf::atom("col_ftmo")>;
/// (op_tmo, group, gen): the group's earliest running op may have passed
/// its deadline. One such timer per group is armed at a time (not one per
/// op): every timer costs CAF's clock thread a wake-up.
using op_tmo_atom = caf::atom_constant<caf::atom("col_otmo")>;
/// (answer, group, gen, seq): answers an op whose ranks reported a lost
/// connection, after the grace period in which the driver's own down
/// message can name the dead rank.
using answer_atom = caf::atom_constant<caf::atom("col_answer")>;

// -- state --------------------------------------------------------------------

/// One op request from its arrival until its answer.
struct pending_op {
  /// Tells the queue's head apart from a later op while its checks run.
  uint64_t id = 0;
  op_request req;
  caf::response_promise rp;
  std::vector<start_msg> starts; // per rank, computed by validation
  std::vector<bool> takes_part;  // send/recv: only the pair
  size_t outstanding = 0;        // ranks that have not answered their start
  std::vector<bool> replied;
  std::vector<caf::error> errors;
  std::vector<object_ref> outs;
  /// A rank reported a lost peer; the answer waits for the down message.
  bool answer_deferred = false;
  /// When the op has run too long: its timeout (or the group's) plus the
  /// driver's grace after its start, on the actor's clock.
  caf::actor_clock::time_point deadline;
  driver_timing::stamps stamps; // zero unless timing is on
};

/// forming -> ready -> broken (an op failed or a member died), or
/// forming -> failed (the group never formed). Broken and failed groups
/// refuse every op with their reason until they are destroyed.
enum class group_state { forming, ready, broken, failed };

inline const char* to_cstr(group_state x) {
  switch (x) {
    case group_state::forming: return "forming";
    case group_state::ready: return "ready";
    case group_state::broken: return "broken";
    default: return "failed";
  }
}

struct group_entry {
  std::string name;
  /// Generation: a group destroyed and declared again gets a new one, so
  /// late messages about the old one are recognized and dropped.
  uint64_t gen = 0;
  int32_t world_size = 0;     // 0 until the first member registers
  std::string backend;        // asked for: "gloo", "shm", "nccl" or "auto"
  std::string backend_in_use; // what every rank got; empty until formed
  std::vector<std::string> backends; // per rank, from its ready message
  int64_t timeout_ms = 0;
  op_source ops_from = op_source::driver;
  std::vector<caf::actor> members; // by rank; null until registered or dead
  std::vector<std::string> nodes;  // by rank: the node of its refs
  std::vector<bool> ready;
  group_state state = group_state::forming;
  caf::error reason;
  uint64_t next_seq = 0;
  std::vector<caf::response_promise> waiters; // declare and wait requests
  std::deque<pending_op> queue;               // validated, not yet started
  bool checking = false;                  // the queue's head is being checked
  std::map<uint64_t, pending_op> running; // by seq
  // The group's deadline timer (op_tmo_atom): armed while ops run, for
  // the earliest deadline known when it was armed.
  bool deadline_armed = false;
  caf::actor_clock::time_point armed_for;
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
  /// Every member the driver monitors (from its registration until it
  /// dies), with its node: a member whose group was destroyed still
  /// reaches that node's store for a release or a hand-over. (Addresses,
  /// not handles: a member holds its driver, so a handle here kept the
  /// members of destroyed groups, and the driver, alive.)
  std::map<caf::actor_addr, std::string> monitored;
  driver_timing timing;
  // The driver itself, for its exit reason when the state is destroyed.
  const caf::local_actor* owner = nullptr;
  static inline const char* name = "caf_collective.driver";

  /// Answers every request still pending (see fail_all_at_exit): CAF 0.17
  /// drops an unanswered response promise silently, and the typed helpers
  /// wait without a timer, so a client would wait forever.
  ~driver_state();
};

using driver_ptr = caf::stateful_actor<driver_state>*;

/// The entry of group `name` if it is still generation `gen`, or null.
inline group_entry* find_group(driver_ptr self, const std::string& name,
                               uint64_t gen) {
  auto i = self->state.groups.find(name);
  if (i == self->state.groups.end() || i->second.gen != gen) return nullptr;
  return &i->second;
}

/// Where the ranks of `g`'s current formation keep their rendezvous keys:
/// "<gen>/<name>". Generations are unique per driver, so "<gen>/" names
/// this formation's keys alone even when group names contain '/'.
inline std::string formation_prefix(const group_entry& g) {
  return std::to_string(g.gen) + "/" + g.name;
}

// -- errors -------------------------------------------------------------------

/// An error about op `op` (seq -1: not started yet) of group `g`, or about
/// one of its ranks (rank -1: none in particular).
inline caf::error group_error(errc code, const group_entry& g, op_kind op,
                              int64_t seq, int rank, std::string detail) {
  return make_error(code, error_context{g.name, op, seq, rank, g.world_size},
                    std::move(detail));
}

/// An error about the group as a whole, or about one rank of it.
inline caf::error group_error(errc code, const group_entry& g,
                              std::string detail, int rank = -1) {
  error_context where;
  where.group = g.name;
  where.rank = rank;
  where.world_size = g.world_size;
  return make_error(code, where, std::move(detail));
}

/// The ranks whose errors are set, the first such error and "; rank r:
/// <error>" for each, as the driver's answers name them.
struct rank_failures {
  std::vector<int> ranks;
  caf::error first;
  std::string details;

  void add(size_t rank, const caf::error& err) {
    if (!err) return;
    ranks.push_back(static_cast<int>(rank));
    if (!first) first = err;
    details += "; rank " + std::to_string(rank) + ": " + render(err);
  }

  bool empty() const noexcept { return ranks.empty(); }
};

/// An error about a group the driver has no entry for (yet).
inline caf::error name_error(errc code, const std::string& name,
                             std::string detail) {
  error_context where;
  where.group = name;
  return make_error(code, where, std::move(detail));
}

} // namespace caf_collective::detail
