// Several GPUs per member, as Ray's *_multigpu calls: a member that drives
// several CUDA devices runs one NCCL rank per device from one thread and
// passes one tensor per device to each call. Available in builds with the
// NCCL backend (CAF_COLLECTIVE_HAVE_NCCL); the operations share their code
// with the NCCL backend of `group`.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/config.hpp"
#include "caf_collective/options.hpp"
#include "caf_collective/rendezvous.hpp"
#include "caf_collective/tensor.hpp"

#if CAF_COLLECTIVE_HAVE_NCCL

namespace caf_collective {

namespace detail {
class nccl_clique;
} // namespace detail

/// Number of CUDA devices this process sees: 0 without a GPU or driver.
int cuda_device_count() noexcept;

/// How one member joins a multi-GPU group.
struct multigpu_config {
  /// Group name; prefixes the rendezvous keys (under "nccl_multigpu/").
  std::string name;
  /// Number of members, >= 1.
  int world_size = 0;
  /// This member's rank in [0, world_size).
  int rank = -1;
  /// The CUDA devices this member drives, distinct, as many on every
  /// member. Device i of member r is NCCL rank r * cuda_devices.size() + i.
  std::vector<int> cuda_devices;
  /// Shared by all members, as for group_config.
  rendezvous_store_ptr store;
  /// Deadline of formation and default deadline of each operation.
  milliseconds timeout = std::chrono::seconds{30};
};

/// Broadcast from one device of one member.
struct multigpu_broadcast_options : broadcast_options {
  /// Index into the root member's cuda_devices.
  size_t root_device = 0;
};

/// Reduce onto one device of one member.
struct multigpu_reduce_options : reduce_options {
  /// Index into the root member's cuda_devices.
  size_t root_device = 0;
};

/// One member's handle to a multi-GPU group. Every operation takes one
/// tensor per device (tensor i on cuda_devices[i]) and blocks the calling
/// thread until the operation completed on all of this member's devices,
/// so never call it from a CAF scheduler thread. Calls run one at a time;
/// only `abort` may come from another thread.
///
/// Sizes are per tensor: allgather's outputs hold nccl_world_size() inputs,
/// reduce_scatter's inputs hold nccl_world_size() outputs, in NCCL rank
/// order. A failed or timed-out operation breaks the group: later calls
/// fail with errc::aborted.
class multigpu_group {
 public:
  /// Forms the group; blocks until every member joined. Fails with
  /// invalid_argument (bad config), unsupported (no CUDA device here),
  /// mismatch (members bring different device counts), timeout or
  /// backend_error.
  static caf::expected<std::unique_ptr<multigpu_group>>
  create(multigpu_config cfg);

  ~multigpu_group();

  multigpu_group(const multigpu_group&) = delete;
  multigpu_group& operator=(const multigpu_group&) = delete;

  const std::string& name() const noexcept { return cfg_.name; }

  int rank() const noexcept { return cfg_.rank; }

  int world_size() const noexcept { return cfg_.world_size; }

  const std::vector<int>& devices() const noexcept { return cfg_.cuda_devices; }

  /// Ranks of the NCCL communicator: world_size() * devices().size().
  int nccl_world_size() const noexcept;

  /// NCCL rank of this member's device `index`.
  int nccl_rank(size_t index) const noexcept;

  caf::error allreduce(std::span<const tensor_view> in,
                       std::span<const tensor_view> out,
                       allreduce_options opts = {});

  /// In place.
  caf::error allreduce(std::span<const tensor_view> tensors,
                       allreduce_options opts = {});

  /// `in` is read on the root device only; every device gets the root's
  /// data in `out`.
  caf::error broadcast(std::span<const tensor_view> in,
                       std::span<const tensor_view> out,
                       multigpu_broadcast_options opts = {});

  /// `out` is written on the root device only.
  caf::error reduce(std::span<const tensor_view> in,
                    std::span<const tensor_view> out,
                    multigpu_reduce_options opts = {});

  caf::error allgather(std::span<const tensor_view> in,
                       std::span<const tensor_view> out,
                       allgather_options opts = {});

  caf::error reduce_scatter(std::span<const tensor_view> in,
                            std::span<const tensor_view> out,
                            reduce_scatter_options opts = {});

  caf::error barrier(barrier_options opts = {});

  /// Stops a running operation (it fails with errc::aborted), aborts the
  /// communicator and breaks the group. Safe from any thread; returns once
  /// the operation's buffers are no longer in use.
  void abort(std::string why);

  /// Whether a failure or abort broke the group.
  bool broken() const noexcept;

 private:
  multigpu_group(multigpu_config cfg,
                 std::unique_ptr<detail::nccl_clique> clique);

  multigpu_config cfg_;
  std::unique_ptr<detail::nccl_clique> clique_;
  std::atomic<uint64_t> next_seq_{0};
};

} // namespace caf_collective

#endif // CAF_COLLECTIVE_HAVE_NCCL
