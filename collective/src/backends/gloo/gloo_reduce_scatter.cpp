// Gloo backend: reduce_scatter as a ring over Gloo's unbound buffers.
//
// Nomenclature: p ranks, rank r, block b = elements [b * n, (b + 1) * n) of
// the input. In step s (0 <= s < p - 1) rank r sends its partial sum of
// block (r - s - 1) mod p to rank r + 1 and adds the partial sum of block
// (r - s - 2) mod p that rank r - 1 sends it. After p - 1 steps rank r holds
// the complete reduction of block r. Each rank sends (p - 1) / p of the
// input once: the bandwidth optimum, half the traffic of an allreduce.
//
// We do not use Gloo's ReduceScatterHalvingDoubling: the 2022 Debian build
// reuses buffers whose sends have not completed and returned wrong floats
// at 128 KiB and above.
#include <cstring>

#include <gloo/transport/unbound_buffer.h>

#include "backends/common/reduce_kernels.hpp"
#include "backends/gloo/gloo_backend.hpp"
#include "backends/gloo/slots.hpp"

namespace caf_collective::detail {

void gloo_backend::ring_reduce_scatter(const op_call& call, std::byte* work,
                                       std::byte* inbox, dtype carrier,
                                       size_t block, reduce_op op,
                                       uint64_t pass) {
  auto p = world_size_;
  auto block_bytes = block * size_of(carrier);
  auto kernel = kernel_of(carrier, op);
  auto slot = reduce_scatter_slot(
    tag_of(call.seq, agreement_key({uint64_t(op_kind::reduce_scatter), block,
                                    uint64_t(carrier), uint64_t(op), pass})));
  auto right = (rank_ + 1) % p;
  auto left = (rank_ + p - 1) % p;
  live_buffers::tracked work_buf{
    live_, context_->createUnboundBuffer(work, block_bytes * p)};
  // Two inbox halves: the next step's receive lands in the other half
  // while this step's data is being reduced.
  live_buffers::tracked inbox_buf{
    live_, context_->createUnboundBuffer(inbox, block_bytes * 2)};
  auto block_of = [&](int s) { return ((rank_ - s) % p + p) % p; };
  inbox_buf->recv(left, slot, 0, block_bytes);
  for (int s = 0; s < p - 1; ++s) {
    auto send_block = block_of(s + 1);
    auto recv_block = block_of(s + 2);
    work_buf->send(right, slot, send_block * block_bytes, block_bytes);
    inbox_buf.wait_recv(call.timeout);
    auto half = static_cast<size_t>(s % 2) * block_bytes;
    if (s + 1 < p - 1)
      inbox_buf->recv(left, slot, block_bytes - half, block_bytes);
    auto* target = work + recv_block * block_bytes;
    kernel(target, target, inbox + half, block);
    // The next step sends the block just reduced, a different one from the
    // block in flight now; still, complete each send before moving on so
    // at most one send per step is outstanding.
    work_buf.wait_send(call.timeout);
  }
}

caf::error gloo_backend::reduce_scatter(const op_call& call,
                                        const tensor_view& in,
                                        const tensor_view& out,
                                        const reduce_scatter_options& opts) {
  return guarded(op_kind::reduce_scatter, call, [&] {
    auto block = out.numel();
    if (block == 0)
      return meet_empty(
        call, agreement_key({uint64_t(op_kind::reduce_scatter), 0,
                             uint64_t(in.type()), uint64_t(opts.op)}));
    auto total = in.numel();
    if (needs_split_avg(in.type(), opts.op) && world_size_ > 1) {
      auto* q = scratch_.reserve(in.nbytes());
      auto* r = scratch_avg_.reserve(in.nbytes());
      split_for_avg(in.data_as<int64_t>(), reinterpret_cast<int64_t*>(q),
                    reinterpret_cast<int64_t*>(r), total, world_size_);
      auto* inbox = scratch_recv_.reserve(2 * out.nbytes());
      ring_reduce_scatter(call, q, inbox, dtype::int64, block, reduce_op::sum,
                          pass_of(in.type(), opts.op, 0));
      ring_reduce_scatter(call, r, inbox, dtype::int64, block, reduce_op::sum,
                          pass_of(in.type(), opts.op, 1));
      auto mine = static_cast<size_t>(rank_) * out.nbytes();
      join_avg(reinterpret_cast<int64_t*>(q + mine),
               reinterpret_cast<int64_t*>(r + mine), out.data_as<int64_t>(),
               block, world_size_);
      return;
    }
    auto carrier = carrier_of(in.type(), opts.op);
    auto carrier_size = size_of(carrier);
    auto* work = scratch_.reserve(total * carrier_size);
    if (carrier == in.type())
      std::memcpy(work, in.data(), in.nbytes());
    else
      convert(in.data(), in.type(), work, carrier, total);
    if (world_size_ > 1) {
      auto* inbox = scratch_recv_.reserve(2 * block * carrier_size);
      ring_reduce_scatter(call, work, inbox, carrier, block, opts.op,
                          pass_of(in.type(), opts.op, 0));
    }
    auto* mine = work + static_cast<size_t>(rank_) * block * carrier_size;
    if (opts.op == reduce_op::avg) divide(mine, carrier, block, world_size_);
    if (carrier == in.type())
      std::memcpy(out.data(), mine, out.nbytes());
    else
      convert(mine, carrier, out.data(), out.type(), block);
  });
}

} // namespace caf_collective::detail
