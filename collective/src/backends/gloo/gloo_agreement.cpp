// Gloo backend: the agreement step of the uneven-size operations.
//
// allgatherv and alltoallv move a different number of bytes between each
// pair of ranks, so no single key mixed into the tag can show that the ranks
// agree: rank 0 may send 3 elements to rank 1 while rank 1 expects 2. Gloo
// itself either terminates the process (more bytes than expected) or leaves
// part of the output unwritten (fewer). So before any payload moves, every
// rank publishes its dtype and counts in one small allgather of a size all
// ranks know (it depends on the world size only), and every rank checks the
// whole picture (agreement.hpp). Ranks that disagree all fail with the same
// `mismatch` error, naming them; nothing else was sent, so the group stays
// usable.
#include <gloo/allgather.h>

#include "backends/common/agreement.hpp"
#include "backends/gloo/gloo_backend.hpp"

namespace caf_collective::detail {

caf::expected<std::vector<uint64_t>>
gloo_backend::exchange_headers(op_kind op, const op_call& call,
                               const std::vector<uint64_t>& mine) {
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(world_size_));
  auto err = guarded(op, call, [&] {
    gloo::AllgatherOptions opts{context_};
    // The header's own tag: no payload of any operation uses it.
    opts.setTag(tag_of(call.seq, agreement_key({uint64_t(op), 0x68647221u,
                                                uint64_t(world_size_)})));
    opts.setTimeout(call.timeout);
    opts.setInput(const_cast<uint64_t*>(mine.data()), mine.size());
    opts.setOutput(all.data(), all.size());
    gloo::allgather(opts);
  });
  if (err) return err;
  return all;
}

caf::error gloo_backend::agree_allgatherv(const op_call& call, dtype type,
                                          const std::vector<size_t>& counts) {
  std::vector<uint64_t> mine{uint64_t(type)};
  mine.insert(mine.end(), counts.begin(), counts.end());
  auto all = exchange_headers(op_kind::allgatherv, call, mine);
  if (!all) return std::move(all.error());
  return check_allgatherv_headers(context(op_kind::allgatherv, call),
                                  world_size_, *all);
}

caf::error gloo_backend::agree_alltoallv(const op_call& call, dtype type,
                                         const std::vector<size_t>& sends,
                                         const std::vector<size_t>& recvs) {
  std::vector<uint64_t> mine{uint64_t(type)};
  mine.insert(mine.end(), sends.begin(), sends.end());
  mine.insert(mine.end(), recvs.begin(), recvs.end());
  auto all = exchange_headers(op_kind::alltoallv, call, mine);
  if (!all) return std::move(all.error());
  return check_alltoallv_headers(context(op_kind::alltoallv, call), world_size_,
                                 *all);
}

} // namespace caf_collective::detail
