// One helper per collective for clients of the driver, on its typed view
// (interfaces.hpp): `allreduce(self, driver, "g", refs, opts)`.
//
// - From a plain thread holding a caf::scoped_actor: the call blocks and
//   returns caf::expected<op_result>.
// - From an actor (any `Self*`): the call returns CAF's response handle, so
//   the actor writes `.then([](op_result& r) {...}, [](caf::error& e) {...})`
//   and keeps handling messages meanwhile.
//
// `refs[r]` is rank r's input (empty where a rank has none: barrier, scatter
// off the root, send off the source). The driver answers every request
// exactly once: within the op's deadline plus its grace, or with aborted
// when it exits first. So these requests need no timer of their own; one
// sent to a driver that is gone already gets CAF's request_receiver_down.
// A driver on another node cannot answer once that node is lost (CAF 0.17
// has no broken promises): the blocking helpers watch such a driver, and an
// actor's request to it goes through a relay of the actor's own node that
// does; both end in aborted naming the group and op.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <caf/duration.hpp>
#include <caf/fwd.hpp>

#include "caf_collective/interfaces.hpp"

namespace caf_collective {

namespace detail {

op_params params_of(const op_options& opts);
op_params params_of(const allreduce_options& opts);
op_params params_of(const broadcast_options& opts);
op_params params_of(const reduce_options& opts);
op_params params_of(const allgatherv_options& opts);
op_params params_of(const gather_options& opts);
op_params params_of(const scatter_options& opts);
op_params params_of(const reduce_scatter_options& opts);

/// `driver` itself if it lives on this node, else the relay of this node
/// that forwards `sender`'s next request to it, in order, and answers
/// aborted if the driver goes away before it answered (remote_relay.cpp).
driver_api relay_if_remote(caf::actor_system& sys,
                           const caf::abstract_actor* sender,
                           const driver_api& driver);

} // namespace detail

/// Runs `req` and waits for the driver's answer.
caf::expected<op_result> run(caf::scoped_actor& self, const driver_api& driver,
                             op_request req);

/// Sends `req`; the result arrives as the response.
template<class Self>
auto run(Self* self, const driver_api& driver, op_request req) {
  return self->request(detail::relay_if_remote(self->system(), self, driver),
                       caf::infinite, std::move(req));
}

template<class Client>
auto allreduce(Client&& self, const driver_api& driver, std::string group,
               std::vector<object_ref> refs,
               const allreduce_options& opts = {}) {
  return run(self, driver,
             op_request{std::move(group), op_kind::allreduce, std::move(refs),
                        detail::params_of(opts)});
}

template<class Client>
auto broadcast(Client&& self, const driver_api& driver, std::string group,
               std::vector<object_ref> refs,
               const broadcast_options& opts = {}) {
  return run(self, driver,
             op_request{std::move(group), op_kind::broadcast, std::move(refs),
                        detail::params_of(opts)});
}

template<class Client>
auto reduce(Client&& self, const driver_api& driver, std::string group,
            std::vector<object_ref> refs, const reduce_options& opts = {}) {
  return run(self, driver,
             op_request{std::move(group), op_kind::reduce, std::move(refs),
                        detail::params_of(opts)});
}

template<class Client>
auto allgather(Client&& self, const driver_api& driver, std::string group,
               std::vector<object_ref> refs,
               const allgather_options& opts = {}) {
  return run(self, driver,
             op_request{std::move(group), op_kind::allgather, std::move(refs),
                        detail::params_of(opts)});
}

template<class Client>
auto allgatherv(Client&& self, const driver_api& driver, std::string group,
                std::vector<object_ref> refs, const allgatherv_options& opts) {
  return run(self, driver,
             op_request{std::move(group), op_kind::allgatherv, std::move(refs),
                        detail::params_of(opts)});
}

template<class Client>
auto gather(Client&& self, const driver_api& driver, std::string group,
            std::vector<object_ref> refs, const gather_options& opts = {}) {
  return run(self, driver,
             op_request{std::move(group), op_kind::gather, std::move(refs),
                        detail::params_of(opts)});
}

template<class Client>
auto scatter(Client&& self, const driver_api& driver, std::string group,
             std::vector<object_ref> refs, const scatter_options& opts = {}) {
  return run(self, driver,
             op_request{std::move(group), op_kind::scatter, std::move(refs),
                        detail::params_of(opts)});
}

template<class Client>
auto reduce_scatter(Client&& self, const driver_api& driver, std::string group,
                    std::vector<object_ref> refs,
                    const reduce_scatter_options& opts = {}) {
  return run(self, driver,
             op_request{std::move(group), op_kind::reduce_scatter,
                        std::move(refs), detail::params_of(opts)});
}

template<class Client>
auto alltoall(Client&& self, const driver_api& driver, std::string group,
              std::vector<object_ref> refs, const alltoall_options& opts = {}) {
  return run(self, driver,
             op_request{std::move(group), op_kind::alltoall, std::move(refs),
                        detail::params_of(opts)});
}

/// `count_matrix[i * world_size + j]`: elements rank i sends to rank j.
template<class Client>
auto alltoallv(Client&& self, const driver_api& driver, std::string group,
               std::vector<object_ref> refs, std::vector<uint64_t> count_matrix,
               const op_options& opts = {}) {
  auto params = detail::params_of(opts);
  params.counts = std::move(count_matrix);
  return run(self, driver,
             op_request{std::move(group), op_kind::alltoallv, std::move(refs),
                        std::move(params)});
}

template<class Client>
auto barrier(Client&& self, const driver_api& driver, std::string group,
             const barrier_options& opts = {}) {
  return run(
    self, driver,
    op_request{
      std::move(group), op_kind::barrier, {}, detail::params_of(opts)});
}

/// Moves rank `from`'s tensor (`refs[from]`) to rank `to`; the result names
/// the receiver's new ref at `refs[to]`.
template<class Client>
auto send_recv(Client&& self, const driver_api& driver, std::string group,
               std::vector<object_ref> refs, int32_t from, int32_t to,
               const op_options& opts = {}) {
  auto params = detail::params_of(opts);
  params.root = from;
  params.peer = to;
  return run(self, driver,
             op_request{std::move(group), op_kind::send, std::move(refs),
                        std::move(params)});
}

/// Releases `ref` wherever it lives: the driver drops a ref of its node and
/// forwards one of another node to a member there. Blocking form.
caf::error release(caf::scoped_actor& self, const driver_api& driver,
                   const object_ref& ref);

/// Releases `ref` wherever it lives (see above); answers caf::ok_atom.
template<class Self>
auto release(Self* self, const driver_api& driver, const object_ref& ref) {
  return self->request(detail::relay_if_remote(self->system(), self, driver),
                       caf::infinite, release_atom::value, ref);
}

/// Hands `ref` to the actor `to` (e.g. `worker.address()`), wherever the
/// ref lives: from now on it is released when `to` terminates (at once if
/// it has), no longer with its owner so far (the client that asked for
/// the op, or the member that put it). For refs passed on to an actor that
/// outlives the client. Blocking form.
caf::error hand_over(caf::scoped_actor& self, const driver_api& driver,
                     const object_ref& ref, const caf::actor_addr& to);

/// Hands `ref` to `to` (see above); answers caf::ok_atom.
template<class Self>
auto hand_over(Self* self, const driver_api& driver, const object_ref& ref,
               const caf::actor_addr& to) {
  return self->request(detail::relay_if_remote(self->system(), self, driver),
                       caf::infinite, hand_atom::value, ref, to);
}

} // namespace caf_collective
