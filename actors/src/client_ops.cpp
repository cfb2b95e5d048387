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

namespace {

// An error of a request about `ref` that does not name it yet (the driver
// or its node went away before it answered) names it, as the relay's do.
caf::error naming(const char* what, const object_ref& ref, caf::error err) {
  if (!err || !is_collective_error(err)) return err;
  auto detail = detail_of(err);
  if (detail.find("object " + std::to_string(ref.id)) != std::string::npos)
    return err;
  return make_error(code_of(err), std::string{what} + " of object " +
                                    std::to_string(ref.id) + " of node " +
                                    ref.node + ": " + detail);
}

} // namespace

caf::error release(caf::scoped_actor& self, const driver_api& driver,
                   const object_ref& ref) {
  return naming("release", ref,
                detail::blocking_request(
                  self, driver, std::nullopt, error_context{},
                  [](caf::ok_atom) {}, release_atom::value, ref));
}

caf::error hand_over(caf::scoped_actor& self, const driver_api& driver,
                     const object_ref& ref, const caf::actor_addr& to) {
  return naming("hand-over", ref,
                detail::blocking_request(
                  self, driver, std::nullopt, error_context{},
                  [](caf::ok_atom) {}, hand_atom::value, ref, to));
}

} // namespace caf_collective
