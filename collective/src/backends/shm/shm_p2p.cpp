// shm backend: send and recv through one mailbox per ordered pair of ranks.
//
// A message moves in chunks of the mailbox's size. The sender waits until
// the mailbox is empty (taken == posted), writes a chunk with the message's
// tag and total size, and bumps `posted`; the receiver waits for it, checks
// tag, size and dtype, copies the chunk out and bumps `taken`. Messages of
// one pair arrive in the order they were sent, as on Gloo. A recv whose tag,
// size or dtype differs from the next message fails with `mismatch` and
// leaves the message for a matching recv.
#include <algorithm>
#include <cstring>

#include "backends/shm/shm_backend.hpp"

namespace caf_collective::detail::shm {

namespace {

// A sender's dtype as the mailbox holds it (a number from shared memory).
std::string type_text(uint64_t type) {
  return type < 256 && is_valid(static_cast<dtype>(type))
           ? std::string{to_string(static_cast<dtype>(type))}
           : "dtype " + std::to_string(type);
}

} // namespace

caf::error shm_backend::send(const op_call& call, const tensor_view& in,
                             const send_options& opts) {
  lazy_deadline deadline{call.timeout};
  auto& box = seg_.mailbox(rank_, opts.peer);
  auto capacity = seg_.mailbox_bytes();
  auto total = in.nbytes();
  auto chunks = std::max<size_t>(1, (total + capacity - 1) / capacity);
  auto peer_only = [&] { return std::vector<int>{opts.peer}; };
  for (size_t c = 0; c < chunks; ++c) {
    auto empty = [&] {
      return box.taken.load(std::memory_order_acquire) ==
             box.posted.load(std::memory_order_relaxed);
    };
    if (auto err = wait_until(empty, peer_only, op_kind::send, &call, deadline))
      return err;
    post_chunk(in, opts, c * capacity);
  }
  return {};
}

void shm_backend::post_chunk(const tensor_view& in, const send_options& opts,
                             size_t offset) {
  auto& box = seg_.mailbox(rank_, opts.peer);
  auto total = in.nbytes();
  auto bytes = std::min(seg_.mailbox_bytes(), total - offset);
  if (bytes > 0)
    std::memcpy(seg_.mailbox_data(rank_, opts.peer),
                static_cast<const std::byte*>(in.data()) + offset, bytes);
  box.tag = opts.tag;
  box.total_bytes = total;
  box.type = static_cast<uint64_t>(in.type());
  announce();
  box.posted.fetch_add(1, std::memory_order_release);
  ring();
}

bool shm_backend::start_send(const op_call&, const tensor_view& in,
                             const send_options& opts, op_completion& done) {
  // Eager: a message of one chunk into an empty mailbox waits for nobody.
  // Anything else (a full mailbox, a longer message, an abort, which the
  // blocking form reports) takes the lane.
  auto& box = seg_.mailbox(rank_, opts.peer);
  if (in.nbytes() > seg_.mailbox_bytes() || aborted_anywhere() ||
      box.taken.load(std::memory_order_acquire) !=
        box.posted.load(std::memory_order_relaxed))
    return false;
  take_announcements(); // the receiver's read of the last chunk, for TSan
  post_chunk(in, opts, 0);
  auto finished = std::move(done);
  finished({});
  return true;
}

caf::error shm_backend::recv(const op_call& call, const tensor_view& out,
                             const recv_options& opts) {
  lazy_deadline deadline{call.timeout};
  auto& box = seg_.mailbox(opts.peer, rank_);
  const auto* data = seg_.mailbox_data(opts.peer, rank_);
  auto capacity = seg_.mailbox_bytes();
  auto total = out.nbytes();
  auto chunks = std::max<size_t>(1, (total + capacity - 1) / capacity);
  auto peer_only = [&] { return std::vector<int>{opts.peer}; };
  for (size_t c = 0; c < chunks; ++c) {
    auto full = [&] {
      return box.posted.load(std::memory_order_acquire) >
             box.taken.load(std::memory_order_relaxed);
    };
    if (auto err = wait_until(full, peer_only, op_kind::recv, &call, deadline))
      return err;
    if (c == 0 && (box.tag != opts.tag || box.total_bytes != total ||
                   box.type != static_cast<uint64_t>(out.type())))
      return make_error(errc::mismatch, context(op_kind::recv, &call),
                        "rank " + std::to_string(opts.peer) + " sent " +
                          std::to_string(box.total_bytes) + " bytes of " +
                          type_text(box.type) + " with tag " +
                          std::to_string(box.tag) + "; this recv expects " +
                          std::to_string(total) + " bytes of " +
                          std::string{to_string(out.type())} + " with tag " +
                          std::to_string(opts.tag) +
                          " (the message stays for a matching recv)");
    auto offset = c * capacity;
    auto bytes = std::min(capacity, total - offset);
    if (bytes > 0)
      std::memcpy(static_cast<std::byte*>(out.data()) + offset, data, bytes);
    announce();
    box.taken.fetch_add(1, std::memory_order_release);
    ring();
  }
  return {};
}

} // namespace caf_collective::detail::shm
