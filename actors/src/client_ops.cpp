#include "caf_collective/client_ops.hpp"

#include <caf/all.hpp>

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

caf::expected<op_result> run(caf::scoped_actor& self, const driver_api& driver,
                             op_request req) {
  caf::expected<op_result> result{op_result{}};
  self->request(driver, caf::infinite, std::move(req))
    .receive([&](op_result& x) { result = std::move(x); },
             [&](caf::error& err) { result = std::move(err); });
  return result;
}

caf::error release(caf::scoped_actor& self, const driver_api& driver,
                   const object_ref& ref) {
  caf::error result;
  self->request(driver, caf::infinite, release_atom::value, ref)
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) { result = std::move(err); });
  return result;
}

} // namespace caf_collective
