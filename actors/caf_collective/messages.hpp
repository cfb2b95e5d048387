// The actor layer's vocabulary: atoms and the messages between clients, the
// driver, members and the rendezvous store actor (docs/actors.md).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include "caf_collective/object_ref.hpp"
#include "caf_collective/object_store.hpp"
#include "caf_collective/op_kind.hpp"
#include "caf_collective/options.hpp"
#include "caf_collective/reduce_op.hpp"

namespace caf_collective {

// Interfaces by role. They are dynamically typed: members are actors of the
// user's own type, extended with the member protocol.
using driver_actor = caf::actor;
using member_actor = caf::actor;
using store_actor = caf::actor;

// -- atoms (at most 10 characters in CAF 0.17) --------------------------------

/// member -> driver: (reg, membership, node). Sent on start and on join.
using reg_atom = caf::atom_constant<caf::atom("col_reg")>;
/// client or driver -> member: (join, membership): add a group at run time.
/// As a request it is answered with an empty message once the member sent
/// its registration.
using join_atom = caf::atom_constant<caf::atom("col_join")>;
/// driver -> member: (grace, grace ms), on each registration it accepts: how
/// much longer than a group's timeout the driver waits for a formation. A
/// member's own op queued before init waits that much longer too, so that
/// the driver's error, naming the missing ranks, reaches it first.
using grace_atom = caf::atom_constant<caf::atom("col_grace")>;
/// driver -> member: (init, group, gen, store_actor, key prefix, timeout ms).
using init_atom = caf::atom_constant<caf::atom("col_init")>;
/// member -> driver: (ready, group, gen, rank, error, backend); error none =
/// formed, backend the one the group runs on ("auto" resolved; empty when
/// the formation failed).
using ready_atom = caf::atom_constant<caf::atom("col_ready")>;
/// driver -> member, request: (check, group, gen, seq, ref) -> ok | error.
/// A member on another node than the driver's checks that the ref names an
/// object of its store and holds that object for the op that will start as
/// `seq`, so that a release between the check and the start cannot fail
/// the start after its peers began.
using check_atom = caf::atom_constant<caf::atom("col_check")>;
/// driver -> member: (unhold, group, gen, seq): the op checked as `seq` was
/// refused (another rank's object is missing); drop what the check held.
using unhold_atom = caf::atom_constant<caf::atom("col_unhold")>;
/// driver -> member, request: (start, start_msg) -> object_ref | error.
using start_atom = caf::atom_constant<caf::atom("col_start")>;
/// driver -> member: (abort, group, gen, reason): the group is broken.
using abort_atom = caf::atom_constant<caf::atom("col_abort")>;
/// driver -> member: (leave, group): the group was destroyed.
using leave_atom = caf::atom_constant<caf::atom("col_leave")>;
/// client -> driver, request: (declare, group, members, backend, timeout ms)
/// -> ok once formed | error. Also driver -> member, request: (join,
/// membership) -> () (see join_atom), so that a declared actor that is no
/// member, or is dead, fails the declaration instead of going unnoticed.
using declare_atom = caf::atom_constant<caf::atom("col_decl")>;
/// client -> driver, request: (wait, group) -> ok once formed | error;
/// unknown_group at once if no member of the group has registered and no
/// declaration of it is under way.
using wait_atom = caf::atom_constant<caf::atom("col_wait")>;
/// client -> driver, request: (destroy, group) -> ok | unknown_group.
using destroy_atom = caf::atom_constant<caf::atom("col_destr")>;
/// client -> driver or member, request: (status, group) -> group_status.
using status_atom = caf::atom_constant<caf::atom("col_status")>;
/// driver or client -> member, request: (hist, group) -> std::string: the
/// member's recent ops of that group, one per line (op_history.hpp). The
/// driver asks every rank when an op passes its deadline and logs them.
using history_atom = caf::atom_constant<caf::atom("col_hist")>;

/// anyone -> member (or driver), request: (release, object_ref) -> ok |
/// unknown_object: drops the object from the store of the member's node.
/// The driver forwards a ref of another node to a member living there.
using release_atom = caf::atom_constant<caf::atom("col_rel")>;
/// anyone -> member (or driver), request: (hand, object_ref, actor_addr) ->
/// ok | unknown_object | invalid_argument: the object now belongs to that
/// actor, released when it terminates instead of with its owner so far.
/// The driver forwards a ref of another node as for release.
using hand_atom = caf::atom_constant<caf::atom("col_hand")>;
/// driver -> its rendezvous store: forget every key under a prefix (a
/// destroyed group's formation keys).
using forget_atom = caf::atom_constant<caf::atom("col_forget")>;

// -- limits -------------------------------------------------------------------

/// The longest deadline the driver accepts (24 h), for groups and ops alike.
/// Longer ones are refused with invalid_argument rather than clamped: a
/// deadline of days is a unit mix-up, and near INT64_MAX the clock
/// arithmetic of CAF and Gloo overflows into a deadline in the past.
constexpr int64_t max_timeout_ms = int64_t{24} * 60 * 60 * 1000;

/// The backend groups of the actor layer get unless asked otherwise: shm
/// when every rank runs on one host, gloo across hosts (resolved by the
/// ranks at formation).
constexpr const char* default_backend = "auto";

/// Whether `name` is a backend a group may ask for: "gloo", "shm", "nccl"
/// or "auto". (Whether nccl is built in is the members' to say.)
bool is_backend_name(const std::string& name);

/// Who starts a group's ops. A group takes them from one source only, so
/// that every rank runs them in one order: ops of a driver-run group come
/// from its driver's start messages, ops of a members-run group from the
/// members' own handlers (member_ops.hpp). The other source is refused with
/// errc::unsupported before any data moves.
enum class op_source : uint8_t { driver, members };

/// "driver" or "members".
const char* to_cstr(op_source x);

/// Whether `x` is one of op_source's enumerators (it crosses the network).
bool is_valid(op_source x);

// -- messages -----------------------------------------------------------------

/// A member's place in one group, fixed when the member is spawned (or
/// joins). All members of a group must agree on world size and backend.
struct membership {
  std::string group;
  int32_t rank = -1;
  int32_t world_size = 0;
  /// "auto" (default_backend: shm on one host, else gloo), "gloo", "shm"
  /// or "nccl".
  std::string backend = default_backend;
  /// Formation deadline and the default deadline of each op, in
  /// (0, max_timeout_ms].
  int64_t timeout_ms = 30000;
  /// Fault injection for tests (c10d's delaying-backend idea): this member
  /// waits this long before running each op. 0 in real use.
  int64_t start_delay_ms = 0;
  /// Where the group's ops come from; every rank must say the same.
  op_source ops_from = op_source::driver;
  /// NCCL: the CUDA device this member's group uses (one per rank of a
  /// group: NCCL runs one rank per device).
  int32_t cuda_device = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, membership& x) {
  return f(caf::meta::type_name("membership"), x.group, x.rank, x.world_size,
           x.backend, x.timeout_ms, x.start_delay_ms, x.ops_from,
           x.cuda_device);
}

/// Options of a driver-orchestrated op; fields an op does not use are
/// ignored.
struct op_params {
  /// broadcast, reduce, gather, scatter: the root; send/recv: the source.
  int32_t root = 0;
  /// send/recv: the destination rank.
  int32_t peer = -1;
  reduce_op op = reduce_op::sum;
  allreduce_algorithm algorithm = allreduce_algorithm::automatic;
  /// allgatherv: elements per rank (world size entries). alltoallv: the
  /// matrix counts[i * world_size + j] = elements rank i sends to rank j.
  std::vector<uint64_t> counts;
  /// Deadline in [0, max_timeout_ms]; 0: the group's timeout.
  int64_t timeout_ms = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_params& x) {
  return f(caf::meta::type_name("op_params"), x.root, x.peer, x.op, x.algorithm,
           x.counts, x.timeout_ms);
}

/// client -> driver, request -> op_result | error. `refs[r]` is rank r's
/// input; a ref may be empty where a rank has no input (barrier; scatter
/// off the root; send/recv off the source).
struct op_request {
  op_request() = default;

  // A constructor rather than an aggregate: `owner` is filled in by the
  // library, and requests written as {group, op, refs, params} must not
  // warn about it under -Wextra.
  op_request(std::string group_name, op_kind kind,
             std::vector<object_ref> inputs = {}, op_params options = {},
             caf::actor_addr outputs_owner = {})
    : group(std::move(group_name)), op(kind), refs(std::move(inputs)),
      params(std::move(options)), owner(std::move(outputs_owner)) {
    // nop
  }

  std::string group;
  op_kind op = op_kind::barrier;
  std::vector<object_ref> refs;
  op_params params;
  /// Who owns the op's outputs: when it terminates, they are released.
  /// Empty: the actor that sent the request (a relay fills in the client
  /// it forwards for).
  caf::actor_addr owner;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_request& x) {
  return f(caf::meta::type_name("op_request"), x.group, x.op, x.refs, x.params,
           x.owner);
}

/// The answer to an op_request. In-place ops (allreduce, broadcast, reduce)
/// return the input refs, whose tensors now hold the result; out-of-place
/// ops return one new ref per rank (empty where a rank has no output, e.g.
/// gather off the root).
struct op_result {
  std::string group;
  uint64_t seq = 0;
  std::vector<object_ref> refs;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_result& x) {
  return f(caf::meta::type_name("op_result"), x.group, x.seq, x.refs);
}

/// What the driver asks one member to run.
struct start_msg {
  std::string group;
  uint64_t gen = 0;
  uint64_t seq = 0;
  op_kind op = op_kind::barrier;
  object_ref in;
  op_params params;
  /// Out-of-place ops: whether this rank gets an output, and its layout.
  bool has_out = false;
  dtype out_type = dtype::float32;
  shape_type out_shape;
  /// The client owning the output (op_request::owner): the member releases
  /// the output when that client terminates. Empty: the member owns it.
  caf::actor_addr owner;
  /// The input `in` as the driver pinned it when it checked the op, for a
  /// member of the driver's own node: a release between the check and the
  /// start must not take it from under an op whose peers already began.
  /// Not serialized: messages between actors of one process are never
  /// serialized, and members on other nodes hold their input at their own
  /// check (check_atom).
  pinned_tensor checked_in;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_msg& x) {
  return f(caf::meta::type_name("start_msg"), x.group, x.gen, x.seq, x.op, x.in,
           x.params, x.has_out, x.out_type, x.out_shape, x.owner);
}

/// A group's state as the driver (or one member) sees it. `state` is one of
/// "forming", "ready", "broken", "failed", "unknown"; `reason` says why a
/// group is broken or failed (e.g. peer_lost naming the dead rank).
/// `backend` is the backend the group runs on ("shm", "gloo", "nccl"; what
/// "auto" resolved to), empty until the group is formed.
struct group_status {
  std::string group;
  int32_t world_size = 0;
  std::string state;
  caf::error reason;
  uint64_t next_seq = 0;
  std::string backend;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_status& x) {
  return f(caf::meta::type_name("group_status"), x.group, x.world_size, x.state,
           x.reason, x.next_seq, x.backend);
}

/// Registers every message type of caf-collective (object_ref included)
/// and its error category with `cfg`. Call before creating the system.
void add_message_types(caf::actor_system_config& cfg);

/// This node's name in object refs: `to_string(sys.node())`. A system
/// without a middleman has no node id; it gets "local-<pid>-<n>", unique per
/// actor system in this process, so that two such systems never share an
/// object store.
std::string node_name(caf::actor_system& sys);

/// The object store of this node (one per actor system / node name).
object_store_ptr local_store(caf::actor_system& sys);

} // namespace caf_collective
