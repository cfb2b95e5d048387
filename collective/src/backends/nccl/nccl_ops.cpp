#include "backends/nccl/nccl_ops.hpp"

#include <cstddef>
#include <string>

#include "backends/nccl/nccl_ops_common.hpp"

namespace caf_collective::detail {

namespace {

template<class T>
void widen_as(const void* src, int64_t* dst, size_t n) {
  auto* xs = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i)
    dst[i] = static_cast<int64_t>(xs[i]);
}

void widen(dtype type, const void* src, int64_t* dst, size_t n) {
  switch (type) {
    case dtype::int8: widen_as<int8_t>(src, dst, n); break;
    case dtype::uint8: widen_as<uint8_t>(src, dst, n); break;
    case dtype::int32: widen_as<int32_t>(src, dst, n); break;
    case dtype::int64: widen_as<int64_t>(src, dst, n); break;
    default: break; // floating-point types never take the staged path
  }
}

template<class T>
void average_as(const int64_t* sums, void* dst, size_t n, int64_t divisor) {
  auto* ys = static_cast<T*>(dst);
  // C++ division truncates toward zero, as reduce_op::avg promises; the
  // average of values of T is a value of T, so the narrowing is exact.
  for (size_t i = 0; i < n; ++i)
    ys[i] = static_cast<T>(sums[i] / divisor);
}

void average(dtype type, const int64_t* sums, void* dst, size_t n,
             int64_t divisor) {
  switch (type) {
    case dtype::int8: average_as<int8_t>(sums, dst, n, divisor); break;
    case dtype::uint8: average_as<uint8_t>(sums, dst, n, divisor); break;
    case dtype::int32: average_as<int32_t>(sums, dst, n, divisor); break;
    case dtype::int64: average_as<int64_t>(sums, dst, n, divisor); break;
    default: break;
  }
}

/// Integer avg for reduce, allreduce and reduce_scatter. NCCL's own ncclAvg
/// on integers sums in the element type (wrapping around) and divides
/// without regard to the sign; reduce_op::avg promises an exact 64-bit sum
/// divided with truncation toward zero. So the elements are widened to
/// int64 on the host, summed by NCCL in int64, and divided on the host: four
/// copies through pinned memory, acceptable for a rare op.
caf::error staged_integer_avg(nccl_clique& c, const nccl_step_ctx& ctx,
                              op_kind kind, views in, views out, int root) {
  auto type = in[0].type();
  auto esize = size_of(type);
  size_t n = in[0].numel();
  if (n == 0) return {};
  // Elements of the result each local rank keeps.
  size_t m = kind == op_kind::reduce_scatter ? out[0].numel() : n;
  for (size_t i = 0; i < c.size(); ++i) {
    if (auto err = c.reserve_scratch(i, n * sizeof(int64_t), ctx.where))
      return err;
    if (auto err = c.reserve_host(i, n * (sizeof(int64_t) + esize), ctx.where))
      return err;
  }
  auto wide = [](nccl_slot& s) { return static_cast<int64_t*>(s.host.get()); };
  auto narrow = [n](nccl_slot& s) {
    return static_cast<void*>(static_cast<int64_t*>(s.host.get()) + n);
  };
  auto keeps_result = [&](const nccl_slot& s) {
    return kind != op_kind::reduce || s.rank == root;
  };
  auto result_offset = [&](const nccl_slot& s) {
    return kind == op_kind::reduce_scatter ? static_cast<size_t>(s.rank) * m
                                           : size_t{0};
  };
  // 1. The input to the host.
  auto fetch = [&](nccl_slot& s, size_t i) {
    return cuda_launched(ctx, "cudaMemcpyAsync (integer avg input)",
                         cudaMemcpyAsync(narrow(s), in[i].data(), n * esize,
                                         cudaMemcpyDeviceToHost, s.stream));
  };
  if (auto err = c.run(ctx, fetch)) return err;
  for (size_t i = 0; i < c.size(); ++i)
    widen(type, narrow(c.slot(i)), wide(c.slot(i)), n);
  // 2. The exact sum, in int64 on the device.
  auto sum = [&](nccl_slot& s, size_t) -> caf::error {
    auto* buf = static_cast<int64_t*>(s.scratch);
    if (auto err =
          cuda_launched(ctx, "cudaMemcpyAsync (integer avg widened)",
                        cudaMemcpyAsync(buf, wide(s), n * sizeof(int64_t),
                                        cudaMemcpyHostToDevice, s.stream)))
      return err;
    switch (kind) {
      case op_kind::reduce:
        return launched(
          ctx, "ncclReduce",
          ncclReduce(buf, buf, n, ncclInt64, ncclSum, root, s.comm, s.stream),
          s);
      case op_kind::reduce_scatter:
        return launched(ctx, "ncclReduceScatter",
                        ncclReduceScatter(buf, buf + result_offset(s), m,
                                          ncclInt64, ncclSum, s.comm, s.stream),
                        s);
      default:
        return launched(
          ctx, "ncclAllReduce",
          ncclAllReduce(buf, buf, n, ncclInt64, ncclSum, s.comm, s.stream), s);
    }
  };
  if (auto err = c.run(ctx, sum)) return err;
  // 3. The sums back to the host (a separate step: copies enqueued in a
  // step run before that step's NCCL kernels).
  auto collect = [&](nccl_slot& s, size_t) -> caf::error {
    if (!keeps_result(s) || m == 0) return {};
    auto* buf = static_cast<int64_t*>(s.scratch) + result_offset(s);
    return cuda_launched(ctx, "cudaMemcpyAsync (integer avg sums)",
                         cudaMemcpyAsync(wide(s), buf, m * sizeof(int64_t),
                                         cudaMemcpyDeviceToHost, s.stream));
  };
  if (auto err = c.run(ctx, collect)) return err;
  for (size_t i = 0; i < c.size(); ++i)
    if (keeps_result(c.slot(i)))
      average(type, wide(c.slot(i)), narrow(c.slot(i)), m, c.nranks());
  // 4. The averages into the output.
  auto store = [&](nccl_slot& s, size_t i) -> caf::error {
    if (!keeps_result(s) || m == 0) return {};
    return cuda_launched(ctx, "cudaMemcpyAsync (integer avg result)",
                         cudaMemcpyAsync(out[i].data(), narrow(s), m * esize,
                                         cudaMemcpyHostToDevice, s.stream));
  };
  return c.run(ctx, store);
}

} // namespace

caf::error check_nccl_reduce_op(const error_context& where, reduce_op op,
                                dtype type) {
  if (!is_defined(op, type))
    return make_error(errc::invalid_argument, where,
                      "reduce op " + std::string{to_string(op)} +
                        " is not defined on " + std::string{to_string(type)});
  if (!to_nccl(op))
    return make_error(errc::unsupported, where,
                      "backend nccl does not support reduce op " +
                        std::string{to_string(op)} + " on " +
                        std::string{to_string(type)} +
                        " tensors (NCCL has no bitwise reductions; use the "
                        "gloo backend)");
  return {};
}

caf::error nccl_broadcast(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                          views out, int root) {
  auto is_root = [root](const nccl_slot& s) { return s.rank == root; };
  if (auto err = check_side(c, ctx, in, "in", is_root)) return err;
  if (auto err = check_side(c, ctx, out, "out", every_rank)) return err;
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto n = out[i].numel();
    if (n == 0) return {};
    // Off the root NCCL ignores the send buffer; passing the receive
    // buffer keeps its argument check happy without a null pointer.
    const void* src = is_root(s) ? in[i].data() : out[i].data();
    return launched(ctx, "ncclBroadcast",
                    ncclBroadcast(src, out[i].data(), n, to_nccl(out[i].type()),
                                  root, s.comm, s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_reduce(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                       views out, int root, reduce_op op) {
  auto is_root = [root](const nccl_slot& s) { return s.rank == root; };
  if (auto err = check_side(c, ctx, in, "in", every_rank)) return err;
  if (auto err = check_side(c, ctx, out, "out", is_root)) return err;
  if (in.empty()) return {};
  if (auto err = check_nccl_reduce_op(ctx.where, op, in[0].type())) return err;
  if (op == reduce_op::avg && is_integral(in[0].type()))
    return staged_integer_avg(c, ctx, op_kind::reduce, in, out, root);
  auto red = *to_nccl(op);
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto n = in[i].numel();
    if (n == 0) return {};
    // NCCL checks ncclReduce's receive buffer on the root only (unlike
    // gather's and scatter's), so null is fine off the root.
    void* dst = is_root(s) ? out[i].data() : nullptr;
    return launched(ctx, "ncclReduce",
                    ncclReduce(in[i].data(), dst, n, to_nccl(in[i].type()), red,
                               root, s.comm, s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_allreduce(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                          views out, reduce_op op) {
  if (auto err = check_side(c, ctx, in, "in", every_rank)) return err;
  if (auto err = check_side(c, ctx, out, "out", every_rank)) return err;
  if (in.empty()) return {};
  if (auto err = check_nccl_reduce_op(ctx.where, op, in[0].type())) return err;
  if (op == reduce_op::avg && is_integral(in[0].type()))
    return staged_integer_avg(c, ctx, op_kind::allreduce, in, out, 0);
  auto red = *to_nccl(op);
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto n = in[i].numel();
    if (n == 0) return {};
    return launched(ctx, "ncclAllReduce",
                    ncclAllReduce(in[i].data(), out[i].data(), n,
                                  to_nccl(in[i].type()), red, s.comm, s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_allgather(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                          views out) {
  if (auto err = check_side(c, ctx, in, "in", every_rank)) return err;
  if (auto err = check_side(c, ctx, out, "out", every_rank)) return err;
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto n = in[i].numel();
    if (n == 0) return {};
    return launched(ctx, "ncclAllGather",
                    ncclAllGather(in[i].data(), out[i].data(), n,
                                  to_nccl(in[i].type()), s.comm, s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_allgatherv(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                           views out, const std::vector<size_t>& counts) {
  if (auto err = check_side(c, ctx, in, "in", every_rank)) return err;
  if (auto err = check_side(c, ctx, out, "out", every_rank)) return err;
  if (counts.size() != static_cast<size_t>(c.nranks()))
    return make_error(errc::invalid_argument, ctx.where,
                      "allgatherv needs one count per NCCL rank (" +
                        std::to_string(c.nranks()) + "), got " +
                        std::to_string(counts.size()));
  std::vector<size_t> first(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r)
    first[r] = first[r - 1] + counts[r - 1];
  // NCCL has no allgatherv: one broadcast per contributing rank, fused
  // into one group so they progress together.
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto type = to_nccl(out[i].type());
    for (size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] == 0) continue;
      void* dst = at(out[i], first[r]);
      const void* src = static_cast<int>(r) == s.rank ? in[i].data() : dst;
      if (auto err =
            launched(ctx, "ncclBroadcast (allgatherv)",
                     ncclBroadcast(src, dst, counts[r], type,
                                   static_cast<int>(r), s.comm, s.stream),
                     s))
        return err;
    }
    return {};
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_reduce_scatter(nccl_clique& c, const nccl_step_ctx& ctx,
                               views in, views out, reduce_op op) {
  if (auto err = check_side(c, ctx, in, "in", every_rank)) return err;
  if (auto err = check_side(c, ctx, out, "out", every_rank)) return err;
  if (in.empty()) return {};
  if (auto err = check_nccl_reduce_op(ctx.where, op, in[0].type())) return err;
  if (op == reduce_op::avg && is_integral(in[0].type()))
    return staged_integer_avg(c, ctx, op_kind::reduce_scatter, in, out, 0);
  auto red = *to_nccl(op);
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto n = out[i].numel();
    if (n == 0) return {};
    return launched(ctx, "ncclReduceScatter",
                    ncclReduceScatter(in[i].data(), out[i].data(), n,
                                      to_nccl(in[i].type()), red, s.comm,
                                      s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_barrier(nccl_clique& c, const nccl_step_ctx& ctx) {
  // A one-byte allreduce completes on a rank only after every rank has
  // contributed: a barrier, on the device, ordered with the other ops.
  for (size_t i = 0; i < c.size(); ++i)
    if (auto err = c.reserve_scratch(i, 64, ctx.where)) return err;
  auto enqueue = [&](nccl_slot& s, size_t) -> caf::error {
    return launched(ctx, "ncclAllReduce (barrier)",
                    ncclAllReduce(s.scratch, s.scratch, 1, ncclUint8, ncclSum,
                                  s.comm, s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

} // namespace caf_collective::detail
