// How the members of an NCCL communicator agree on its unique id: the
// creator (rank 0 of the communicator) makes it and publishes it in the
// group's rendezvous store; the others wait for it there. A creator that
// cannot take part publishes its failure instead, so the others fail at once
// with its reason rather than at their deadline.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/options.hpp"
#include "caf_collective/rendezvous.hpp"
#include "backends/nccl/nccl_util.hpp"

namespace caf_collective::detail {

struct nccl_id_record {
  ncclUniqueId id{};
  /// Devices each member drives (1 for a group; the multi-GPU API checks
  /// that every member brings as many as the creator).
  int32_t devices_per_member = 1;
};

/// Fails with unsupported when this process sees no CUDA device, and with
/// invalid_argument when `ordinal` is not one of its devices.
caf::error check_cuda_device(int ordinal, const error_context& where);

/// A fresh unique id (ncclGetUniqueId).
caf::expected<ncclUniqueId> make_nccl_id(const error_context& where);

caf::error publish_nccl_id(rendezvous_store& store, const std::string& key,
                           const nccl_id_record& record,
                           const error_context& where);

/// Publishes that the creator failed; best effort.
void publish_nccl_failure(rendezvous_store& store, const std::string& key,
                          const caf::error& why);

/// How long one question to the store may wait: the bound on how late
/// fetch_nccl_id sees an abort. Short enough for an abort to feel prompt,
/// long enough that a remote store (one request per slice and waiting
/// rank) is not flooded.
inline constexpr milliseconds fetch_slice{50};

/// Waits for the record under `key` until `deadline`, asking the store in
/// slices of at most fetch_slice so that `cancel` (may be null) is seen
/// within one: fails with aborted when it becomes true, with timeout at the
/// deadline, or with the creator's published failure.
caf::expected<nccl_id_record>
fetch_nccl_id(rendezvous_store& store, const std::string& key,
              const error_context& where, steady_time deadline,
              const std::atomic<bool>* cancel = nullptr);

} // namespace caf_collective::detail
