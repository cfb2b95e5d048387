// What each op of a group runs: the body group::submit and a persistent
// op take, built from the caller's views and options (op_body.hpp). One
// builder per op, so the one-off call and the prepared one cannot drift.
#pragma once

#include "caf_collective/options.hpp"
#include "caf_collective/tensor.hpp"
#include "runtime/op_body.hpp"

namespace caf_collective::detail {

inline auto send_body(const tensor_view& in, const send_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& opts) {
      return be.send(c, in, opts);
    },
    [](backend& be, const op_call& c, const auto& in, const auto& opts,
       op_completion& done) { return be.start_send(c, in, opts, done); });
}

inline auto recv_body(const tensor_view& out, const recv_options& opts) {
  return make_body(out, opts.timeout, borrow(out, opts),
                   [](backend& be, const op_call& c, const auto& out,
                      const auto& opts) { return be.recv(c, out, opts); });
}

inline auto broadcast_body(const tensor_view& in, const tensor_view& out,
                           const broadcast_options& opts) {
  return make_body(
    out, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.broadcast(c, in, out, opts); },
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts, op_completion& done) {
      return be.start_broadcast(c, in, out, opts, done);
    });
}

inline auto reduce_body(const tensor_view& in, const tensor_view& out,
                        const reduce_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.reduce(c, in, out, opts); },
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts, op_completion& done) {
      return be.start_reduce(c, in, out, opts, done);
    });
}

inline auto allreduce_body(const tensor_view& in, const tensor_view& out,
                           const allreduce_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.allreduce(c, in, out, opts); },
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts, op_completion& done) {
      return be.start_allreduce(c, in, out, opts, done);
    });
}

inline auto allgather_body(const tensor_view& in, const tensor_view& out,
                           const allgather_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.allgather(c, in, out, opts); },
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts, op_completion& done) {
      return be.start_allgather(c, in, out, opts, done);
    });
}

inline auto allgatherv_body(const tensor_view& in, const tensor_view& out,
                            const allgatherv_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.allgatherv(c, in, out, opts); });
}

inline auto gather_body(const tensor_view& in, const tensor_view& out,
                        const gather_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.gather(c, in, out, opts); },
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts, op_completion& done) {
      return be.start_gather(c, in, out, opts, done);
    });
}

inline auto scatter_body(const tensor_view& in, const tensor_view& out,
                         const scatter_options& opts) {
  return make_body(
    out, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.scatter(c, in, out, opts); },
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts, op_completion& done) {
      return be.start_scatter(c, in, out, opts, done);
    });
}

inline auto reduce_scatter_body(const tensor_view& in, const tensor_view& out,
                                const reduce_scatter_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.reduce_scatter(c, in, out, opts); },
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts, op_completion& done) {
      return be.start_reduce_scatter(c, in, out, opts, done);
    });
}

inline auto alltoall_body(const tensor_view& in, const tensor_view& out,
                          const alltoall_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.alltoall(c, in, out, opts); },
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts, op_completion& done) {
      return be.start_alltoall(c, in, out, opts, done);
    });
}

inline auto alltoallv_body(const tensor_view& in, const tensor_view& out,
                           const alltoallv_options& opts) {
  return make_body(
    in, opts.timeout, borrow(in, out, opts),
    [](backend& be, const op_call& c, const auto& in, const auto& out,
       const auto& opts) { return be.alltoallv(c, in, out, opts); });
}

inline auto barrier_body(const barrier_options& opts) {
  // A barrier moves no tensor: ask the capability query about host memory.
  tensor_view none{nullptr, dtype::uint8, size_t{0}};
  return make_body(
    none, opts.timeout, borrow(opts),
    [](backend& be, const op_call& c, const auto& opts) {
      return be.barrier(c, opts);
    },
    [](backend& be, const op_call& c, const auto& opts, op_completion& done) {
      return be.start_barrier(c, opts, done);
    });
}

} // namespace caf_collective::detail
