#include "caf_collective/backend.hpp"

#include "caf_collective/error.hpp"

namespace caf_collective {

backend::~backend() {
  // nop
}

caf::error backend::not_supported(op_kind op) const {
  return make_error(errc::unsupported,
                    error_context{{}, op, -1, rank(), world_size()},
                    "backend " + std::string{name()} + " does not support " +
                      std::string{to_string(op)});
}

caf::error backend::send(const op_call&, const tensor_view&,
                         const send_options&) {
  return not_supported(op_kind::send);
}

caf::error backend::recv(const op_call&, const tensor_view&,
                         const recv_options&) {
  return not_supported(op_kind::recv);
}

caf::error backend::broadcast(const op_call&, const tensor_view&,
                              const tensor_view&, const broadcast_options&) {
  return not_supported(op_kind::broadcast);
}

caf::error backend::reduce(const op_call&, const tensor_view&,
                           const tensor_view&, const reduce_options&) {
  return not_supported(op_kind::reduce);
}

caf::error backend::allreduce(const op_call&, const tensor_view&,
                              const tensor_view&, const allreduce_options&) {
  return not_supported(op_kind::allreduce);
}

caf::error backend::allgather(const op_call&, const tensor_view&,
                              const tensor_view&, const allgather_options&) {
  return not_supported(op_kind::allgather);
}

caf::error backend::allgatherv(const op_call&, const tensor_view&,
                               const tensor_view&, const allgatherv_options&) {
  return not_supported(op_kind::allgatherv);
}

caf::error backend::gather(const op_call&, const tensor_view&,
                           const tensor_view&, const gather_options&) {
  return not_supported(op_kind::gather);
}

caf::error backend::scatter(const op_call&, const tensor_view&,
                            const tensor_view&, const scatter_options&) {
  return not_supported(op_kind::scatter);
}

caf::error backend::reduce_scatter(const op_call&, const tensor_view&,
                                   const tensor_view&,
                                   const reduce_scatter_options&) {
  return not_supported(op_kind::reduce_scatter);
}

caf::error backend::alltoall(const op_call&, const tensor_view&,
                             const tensor_view&, const alltoall_options&) {
  return not_supported(op_kind::alltoall);
}

caf::error backend::alltoallv(const op_call&, const tensor_view&,
                              const tensor_view&, const alltoallv_options&) {
  return not_supported(op_kind::alltoallv);
}

caf::error backend::barrier(const op_call&, const barrier_options&) {
  return not_supported(op_kind::barrier);
}

bool backend::start_allreduce(const op_call&, const tensor_view&,
                              const tensor_view&, const allreduce_options&,
                              op_completion&) {
  return false;
}

bool backend::start_broadcast(const op_call&, const tensor_view&,
                              const tensor_view&, const broadcast_options&,
                              op_completion&) {
  return false;
}

bool backend::start_barrier(const op_call&, const barrier_options&,
                            op_completion&) {
  return false;
}

bool backend::start_send(const op_call&, const tensor_view&,
                         const send_options&, op_completion&) {
  return false;
}

bool backend::start_reduce(const op_call&, const tensor_view&,
                           const tensor_view&, const reduce_options&,
                           op_completion&) {
  return false;
}

bool backend::start_allgather(const op_call&, const tensor_view&,
                              const tensor_view&, const allgather_options&,
                              op_completion&) {
  return false;
}

bool backend::start_gather(const op_call&, const tensor_view&,
                           const tensor_view&, const gather_options&,
                           op_completion&) {
  return false;
}

bool backend::start_scatter(const op_call&, const tensor_view&,
                            const tensor_view&, const scatter_options&,
                            op_completion&) {
  return false;
}

bool backend::start_reduce_scatter(const op_call&, const tensor_view&,
                                   const tensor_view&,
                                   const reduce_scatter_options&,
                                   op_completion&) {
  return false;
}

bool backend::start_alltoall(const op_call&, const tensor_view&,
                             const tensor_view&, const alltoall_options&,
                             op_completion&) {
  return false;
}

} // namespace caf_collective
