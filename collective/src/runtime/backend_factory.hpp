// Creates the backend a group_config names. Called on the group's lane.
#pragma once

#include <atomic>

#include <caf/expected.hpp>

#include "caf_collective/backend.hpp"
#include "caf_collective/config.hpp"
#include "caf_collective/group.hpp"

namespace caf_collective::detail {

/// Dispatches on cfg.backend ("gloo", "shm", "nccl", "auto"); fails with
/// invalid_argument for an unknown name and unsupported for "nccl" in a
/// build without it. Once `*cancel` (may be null) becomes true, formation
/// fails with aborted within about 100 ms: every store wait looks at it
/// (cancelable_store.hpp), and so do shm's and NCCL's own waits. Gloo's TCP
/// connect to a peer that died after publishing its address does not. Store
/// sets that must wait (an unreachable TCP store) end at cfg.timeout.
caf::expected<backend_ptr>
make_backend(const group_config& cfg,
             const std::atomic<bool>* cancel = nullptr);

/// A rank that refused `cfg` on its own, before waiting for the others:
/// tells them why where they wait for the formation, so that they fail
/// naming it rather than "rank N never joined" at their deadline
/// (refuse_before_formation in formation_round.hpp).
void tell_followers_of_refusal(const group_config& cfg, const caf::error& why);

/// Forms a Gloo context over cfg.store (blocks until all ranks joined or
/// cfg.timeout, what is left of the formation's time, passed). Its
/// connections wait `op_timeout`, the group's own timeout: Gloo's legacy
/// allreduce algorithms, which wait with it, serve only ops whose timeout
/// it is (gloo_reductions.cpp).
caf::expected<backend_ptr> make_gloo_backend(const group_config& cfg,
                                             milliseconds op_timeout);

/// What must hold before make_gloo_backend: that this rank's hostname
/// resolves (within cfg.timeout). Asked once per formation: by make_backend
/// for "gloo" before the ranks wait for each other, so its peers learn of
/// it at once, and for "auto" once it chose Gloo.
caf::error check_gloo_usable(const group_config& cfg);

#if CAF_COLLECTIVE_HAVE_NCCL
/// Rank 0 creates the NCCL unique id and publishes it in cfg.store; every
/// rank then creates its communicator on cfg.cuda_device.
caf::expected<backend_ptr> make_nccl_backend(const group_config& cfg);
caf::expected<backend_ptr> make_nccl_backend(const group_config& cfg,
                                             const std::atomic<bool>* cancel);
/// What make_nccl_backend checks before it touches the store: a usable CUDA
/// device cfg.cuda_device and a supported NCCL. make_backend asks it before
/// the ranks wait for each other, so a rank without a GPU fails at once.
caf::error check_nccl_usable(const group_config& cfg);
#endif

} // namespace caf_collective::detail
