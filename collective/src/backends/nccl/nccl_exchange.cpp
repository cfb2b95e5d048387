// The operations that move blocks between ranks: gather, scatter, alltoall
// and alltoallv. NCCL has ncclGather, ncclScatter and ncclAlltoAll from
// 2.28 only; below that (or when the clique's paths say so) they run as
// grouped ncclSend/ncclRecv, which every supported NCCL has. Grouped calls
// progress together, so the exchange cannot deadlock whatever the order of
// peers.
#include <algorithm>
#include <vector>

#include "backends/nccl/nccl_ops.hpp"
#include "backends/nccl/nccl_ops_common.hpp"

namespace caf_collective::detail {

namespace {

/// Every rank's part of an exchange of blocks: the own block is a device
/// copy (queued before the group's kernels), the others are sends and
/// receives. Counts and offsets are in elements of `in`'s and `out`'s type.
struct exchange_plan {
  std::vector<size_t> send_counts;
  std::vector<size_t> send_first;
  std::vector<size_t> recv_counts;
  std::vector<size_t> recv_first;
};

std::vector<size_t> offsets_of(const std::vector<size_t>& counts) {
  std::vector<size_t> first(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r)
    first[r] = first[r - 1] + counts[r - 1];
  return first;
}

exchange_plan plan_of(std::vector<size_t> send_counts,
                      std::vector<size_t> recv_counts) {
  exchange_plan plan;
  plan.send_first = offsets_of(send_counts);
  plan.recv_first = offsets_of(recv_counts);
  plan.send_counts = std::move(send_counts);
  plan.recv_counts = std::move(recv_counts);
  return plan;
}

/// `moved` is the type of the elements exchanged, named by the caller: a
/// rank off a scatter's root may pass an empty input of any type, and its
/// receive must match the root's send byte for byte.
caf::error enqueue_exchange(const nccl_step_ctx& ctx, nccl_slot& s, dtype moved,
                            const tensor_view& in, const tensor_view& out,
                            const exchange_plan& plan) {
  auto type = to_nccl(moved);
  auto esize = size_of(moved);
  auto me = static_cast<size_t>(s.rank);
  auto nranks = plan.send_counts.size();
  if (plan.send_counts[me] > 0)
    if (auto err =
          copy_block(ctx, s, at(out, plan.recv_first[me]),
                     at(in, plan.send_first[me]), plan.send_counts[me] * esize))
      return err;
  for (size_t peer = 0; peer < nranks; ++peer) {
    if (peer == me) continue;
    auto p = static_cast<int>(peer);
    if (plan.send_counts[peer] > 0)
      if (auto err = launched(ctx, "ncclSend (exchange)",
                              ncclSend(at(in, plan.send_first[peer]),
                                       plan.send_counts[peer], type, p, s.comm,
                                       s.stream),
                              s))
        return err;
    if (plan.recv_counts[peer] > 0)
      if (auto err = launched(ctx, "ncclRecv (exchange)",
                              ncclRecv(at(out, plan.recv_first[peer]),
                                       plan.recv_counts[peer], type, p, s.comm,
                                       s.stream),
                              s))
        return err;
  }
  return {};
}

/// Gather as an exchange: every rank sends its n elements to the root,
/// which receives block r from rank r.
exchange_plan gather_plan(int nranks, int rank, int root, size_t n) {
  std::vector<size_t> sends(static_cast<size_t>(nranks), 0);
  std::vector<size_t> recvs(static_cast<size_t>(nranks), 0);
  sends[static_cast<size_t>(root)] = n;
  if (rank == root) std::fill(recvs.begin(), recvs.end(), n);
  auto plan = plan_of(std::move(sends), std::move(recvs));
  // The input holds one block, sent from its start whatever the peer.
  std::fill(plan.send_first.begin(), plan.send_first.end(), 0);
  return plan;
}

/// Scatter as an exchange: the root sends block r to rank r.
exchange_plan scatter_plan(int nranks, int rank, int root, size_t n) {
  std::vector<size_t> sends(static_cast<size_t>(nranks), 0);
  std::vector<size_t> recvs(static_cast<size_t>(nranks), 0);
  if (rank == root) std::fill(sends.begin(), sends.end(), n);
  recvs[static_cast<size_t>(root)] = n;
  auto plan = plan_of(std::move(sends), std::move(recvs));
  std::fill(plan.recv_first.begin(), plan.recv_first.end(), 0);
  return plan;
}

} // namespace

rooted_buffers gather_buffers(bool is_root, const tensor_view& in,
                              const tensor_view& out) noexcept {
  return {in.data(), is_root ? out.data() : in.data()};
}

rooted_buffers scatter_buffers(bool is_root, const tensor_view& in,
                               const tensor_view& out) noexcept {
  return {is_root ? in.data() : out.data(), out.data()};
}

caf::error nccl_gather(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                       views out, int root) {
  auto is_root = [root](const nccl_slot& s) { return s.rank == root; };
  if (auto err = check_side(c, ctx, in, "in", every_rank)) return err;
  if (auto err = check_side(c, ctx, out, "out", is_root)) return err;
  auto native = c.paths().native_gather;
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto n = in[i].numel();
    if (n == 0) return {};
    if (!native)
      return enqueue_exchange(ctx, s, in[i].type(), in[i], out[i],
                              gather_plan(c.nranks(), s.rank, root, n));
    auto bufs = gather_buffers(is_root(s), in[i], out[i]);
    return launched(ctx, "ncclGather",
                    c.calls().gather(bufs.send, bufs.recv, n,
                                     to_nccl(in[i].type()), root, s.comm,
                                     s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_scatter(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                        views out, int root) {
  auto is_root = [root](const nccl_slot& s) { return s.rank == root; };
  if (auto err = check_side(c, ctx, in, "in", is_root)) return err;
  if (auto err = check_side(c, ctx, out, "out", every_rank)) return err;
  auto native = c.paths().native_scatter;
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto n = out[i].numel();
    if (n == 0) return {};
    if (!native)
      return enqueue_exchange(ctx, s, out[i].type(), in[i], out[i],
                              scatter_plan(c.nranks(), s.rank, root, n));
    auto bufs = scatter_buffers(is_root(s), in[i], out[i]);
    return launched(ctx, "ncclScatter",
                    c.calls().scatter(bufs.send, bufs.recv, n,
                                      to_nccl(out[i].type()), root, s.comm,
                                      s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

namespace {

// NCCL receives block j while block j of the input may not be sent yet,
// and a device copy of the input is not kept: in place is refused.
caf::error refuse_in_place(const nccl_step_ctx& ctx, views in, views out,
                           const char* op) {
  for (size_t i = 0; i < in.size() && i < out.size(); ++i)
    if (in[i].nbytes() > 0 && in[i].data() == out[i].data())
      return make_error(errc::invalid_argument, ctx.where,
                        std::string{op} +
                          " in place is not supported on nccl: pass an "
                          "output buffer apart from the input");
  return {};
}

} // namespace

caf::error nccl_alltoall(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                         views out) {
  if (auto err = check_side(c, ctx, in, "in", every_rank)) return err;
  if (auto err = check_side(c, ctx, out, "out", every_rank)) return err;
  if (auto err = refuse_in_place(ctx, in, out, "alltoall")) return err;
  auto nranks = static_cast<size_t>(c.nranks());
  auto native = c.paths().native_alltoall;
  auto enqueue = [&](nccl_slot& s, size_t i) -> caf::error {
    auto n = in[i].numel() / nranks;
    if (n == 0) return {};
    if (!native)
      return enqueue_exchange(ctx, s, in[i].type(), in[i], out[i],
                              plan_of(std::vector<size_t>(nranks, n),
                                      std::vector<size_t>(nranks, n)));
    return launched(ctx, "ncclAlltoAll",
                    c.calls().alltoall(in[i].data(), out[i].data(), n,
                                       to_nccl(in[i].type()), s.comm, s.stream),
                    s);
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_alltoallv(nccl_clique& c, const nccl_step_ctx& ctx, views in,
                          views out, const std::vector<size_t>& send_counts,
                          const std::vector<size_t>& recv_counts) {
  if (auto err = check_side(c, ctx, in, "in", every_rank)) return err;
  if (auto err = check_side(c, ctx, out, "out", every_rank)) return err;
  if (auto err = refuse_in_place(ctx, in, out, "alltoallv")) return err;
  auto nranks = static_cast<size_t>(c.nranks());
  if (send_counts.size() != nranks || recv_counts.size() != nranks)
    return make_error(errc::invalid_argument, ctx.where,
                      "alltoallv needs one send and one receive count per "
                      "NCCL rank (" +
                        std::to_string(nranks) + ")");
  auto plan = plan_of(send_counts, recv_counts);
  auto enqueue = [&](nccl_slot& s, size_t i) {
    return enqueue_exchange(ctx, s, in[i].type(), in[i], out[i], plan);
  };
  return c.run(ctx, enqueue);
}

} // namespace caf_collective::detail
