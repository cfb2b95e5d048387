// Member-initiated collectives: a member starts an op of one of its groups
// from its own handler, on object refs of its node's store. The op runs on
// the group's lane exactly like a driver-started one; its result comes back
// to the member as a CAF response, so a handler writes `.then(...)` (or
// `.await(...)`) as for any other request and never blocks its scheduler
// thread. The op starts inside the call, in the member's own handler: no
// message to itself comes first.
//
//   auto grp = col::collectives(self, "sgd");
//   grp.allreduce(grad_ref, opts).then([=](col::object_ref r) { ... },
//                                      [=](caf::error& e) { ... });
//
// Only groups whose memberships say `ops_from = op_source::members` take
// ops this way (messages.hpp); each rank must start the same ops in the
// same order, as with the imperative API.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/duration.hpp>
#include <caf/fwd.hpp>
#include <caf/message_id.hpp>
#include <caf/meta/type_name.hpp>

#include "caf_collective/member_jobs.hpp"
#include "caf_collective/messages.hpp"
#include "caf_collective/object_collectives.hpp"

namespace caf_collective {

/// The layout of an output a rank cannot infer from its own input: the
/// tensor a recv fills, and a scatter's slice off the root.
struct out_layout {
  dtype type = dtype::float32;
  shape_type shape;
};

/// member -> itself, request -> object_ref | error. In-place ops (allreduce,
/// broadcast, reduce) answer with `in`, whose tensor holds the result;
/// out-of-place ops with a new ref in the member's store (empty where the
/// rank gets no output, e.g. gather off the root); barrier and send with an
/// empty ref.
struct member_op {
  std::string group;
  op_kind op = op_kind::barrier;
  object_ref in;
  /// root, peer, reduce op, algorithm, allgatherv counts, timeout.
  op_params params;
  /// send/recv: the user tag.
  uint32_t tag = 0;
  /// alltoallv: what this rank sends to and receives from each rank.
  std::vector<uint64_t> send_counts;
  std::vector<uint64_t> recv_counts;
  /// recv, and scatter off the root: the output's layout.
  bool has_layout = false;
  out_layout layout;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, out_layout& x) {
  return f(caf::meta::type_name("out_layout"), x.type, x.shape);
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_op& x) {
  return f(caf::meta::type_name("member_op"), x.group, x.op, x.in, x.params,
           x.tag, x.send_counts, x.recv_counts, x.has_layout, x.layout);
}

namespace detail {

/// Starts `op` for `self`, a member, right away (own_ops.cpp); its answer
/// (object_ref or error) reaches `self` as the response to request `id`.
/// An actor that runs no member protocol is answered unknown_group.
void start_own_op(caf::local_actor* self, member_op op, caf::message_id id);

/// The same for an object op (member_jobs.hpp), answered with the job's
/// message or error.
void start_own_job(caf::local_actor* self, member_job job, caf::message_id id);

/// Puts `t` into the store of `self`'s node, released when `self`
/// terminates (output_owners.cpp): a member or any other actor.
caf::expected<object_ref> put_owned(caf::local_actor* self, tensor&& t);

} // namespace detail

/// The ops of one group, started by the member `self` (an actor running the
/// member protocol) from its own handlers. Each call returns CAF's response
/// handle for an object_ref.
template<class Self>
class member_collectives {
 public:
  member_collectives(Self* self, std::string group)
    : self_(self), group_(std::move(group)) {
    // nop
  }

  auto allreduce(object_ref ref, const allreduce_options& opts = {}) {
    auto op = make(op_kind::allreduce, std::move(ref), opts);
    op.params.op = opts.op;
    op.params.algorithm = opts.algorithm;
    return start(std::move(op));
  }

  auto broadcast(object_ref ref, const broadcast_options& opts = {}) {
    auto op = make(op_kind::broadcast, std::move(ref), opts);
    op.params.root = opts.root;
    return start(std::move(op));
  }

  auto reduce(object_ref ref, const reduce_options& opts = {}) {
    auto op = make(op_kind::reduce, std::move(ref), opts);
    op.params.root = opts.root;
    op.params.op = opts.op;
    return start(std::move(op));
  }

  /// Answers a new ref stacking every rank's input: shape {world, ...}.
  auto allgather(object_ref ref, const allgather_options& opts = {}) {
    return start(make(op_kind::allgather, std::move(ref), opts));
  }

  auto allgatherv(object_ref ref, const allgatherv_options& opts) {
    auto op = make(op_kind::allgatherv, std::move(ref), opts);
    op.params.counts.assign(opts.counts.begin(), opts.counts.end());
    return start(std::move(op));
  }

  auto gather(object_ref ref, const gather_options& opts = {}) {
    auto op = make(op_kind::gather, std::move(ref), opts);
    op.params.root = opts.root;
    return start(std::move(op));
  }

  /// `ref`: the root's input (empty elsewhere); `slice`: the layout of the
  /// slice every rank receives.
  auto scatter(object_ref ref, out_layout slice,
               const scatter_options& opts = {}) {
    auto op = make(op_kind::scatter, std::move(ref), opts);
    op.params.root = opts.root;
    op.has_layout = true;
    op.layout = std::move(slice);
    return start(std::move(op));
  }

  auto reduce_scatter(object_ref ref, const reduce_scatter_options& opts = {}) {
    auto op = make(op_kind::reduce_scatter, std::move(ref), opts);
    op.params.op = opts.op;
    return start(std::move(op));
  }

  auto alltoall(object_ref ref, const alltoall_options& opts = {}) {
    return start(make(op_kind::alltoall, std::move(ref), opts));
  }

  auto alltoallv(object_ref ref, const alltoallv_options& opts) {
    auto op = make(op_kind::alltoallv, std::move(ref), opts);
    op.send_counts.assign(opts.send_counts.begin(), opts.send_counts.end());
    op.recv_counts.assign(opts.recv_counts.begin(), opts.recv_counts.end());
    return start(std::move(op));
  }

  auto barrier(const barrier_options& opts = {}) {
    return start(make(op_kind::barrier, object_ref{}, opts));
  }

  /// Sends `ref`'s tensor to rank `opts.peer`.
  auto send(object_ref ref, const send_options& opts) {
    auto op = make(op_kind::send, std::move(ref), opts);
    op.params.peer = opts.peer;
    op.tag = opts.tag;
    return start(std::move(op));
  }

  /// Receives a tensor of layout `into` from rank `opts.peer`; answers a
  /// new ref holding it.
  auto recv(out_layout into, const recv_options& opts) {
    auto op = make(op_kind::recv, object_ref{}, opts);
    op.params.peer = opts.peer;
    op.tag = opts.tag;
    op.has_layout = true;
    op.layout = std::move(into);
    return start(std::move(op));
  }

  // -- objects (object_collectives.hpp): any type with an inspect overload;
  // each call answers the objects it yields, or the op's error --------------

  /// Answers the root's object (T) on every rank.
  template<class T>
  auto broadcast_object(T obj, int root, object_options opts = {}) {
    opts.system = &self_->system();
    return start_job("broadcast_object",
                     [obj = std::move(obj), root, opts](group& g) mutable {
                       caf_collective::broadcast_object(g, obj, root, opts);
                       return caf::make_message(std::move(obj));
                     });
  }

  /// Answers every rank's object in rank order (std::vector<T>).
  template<class T>
  auto allgather_object(T obj, object_options opts = {}) {
    opts.system = &self_->system();
    return start_job("allgather_object", [obj = std::move(obj),
                                          opts](group& g) {
      return caf::make_message(caf_collective::allgather_object(g, obj, opts));
    });
  }

  /// Answers every rank's object on the root, an empty vector elsewhere.
  template<class T>
  auto gather_object(T obj, int root, object_options opts = {}) {
    opts.system = &self_->system();
    return start_job("gather_object",
                     [obj = std::move(obj), root, opts](group& g) {
                       return caf::make_message(
                         caf_collective::gather_object(g, obj, root, opts));
                     });
  }

  /// Answers this rank's object (T) of the root's `objs` (read there only).
  template<class T>
  auto scatter_object(std::vector<T> objs, int root, object_options opts = {}) {
    opts.system = &self_->system();
    return start_job("scatter_object",
                     [objs = std::move(objs), root, opts](group& g) {
                       return caf::make_message(
                         caf_collective::scatter_object(g, objs, root, opts));
                     });
  }

  /// Answers caf::ok_atom once rank `dst` has read the object.
  template<class T>
  auto send_object(T obj, int dst, object_options opts = {}) {
    opts.system = &self_->system();
    return start_job("send_object",
                     [obj = std::move(obj), dst, opts](group& g) {
                       caf_collective::send_object(g, obj, dst, opts);
                       return caf::make_message(caf::ok_atom::value);
                     });
  }

  /// Answers the object (T) rank `src` sent with send_object.
  template<class T>
  auto recv_object(int src, object_options opts = {}) {
    opts.system = &self_->system();
    return start_job("recv_object", [src, opts](group& g) {
      return caf::make_message(caf_collective::recv_object<T>(g, src, opts));
    });
  }

 private:
  // The handle a request from the member to itself would give: `begin(id)`
  // starts the op in the caller's handler, and the op's answer arrives as
  // the response to `id`. The op's own deadline bounds it (the group fails
  // it with timeout): the response needs no timer.
  template<class Begin>
  auto answered_to_self(Begin begin) {
    using handle = decltype(self_->request(caf::actor{}, caf::infinite,
                                           std::declval<member_op>()));
    auto id = self_->new_request_id(caf::message_priority::normal);
    begin(id);
    return handle{id.response_id(), self_};
  }

  // Started like a tensor op (start below), so the member's ops of both
  // kinds run in the order it called them.
  template<class Fn>
  auto start_job(std::string what, Fn fn) {
    member_job job{group_, std::move(what), detail::make_job(std::move(fn))};
    return answered_to_self([&](caf::message_id id) {
      detail::start_own_job(self_, std::move(job), id);
    });
  }

  member_op make(op_kind kind, object_ref ref, const op_options& opts) const {
    member_op op;
    op.group = group_;
    op.op = kind;
    op.in = std::move(ref);
    op.params.timeout_ms = opts.timeout.count();
    return op;
  }

  auto start(member_op op) {
    return answered_to_self([&](caf::message_id id) {
      detail::start_own_op(self_, std::move(op), id);
    });
  }

  Self* self_;
  std::string group_;
};

/// Puts `t` into the store of `self`'s node, owned by `self`: the object is
/// released when `self` terminates, unless it was released before. `self`
/// may be a member or any other actor (a client preparing an op's inputs).
template<class Self>
caf::expected<object_ref> put(Self* self, tensor&& t) {
  return detail::put_owned(self, std::move(t));
}

/// The collectives of `group` for the member `self`.
template<class Self>
member_collectives<Self> collectives(Self* self, std::string group) {
  return member_collectives<Self>{self, std::move(group)};
}

} // namespace caf_collective
