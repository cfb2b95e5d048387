// One member's part of one NCCL communicator: one NCCL rank per CUDA device
// the member drives (one for a group member, several for a multigpu_group),
// each with its own communicator handle, non-blocking stream and events.
// Every NCCL operation of this library runs as steps of a clique, so the
// single-device backend and the multi-GPU API share one code path.
//
// Lifetime: create() forms the communicators (non-blocking, with a
// deadline); run() executes one step; abort() may come from any thread;
// the destructor finalizes the communicators, or aborts them when they
// failed or peers may be gone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/options.hpp"
#include "nccl/nccl_util.hpp"

namespace caf_collective::detail {

/// One NCCL rank driven by this member.
struct nccl_slot {
  int device = 0;
  /// Rank in the NCCL communicator (not the group rank for multi-GPU).
  int rank = 0;
  ncclComm_t comm = nullptr;
  /// Our own stream: NCCL kernels never queue behind the caller's work on
  /// other streams, and a hung kernel never blocks the caller's stream.
  cudaStream_t stream = nullptr;
  /// Recorded on the legacy default stream before a step: the step starts
  /// after the work the caller queued there (and on blocking streams).
  cudaEvent_t ready = nullptr;
  /// Recorded on `stream` after a step; polled for completion.
  cudaEvent_t done = nullptr;
  /// Device scratch, reused and grown (barrier, integer avg). Stream
  /// ordered (cudaMallocAsync) where the device supports it: a plain
  /// cudaFree would wait for the whole device, a hung kernel of another
  /// group included.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  bool scratch_async = false;
  /// Pinned host staging of the integer avg, reused and grown: pinned so
  /// that copies stay asynchronous and never block a thread that holds
  /// the issue mutex.
  void* host = nullptr;
  size_t host_bytes = 0;
  /// Outgrown staging buffers, freed at teardown only: cudaFreeHost
  /// synchronizes the device, which must not happen while NCCL may hang.
  std::vector<void*> retired_host;
};

/// What the members of one communicator agree on.
struct nccl_clique_spec {
  /// Names the communicator in errors and NCCL's logs, e.g. "g" or
  /// "g p2p 0->1 tag 3".
  std::string label;
  int nranks = 0;
  /// NCCL rank of the first device; device i gets first_rank + i.
  int first_rank = 0;
  std::vector<int> devices;
  ncclUniqueId id{};
  /// Bounds the wait for a clean teardown in the destructor.
  milliseconds teardown_timeout{10000};
};

/// Where and until when a step runs.
struct nccl_step_ctx {
  error_context where;
  steady_time deadline;
  milliseconds timeout; ///< for messages only
};

/// A non-owning reference to the callable that enqueues one slot's part of
/// a step: caf::error(nccl_slot&, size_t slot_index).
class enqueue_ref {
 public:
  template<class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, enqueue_ref>)
    enqueue_ref(F& fn) noexcept // NOLINT: implicit by design
    : obj_(&fn), call_([](void* obj, nccl_slot& slot, size_t index) {
        return (*static_cast<F*>(obj))(slot, index);
      }) {
    // nop
  }

  caf::error operator()(nccl_slot& slot, size_t index) const {
    return call_(obj_, slot, index);
  }

 private:
  void* obj_;
  caf::error (*call_)(void*, nccl_slot&, size_t);
};

class nccl_clique {
 public:
  /// Creates every slot's communicator inside one NCCL group call (NCCL
  /// needs that when one thread drives several ranks) and polls until all
  /// are ready. Fails with timeout at `deadline` (the communicators are
  /// aborted), aborted when `*cancel` becomes true, backend_error otherwise.
  static caf::expected<std::unique_ptr<nccl_clique>>
  create(nccl_clique_spec spec, const error_context& where,
         steady_time deadline, const std::atomic<bool>* cancel = nullptr);

  ~nccl_clique();

  nccl_clique(const nccl_clique&) = delete;
  nccl_clique& operator=(const nccl_clique&) = delete;

  const std::string& label() const noexcept { return spec_.label; }

  int nranks() const noexcept { return spec_.nranks; }

  size_t size() const noexcept { return slots_.size(); }

  nccl_slot& slot(size_t index) noexcept { return slots_[index]; }

  /// Grows slot `index`'s device scratch to at least `bytes`; only
  /// between steps.
  caf::error reserve_scratch(size_t index, size_t bytes,
                             const error_context& where);

  /// Grows slot `index`'s pinned host staging to at least `bytes`; only
  /// between steps.
  caf::error reserve_host(size_t index, size_t bytes,
                          const error_context& where);

  /// Runs one step on every slot and returns when it completed on all of
  /// them:
  /// 1. each slot's stream waits for the caller's legacy-stream work;
  /// 2. `enqueue` runs for every slot between ncclGroupStart and
  ///    ncclGroupEnd (CUDA copies it enqueues run before the NCCL calls);
  /// 3. a pending non-blocking group end is polled to completion;
  /// 4. `done` is recorded and polled, with ncclCommGetAsyncError, the
  ///    deadline and the abort flag checked on every round.
  /// Any failure aborts the communicators: the peers may be stuck in the
  /// same step, and NCCL cannot resume a half-done group.
  caf::error run(const nccl_step_ctx& ctx, enqueue_ref enqueue);

  /// Makes a running step stop and fail with errc::aborted, aborts the
  /// communicators and fails every later step. Safe from any thread;
  /// returns after the running step (if any) has let go of its buffers.
  void abort(std::string_view why);

  bool aborted() const noexcept { return abort_requested_.load(); }

 private:
  explicit nccl_clique(nccl_clique_spec spec);

  // The steps below expect run_mtx_ held.
  caf::error setup_slots(const error_context& where);
  caf::error wait_comms_ready(const error_context& where, steady_time deadline,
                              const std::atomic<bool>* cancel,
                              std::string_view phase);
  caf::error wait_done(const nccl_step_ctx& ctx);
  caf::error aborted_error(const error_context& where) const;
  caf::error fail(caf::error err);
  void abort_comms_locked();
  void teardown_locked();
  static void free_scratch(nccl_slot& slot);

  nccl_clique_spec spec_;
  std::vector<nccl_slot> slots_;
  // Held by a running step and by abort(): a step and an abort never use
  // the communicators at the same time, and abort() waits for the step.
  std::mutex run_mtx_;
  bool comms_alive_ = false; // guarded by run_mtx_
  std::atomic<bool> abort_requested_{false};
  mutable std::mutex reason_mtx_;
  std::string abort_reason_; // guarded by reason_mtx_
};

} // namespace caf_collective::detail
