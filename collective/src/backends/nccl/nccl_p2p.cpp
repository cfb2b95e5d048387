#include "backends/nccl/nccl_p2p.hpp"

#include <cstring>

#include "backends/nccl/nccl_ops_common.hpp"

namespace caf_collective::detail {

namespace {

constexpr size_t header_bytes = sizeof(p2p_header);

/// Payloads move as bytes: the header already says how many, and a
/// receive's dtype need not be the send's.
caf::error send_bytes(const nccl_step_ctx& ctx, nccl_slot& s, const void* src,
                      size_t bytes) {
  return launched(ctx, "ncclSend (message)",
                  ncclSend(src, bytes, ncclUint8, 1, s.comm, s.stream), s);
}

caf::error recv_bytes(const nccl_step_ctx& ctx, nccl_slot& s, void* dst,
                      size_t bytes) {
  return launched(ctx, "ncclRecv (message)",
                  ncclRecv(dst, bytes, ncclUint8, 0, s.comm, s.stream), s);
}

caf::error reserve_header(nccl_clique& c, const nccl_step_ctx& ctx) {
  if (auto err = c.reserve_scratch(0, header_bytes, ctx.where)) return err;
  return c.reserve_host(0, header_bytes, ctx.where);
}

} // namespace

p2p_pair p2p_pair_of(int sender, int receiver, uint32_t) noexcept {
  return {sender, receiver};
}

std::string p2p_store_key(const p2p_pair& pair) {
  return "p2p/" + std::to_string(pair.sender) + "-" +
         std::to_string(pair.receiver);
}

std::string p2p_text(const p2p_pair& pair) {
  return std::to_string(pair.sender) + "->" + std::to_string(pair.receiver);
}

p2p_header make_p2p_header(uint32_t tag, uint64_t bytes) noexcept {
  return {p2p_magic, tag, bytes};
}

caf::error check_p2p_header(const p2p_header& got, uint32_t tag, uint64_t bytes,
                            int sender, const error_context& where) {
  if (got.magic != p2p_magic)
    return make_error(errc::backend_error, where,
                      "the message from rank " + std::to_string(sender) +
                        " has no valid header (is the peer built from "
                        "another release?)");
  if (got.tag == tag && got.bytes == bytes) return {};
  return make_error(
    errc::mismatch, where,
    "the next message from rank " + std::to_string(sender) + " has tag " +
      std::to_string(got.tag) + " and " + std::to_string(got.bytes) +
      " bytes, but this receive expects tag " + std::to_string(tag) + " and " +
      std::to_string(bytes) +
      " bytes (on the NCCL backend, messages between two ranks arrive in "
      "the order they were sent, whatever their tags); that message was "
      "dropped");
}

caf::error nccl_send_message(nccl_clique& c, const nccl_step_ctx& ctx,
                             const tensor_view& in, uint32_t tag) {
  views side{&in, 1};
  if (auto err = check_side(c, ctx, side, "in", every_rank)) return err;
  if (auto err = reserve_header(c, ctx)) return err;
  auto bytes = in.nbytes();
  auto header = make_p2p_header(tag, bytes);
  std::memcpy(c.slot(0).host.get(), &header, header_bytes);
  auto enqueue = [&](nccl_slot& s, size_t) -> caf::error {
    // Queued before the group's kernels, so the header is in place when
    // NCCL sends it.
    if (auto err =
          cuda_launched(ctx, "cudaMemcpyAsync (message header)",
                        cudaMemcpyAsync(s.scratch, s.host.get(), header_bytes,
                                        cudaMemcpyHostToDevice, s.stream)))
      return err;
    if (auto err = send_bytes(ctx, s, s.scratch, header_bytes)) return err;
    if (bytes == 0) return {};
    return send_bytes(ctx, s, in.data(), bytes);
  };
  return c.run(ctx, enqueue);
}

caf::error nccl_recv_message(nccl_clique& c, const nccl_step_ctx& ctx,
                             const tensor_view& out, uint32_t tag, int sender) {
  views side{&out, 1};
  if (auto err = check_side(c, ctx, side, "out", every_rank)) return err;
  if (auto err = reserve_header(c, ctx)) return err;
  // 1. The header, copied to the host behind the receive.
  auto take_header = [&](nccl_slot& s, size_t) {
    return recv_bytes(ctx, s, s.scratch, header_bytes);
  };
  auto fetch_header = [&](nccl_slot& s, size_t) {
    return cuda_launched(ctx, "cudaMemcpyAsync (message header)",
                         cudaMemcpyAsync(s.host.get(), s.scratch, header_bytes,
                                         cudaMemcpyDeviceToHost, s.stream));
  };
  if (auto err = c.run(ctx, take_header, fetch_header)) return err;
  p2p_header got;
  std::memcpy(&got, c.slot(0).host.get(), header_bytes);
  auto bytes = out.nbytes();
  if (auto err = check_p2p_header(got, tag, bytes, sender, ctx.where)) {
    if (code_of(err) != errc::mismatch) {
      c.abort(render(err));
      return err;
    }
    // 2'. Not the message expected: drain it, so the sender completes and
    // the next message lines up.
    if (got.bytes == 0) return err;
    if (auto drain_err = c.reserve_scratch(0, got.bytes, ctx.where)) {
      c.abort("could not drain a mismatched message: " + render(drain_err));
      return err;
    }
    auto drain = [&](nccl_slot& s, size_t) {
      return recv_bytes(ctx, s, s.scratch, got.bytes);
    };
    if (auto drain_err = c.run(ctx, drain)) return drain_err;
    return err;
  }
  // 2. The payload.
  if (bytes == 0) return {};
  auto take_payload = [&](nccl_slot& s, size_t) {
    return recv_bytes(ctx, s, out.data(), bytes);
  };
  return c.run(ctx, take_payload);
}

} // namespace caf_collective::detail
