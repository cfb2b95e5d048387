// Point-to-point messages of the NCCL backend.
//
// A group runs its sends on a send lane and its receives with the
// collectives on the main lane, concurrently. NCCL wants one issue order per
// communicator on every rank, so messages travel on two-rank communicators
// of their own, one per ordered pair (sender, receiver): on either side one
// lane is the only user of each. Tags do not get communicators of their
// own. As on Gloo, a message carries its tag (and its size) with it: a small
// header goes first, and the receiver checks it before it takes the payload.
// Messages between two ranks arrive in the order they were sent; a receive
// whose tag or size differs from the next message's fails with mismatch and
// drains that message, so both ranks stay in step. A member thus holds at
// most 2 * (world_size - 1) such communicators, whatever the tags.
//
// In the two-rank communicator the sender is NCCL rank 0, the receiver 1.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include <caf/error.hpp>

#include "caf_collective/tensor.hpp"
#include "backends/nccl/nccl_clique.hpp"

namespace caf_collective::detail {

/// Which communicator a message takes: its sender and receiver, never its
/// tag.
struct p2p_pair {
  int sender = 0;
  int receiver = 0;

  auto operator<=>(const p2p_pair&) const = default;
};

p2p_pair p2p_pair_of(int sender, int receiver, uint32_t tag) noexcept;

/// The rendezvous key of the pair's unique id, under the backend's prefix.
std::string p2p_store_key(const p2p_pair& pair);

/// "0->1": names the communicator in errors and NCCL's logs.
std::string p2p_text(const p2p_pair& pair);

/// What precedes every payload.
struct p2p_header {
  uint32_t magic = 0;
  uint32_t tag = 0;
  uint64_t bytes = 0;
};

inline constexpr uint32_t p2p_magic = 0x50464143; // "CAFP", version 1

p2p_header make_p2p_header(uint32_t tag, uint64_t bytes) noexcept;

/// Whether `got` is the message a receive of `bytes` with `tag` from
/// `sender` expects: mismatch names both when not, backend_error when `got`
/// is no header at all.
caf::error check_p2p_header(const p2p_header& got, uint32_t tag, uint64_t bytes,
                            int sender, const error_context& where);

/// Sends the header and `in` to NCCL rank 1 of `c` in one step.
caf::error nccl_send_message(nccl_clique& c, const nccl_step_ctx& ctx,
                             const tensor_view& in, uint32_t tag);

/// Receives the header from NCCL rank 0 of `c`, checks it, then receives
/// the payload into `out`. `sender` is the group rank, for messages.
caf::error nccl_recv_message(nccl_clique& c, const nccl_step_ctx& ctx,
                             const tensor_view& out, uint32_t tag, int sender);

} // namespace caf_collective::detail
