// The NCCL backend: one member's end of one group on CUDA tensors.
//
// Communicators: the group's collectives run on one communicator over all
// ranks, formed in make_nccl_backend and kept for the backend's life, which
// is the group's: the group creates its backend once per formation and
// reuses it for every op, so "one communicator per group and device set,
// cached" is this object. No process-wide cache sits above it on purpose:
// a re-formed group with the same name has new peers and a new unique id,
// and must never meet an old communicator.
//
// Point-to-point: one two-rank communicator per ordered peer pair, formed on
// first use through the group's rendezvous store and cached here; tags
// travel in a header of each message (nccl_p2p.hpp).
//
// Teardown: the destructor finalizes every communicator of the backend at
// once, with one deadline (the group timeout) shared by all of them.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "caf_collective/backend.hpp"
#include "caf_collective/group.hpp"
#include "backends/nccl/nccl_clique.hpp"
#include "backends/nccl/nccl_p2p.hpp"

namespace caf_collective::detail {

class nccl_backend final : public backend {
 public:
  nccl_backend(group_config cfg, std::unique_ptr<nccl_clique> main);

  ~nccl_backend() override;

  std::string_view name() const noexcept override { return "nccl"; }

  int rank() const noexcept override { return cfg_.rank; }

  int world_size() const noexcept override { return cfg_.world_size; }

  /// CUDA tensors of every dtype, for every op. Bitwise reduce ops are
  /// refused per call (the query does not see the reduce op).
  bool supports(op_kind op, device_kind kind,
                dtype type) const noexcept override;

  caf::error send(const op_call& call, const tensor_view& in,
                  const send_options& opts) override;
  caf::error recv(const op_call& call, const tensor_view& out,
                  const recv_options& opts) override;
  caf::error broadcast(const op_call& call, const tensor_view& in,
                       const tensor_view& out,
                       const broadcast_options& opts) override;
  caf::error reduce(const op_call& call, const tensor_view& in,
                    const tensor_view& out,
                    const reduce_options& opts) override;
  caf::error allreduce(const op_call& call, const tensor_view& in,
                       const tensor_view& out,
                       const allreduce_options& opts) override;
  caf::error allgather(const op_call& call, const tensor_view& in,
                       const tensor_view& out,
                       const allgather_options& opts) override;
  caf::error allgatherv(const op_call& call, const tensor_view& in,
                        const tensor_view& out,
                        const allgatherv_options& opts) override;
  caf::error gather(const op_call& call, const tensor_view& in,
                    const tensor_view& out,
                    const gather_options& opts) override;
  caf::error scatter(const op_call& call, const tensor_view& in,
                     const tensor_view& out,
                     const scatter_options& opts) override;
  caf::error reduce_scatter(const op_call& call, const tensor_view& in,
                            const tensor_view& out,
                            const reduce_scatter_options& opts) override;
  caf::error alltoall(const op_call& call, const tensor_view& in,
                      const tensor_view& out,
                      const alltoall_options& opts) override;
  caf::error alltoallv(const op_call& call, const tensor_view& in,
                       const tensor_view& out,
                       const alltoallv_options& opts) override;
  caf::error barrier(const op_call& call, const barrier_options& opts) override;

  void abort(std::string_view why) override;

  /// Point-to-point communicators formed so far: at most one per ordered
  /// peer pair, whatever the tags.
  size_t p2p_communicators() const;

 private:
  nccl_step_ctx step(op_kind op, const op_call& call) const;

  /// The communicator for messages from pair.sender to pair.receiver,
  /// formed on first use (both ends block until the other arrives, within
  /// the op's deadline).
  caf::expected<nccl_clique*> p2p_clique(const nccl_step_ctx& ctx,
                                         const p2p_pair& pair);

  group_config cfg_;
  std::unique_ptr<nccl_clique> main_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex p2p_mtx_; // guards p2p_ (the map, not the communicators)
  std::map<p2p_pair, std::unique_ptr<nccl_clique>> p2p_;
};

/// Forms the group's main communicator: rank 0 creates the NCCL unique id and
/// publishes it in cfg.store; every rank then creates its communicator on
/// cfg.cuda_device. Fails with aborted within about fetch_slice once
/// `*cancel` (may be null) becomes true, in the id exchange as in NCCL's
/// init.
caf::expected<backend_ptr> make_nccl_backend(const group_config& cfg,
                                             const std::atomic<bool>* cancel);

} // namespace caf_collective::detail
