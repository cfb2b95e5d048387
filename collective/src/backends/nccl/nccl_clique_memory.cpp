// The memory of a clique's slots: device scratch, stream ordered, and
// pinned host staging from the process's cache. Neither ever synchronizes
// the device (see nccl_slot in nccl_clique.hpp).
#include <algorithm>
#include <string>

#include "backends/nccl/nccl_clique.hpp"

namespace caf_collective::detail {

caf::error nccl_clique::fail_unissued(caf::error err) {
  // The peers issue this op and wait in it; were the communicator kept,
  // this rank's next op would pair with their pending one, and NCCL
  // checks no more than byte counts: two unrelated ops could both
  // "succeed" with mixed-up data. Aborting makes every later op here fail
  // instead (the peers fail by their deadline).
  fail(err);
  return make_error(code_of(err), detail_of(err) +
                                    "; the communicator is aborted, since "
                                    "the other ranks went on into this op");
}

caf::error nccl_clique::reserve_scratch(size_t index, size_t bytes,
                                        const error_context& where) {
  std::lock_guard<std::mutex> guard{run_mtx_};
  if (abort_requested_.load() || !comms_alive_) return aborted_error(where);
  auto& slot = slots_[index];
  if (slot.scratch_bytes >= bytes) return {};
  // Grow geometrically: fresh device memory is costly, and a sequence of
  // slowly growing calls should not reallocate every time.
  auto wanted = std::max(bytes, slot.scratch_bytes * 2);
  device_guard dev{slot.device};
  release_scratch(slot);
  // Stream ordered: later steps on this stream see the memory, and no
  // device-wide synchronization happens on the way.
  auto err = slot.pools ? cudaMallocAsync(&slot.scratch, wanted, slot.stream)
                        : cudaMalloc(&slot.scratch, wanted);
  if (err != cudaSuccess) {
    slot.scratch = nullptr;
    return fail_unissued(cuda_error(
      where,
      "allocating " + std::to_string(wanted) +
        " bytes of NCCL scratch on cuda:" + std::to_string(slot.device),
      err));
  }
  slot.scratch_bytes = wanted;
  return {};
}

void nccl_clique::release_scratch(nccl_slot& slot) {
  if (slot.scratch == nullptr) return;
  if (slot.pools)
    static_cast<void>(cudaFreeAsync(slot.scratch, slot.stream));
  else
    slot.retired_scratch.push_back(slot.scratch);
  slot.scratch = nullptr;
  slot.scratch_bytes = 0;
}

caf::error nccl_clique::reserve_host(size_t index, size_t bytes,
                                     const error_context& where) {
  std::lock_guard<std::mutex> guard{run_mtx_};
  // After an abort a copy into the old block may still be queued.
  if (abort_requested_.load() || !comms_alive_) return aborted_error(where);
  auto& slot = slots_[index];
  if (slot.host.size() >= bytes) return {};
  pinned_block fresh;
  auto wanted = std::max(bytes, slot.host.size() * 2);
  if (auto err = pinned_cache::instance().take(wanted, fresh);
      err != cudaSuccess)
    return fail_unissued(cuda_error(where,
                                    "cudaHostAlloc of " +
                                      std::to_string(wanted) +
                                      " bytes of pinned staging memory",
                                    err));
  // The old block goes back to the cache: the last step completed, so no
  // copy touches it any more.
  slot.host = std::move(fresh);
  return {};
}

} // namespace caf_collective::detail
