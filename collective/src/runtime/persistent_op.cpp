// Persistent ops: group::prepare_* (check once, copy the arguments, bind
// them to the group), the group's run and start of a prepared op, and the
// persistent_op handle.
#include "caf_collective/persistent_op.hpp"

#include <memory>
#include <string>

#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"
#include "runtime/lane.hpp"
#include "runtime/op_bodies.hpp"
#include "runtime/persistent_call.hpp"
#include "runtime/validate.hpp"

namespace caf_collective {

op_kind persistent_op::op() const noexcept {
  return call_ ? call_->op : op_kind::barrier;
}

caf::error persistent_op::refusal() const {
  if (!call_)
    return make_error(errc::invalid_argument,
                      "this persistent_op is empty: make it with one of "
                      "group::prepare_*");
  if (call_->last.valid() && !call_->last.ready())
    return make_error(
      errc::invalid_argument, call_->owner->context(call_->op, -1),
      "this persistent " + std::string{to_string(call_->op)} +
        " is still running its previous start (wait for its work first)");
  return {};
}

caf::error persistent_op::run() {
  if (auto refused = refusal()) return refused;
  // A blocking caller: submit runs the op on this thread when the lane is
  // idle, without allocating its handle, else queues it and we wait.
  detail::run_inline_scope allow_inline;
  return call_->owner->start_persistent(call_).wait();
}

work persistent_op::start() {
  if (auto refused = refusal()) return work::completed(0, std::move(refused));
  call_->last = call_->owner->start_persistent(call_);
  return call_->last;
}

// -- the group's side ----------------------------------------------------

template<class Body>
caf::expected<persistent_op> group::prepare(op_kind op, caf::error validation,
                                            Body body) {
  if (!validation) validation = check_op_timeout(op, body.timeout);
  if (validation) return validation;
  // The op outlives this call: it keeps its own copies of the arguments.
  body.keep();
  auto call = std::make_shared<detail::persistent_call>();
  call->owner = shared_from_this();
  call->op = op;
  call->dev = body.dev;
  call->type = body.type;
  call->bytes = body.bytes;
  call->timeout = body.timeout;
  auto shared_body = std::make_shared<Body>(std::move(body));
  call->run = [shared_body](backend& be, const op_call& c) {
    return (*shared_body)(be, c);
  };
  if constexpr (Body::startable)
    call->start = [shared_body](backend& be, const op_call& c,
                                op_completion& done) {
      return shared_body->start(be, c, done);
    };
  return persistent_op{std::move(call)};
}

work group::start_persistent(
  const std::shared_ptr<detail::persistent_call>& call) {
  return submit(call->op, {}, detail::persistent_body{call},
                lane_for(call->op));
}

// -- group::prepare_* -----------------------------------------------------

caf::expected<persistent_op> group::prepare_send(const tensor_view& in,
                                                 send_options opts) {
  return prepare(op_kind::send,
                 detail::check_send(site_of(op_kind::send), in, opts),
                 detail::send_body(in, opts));
}

caf::expected<persistent_op> group::prepare_recv(const tensor_view& out,
                                                 recv_options opts) {
  return prepare(op_kind::recv,
                 detail::check_recv(site_of(op_kind::recv), out, opts),
                 detail::recv_body(out, opts));
}

caf::expected<persistent_op> group::prepare_broadcast(const tensor_view& in,
                                                      const tensor_view& out,
                                                      broadcast_options opts) {
  return prepare(
    op_kind::broadcast,
    detail::check_broadcast(site_of(op_kind::broadcast), in, out, opts),
    detail::broadcast_body(in, out, opts));
}

caf::expected<persistent_op> group::prepare_reduce(const tensor_view& in,
                                                   const tensor_view& out,
                                                   reduce_options opts) {
  return prepare(op_kind::reduce,
                 detail::check_reduce(site_of(op_kind::reduce), in, out, opts),
                 detail::reduce_body(in, out, opts));
}

caf::expected<persistent_op> group::prepare_allreduce(const tensor_view& in,
                                                      const tensor_view& out,
                                                      allreduce_options opts) {
  return prepare(
    op_kind::allreduce,
    detail::check_allreduce(site_of(op_kind::allreduce), in, out, opts),
    detail::allreduce_body(in, out, opts));
}

caf::expected<persistent_op> group::prepare_allgather(const tensor_view& in,
                                                      const tensor_view& out,
                                                      allgather_options opts) {
  return prepare(op_kind::allgather,
                 detail::check_allgather(site_of(op_kind::allgather), in, out),
                 detail::allgather_body(in, out, opts));
}

caf::expected<persistent_op>
group::prepare_allgatherv(const tensor_view& in, const tensor_view& out,
                          allgatherv_options opts) {
  return prepare(
    op_kind::allgatherv,
    detail::check_allgatherv(site_of(op_kind::allgatherv), in, out, opts),
    detail::allgatherv_body(in, out, opts));
}

caf::expected<persistent_op> group::prepare_gather(const tensor_view& in,
                                                   const tensor_view& out,
                                                   gather_options opts) {
  return prepare(op_kind::gather,
                 detail::check_gather(site_of(op_kind::gather), in, out, opts),
                 detail::gather_body(in, out, opts));
}

caf::expected<persistent_op> group::prepare_scatter(const tensor_view& in,
                                                    const tensor_view& out,
                                                    scatter_options opts) {
  return prepare(
    op_kind::scatter,
    detail::check_scatter(site_of(op_kind::scatter), in, out, opts),
    detail::scatter_body(in, out, opts));
}

caf::expected<persistent_op>
group::prepare_reduce_scatter(const tensor_view& in, const tensor_view& out,
                              reduce_scatter_options opts) {
  return prepare(op_kind::reduce_scatter,
                 detail::check_reduce_scatter(site_of(op_kind::reduce_scatter),
                                              in, out, opts),
                 detail::reduce_scatter_body(in, out, opts));
}

caf::expected<persistent_op> group::prepare_alltoall(const tensor_view& in,
                                                     const tensor_view& out,
                                                     alltoall_options opts) {
  return prepare(op_kind::alltoall,
                 detail::check_alltoall(site_of(op_kind::alltoall), in, out),
                 detail::alltoall_body(in, out, opts));
}

caf::expected<persistent_op> group::prepare_alltoallv(const tensor_view& in,
                                                      const tensor_view& out,
                                                      alltoallv_options opts) {
  return prepare(
    op_kind::alltoallv,
    detail::check_alltoallv(site_of(op_kind::alltoallv), in, out, opts),
    detail::alltoallv_body(in, out, opts));
}

caf::expected<persistent_op> group::prepare_barrier(barrier_options opts) {
  return prepare(op_kind::barrier,
                 detail::check_timeout(site_of(op_kind::barrier), opts),
                 detail::barrier_body(opts));
}

} // namespace caf_collective
