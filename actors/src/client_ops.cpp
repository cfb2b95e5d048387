#include "caf_collective/client_ops.hpp"

#include <caf/all.hpp>

#include "blocking_answer.hpp"

namespace caf_collective::detail {

op_params params_of(const op_options& opts) {
  op_params result;
  result.timeout_ms = opts.timeout.count();
  return result;
}

op_params params_of(const allreduce_options& opts) {
  auto result = params_of(static_cast<const op_options&>(opts));
  result.op = opts.op;
  result.algorithm = opts.algorithm;
  return result;
}

op_params params_of(const broadcast_options& opts) {
  auto result = params_of(static_cast<const op_options&>(opts));
  result.root = opts.root;
  return result;
}

op_params params_of(const reduce_options& opts) {
  auto result = params_of(static_cast<const op_options&>(opts));
  result.root = opts.root;
  result.op = opts.op;
  return result;
}

op_params params_of(const allgatherv_options& opts) {
  auto result = params_of(static_cast<const op_options&>(opts));
  result.counts.assign(opts.counts.begin(), opts.counts.end());
  return result;
}

op_params params_of(const gather_options& opts) {
  auto result = params_of(static_cast<const op_options&>(opts));
  result.root = opts.root;
  return result;
}

op_params params_of(const scatter_options& opts) {
  auto result = params_of(static_cast<const op_options&>(opts));
  result.root = opts.root;
  return result;
}

op_params params_of(const reduce_scatter_options& opts) {
  auto result = params_of(static_cast<const op_options&>(opts));
  result.op = opts.op;
  return result;
}

} // namespace caf_collective::detail

namespace caf_collective {

// The driver answers every request (on its exit too), so no timer: only a
// driver on another node is watched, for the loss of its node.
caf::expected<op_result> run(caf::scoped_actor& self, const driver_api& driver,
                             op_request req) {
  return detail::blocking_op(self, driver, std::move(req), std::nullopt);
}

// A driver on another node that goes away first: the error names the
// object, as the relay's answer does.
caf::error release(caf::scoped_actor& self, const driver_api& driver,
                   const object_ref& ref) {
  auto pending = self->request(driver, caf::infinite, release_atom::value, ref);
  return detail::await_answer(
    self, caf::actor_cast<caf::strong_actor_ptr>(driver), pending.id(),
    std::nullopt, [](caf::ok_atom) {},
    detail::lost_object_request(ref, "release", "the object was released"));
}

caf::error hand_over(caf::scoped_actor& self, const driver_api& driver,
                     const object_ref& ref, const caf::actor_addr& to) {
  auto pending =
    self->request(driver, caf::infinite, hand_atom::value, ref, to);
  return detail::await_answer(
    self, caf::actor_cast<caf::strong_actor_ptr>(driver), pending.id(),
    std::nullopt, [](caf::ok_atom) {},
    detail::lost_object_request(ref, "hand over", "the object changed hands"));
}

} // namespace caf_collective
