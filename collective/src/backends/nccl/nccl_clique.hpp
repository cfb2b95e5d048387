// One member's part of one NCCL communicator: one NCCL rank per CUDA device
// the member drives (one for a group member, several for a multigpu_group),
// each with its own communicator handle, non-blocking stream and events.
// Every NCCL operation of this library runs as steps of a clique, so the
// single-device backend and the multi-GPU API share one code path.
//
// Lifetime: create() forms the communicators (non-blocking, with a
// deadline and a cancel flag); run() executes one step; abort() may come
// from any thread; shutdown() (or the destructor) finalizes the
// communicators, or aborts them when they failed or peers may be gone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/options.hpp"
#include "backends/nccl/nccl_device_gate.hpp"
#include "backends/nccl/nccl_pinned.hpp"
#include "backends/nccl/nccl_util.hpp"
#include "backends/nccl/nccl_version.hpp"

namespace caf_collective::detail {

/// One NCCL rank driven by this member.
struct nccl_slot {
  int device = 0;
  /// Rank in the NCCL communicator (not the group rank for multi-GPU).
  int rank = 0;
  ncclComm_t comm = nullptr;
  /// Our own non-blocking stream: NCCL kernels never queue behind the
  /// caller's work on other streams, and never chain NCCL to it.
  cudaStream_t stream = nullptr;
  /// Recorded on the legacy default stream before a step and polled on the
  /// host: a step enqueues nothing before the caller's work there (and on
  /// blocking streams) finished. A device-side wait would chain NCCL's
  /// kernels to the caller's work, and a step could not be stopped before
  /// that work finished. (ncclCommAbort itself waits for all work on the
  /// device when it frees memory, so a clique with nothing in flight
  /// leaves its abort to the teardown: see abort_comms_locked.)
  cudaEvent_t ready = nullptr;
  /// Recorded on `stream` after a step; polled for completion.
  cudaEvent_t done = nullptr;
  /// Device scratch (barrier, integer avg, p2p headers), reused and grown,
  /// stream ordered (cudaMallocAsync/cudaFreeAsync on `stream`): cudaFree
  /// would synchronize the whole device, a hung kernel of another group
  /// included. A device without memory pools gets cudaMalloc instead, and
  /// its outgrown blocks wait in `retired_scratch` for the teardown.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  bool pools = false;
  std::vector<void*> retired_scratch;
  /// Pinned host staging from the process's cache, reused and grown:
  /// pinned so that copies stay asynchronous inside the issue section.
  pinned_block host;
};

/// What the members of one communicator agree on.
struct nccl_clique_spec {
  /// Names the communicator in errors and NCCL's logs, e.g. "g" or
  /// "g p2p 0->1".
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
/// a step: caf::error(nccl_slot&, size_t slot_index). May be empty.
class enqueue_ref {
 public:
  enqueue_ref() = default;

  template<class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, enqueue_ref>)
    enqueue_ref(F& fn) noexcept // NOLINT: implicit by design
    : obj_(&fn), call_([](void* obj, nccl_slot& slot, size_t index) {
        return (*static_cast<F*>(obj))(slot, index);
      }) {
    // nop
  }

  explicit operator bool() const noexcept { return call_ != nullptr; }

  caf::error operator()(nccl_slot& slot, size_t index) const {
    return call_(obj_, slot, index);
  }

 private:
  void* obj_ = nullptr;
  caf::error (*call_)(void*, nccl_slot&, size_t) = nullptr;
};

class nccl_clique {
 public:
  /// Creates every slot's communicator inside one NCCL group call (NCCL
  /// needs that when one thread drives several ranks) and polls until all
  /// are ready. Fails with unsupported for an NCCL older than the minimum,
  /// with timeout at `deadline`, with aborted as soon as `*cancel` becomes
  /// true (the communicators are aborted in both cases), backend_error
  /// otherwise.
  static caf::expected<std::unique_ptr<nccl_clique>>
  create(nccl_clique_spec spec, const error_context& where,
         steady_time deadline, const std::atomic<bool>* cancel = nullptr);

  /// Finalizes (or aborts) the communicators of all `cliques` at once, all
  /// waits bounded by the one `deadline`; those not finalized by then are
  /// aborted. Their destructors then only free memory. No step may run.
  static void shutdown(std::span<nccl_clique* const> cliques,
                       steady_time deadline);

  ~nccl_clique();

  nccl_clique(const nccl_clique&) = delete;
  nccl_clique& operator=(const nccl_clique&) = delete;

  const std::string& label() const noexcept { return spec_.label; }

  int nranks() const noexcept { return spec_.nranks; }

  size_t size() const noexcept { return slots_.size(); }

  nccl_slot& slot(size_t index) noexcept { return slots_[index]; }

  /// Native or grouped send/recv, fixed at formation (nccl_version.hpp).
  const nccl_paths& paths() const noexcept { return paths_; }

  /// The calls newer than NCCL's minimum, null where the paths avoid them.
  const nccl_newer_calls& calls() const noexcept;

  /// Grows slot `index`'s device scratch to at least `bytes`; only between
  /// steps. Fails with aborted on an aborted clique.
  caf::error reserve_scratch(size_t index, size_t bytes,
                             const error_context& where);

  /// Grows slot `index`'s pinned host staging to at least `bytes`; only
  /// between steps. Fails with aborted on an aborted clique.
  caf::error reserve_host(size_t index, size_t bytes,
                          const error_context& where);

  /// Runs one step on every slot and returns when it completed on all of
  /// them:
  /// 1. the caller's legacy-stream work is waited for on the host;
  /// 2. a slot of the device gate is taken on every device
  ///    (nccl_device_gate.hpp);
  /// 3. `enqueue` runs for every slot inside one issue_group (CUDA copies
  ///    it enqueues run before the NCCL calls);
  /// 4. a pending non-blocking group end is polled to completion;
  /// 5. `after` (if any) enqueues on every slot's stream, behind the NCCL
  ///    kernels; `done` is recorded and polled.
  /// Every wait polls the deadline and the abort flag. Any failure aborts
  /// the communicators: the peers may be stuck in the same step, and NCCL
  /// cannot resume a half-done group.
  caf::error run(const nccl_step_ctx& ctx, enqueue_ref enqueue,
                 enqueue_ref after = {});

  /// Makes a running step stop and fail with errc::aborted, aborts the
  /// communicators and fails every later step. Safe from any thread;
  /// returns after the running step (if any) has let go of its buffers.
  void abort(std::string_view why);

  bool aborted() const noexcept { return abort_requested_.load(); }

 private:
  explicit nccl_clique(nccl_clique_spec spec);

  // The members below expect run_mtx_ held.
  caf::error setup_slots(const error_context& where);
  caf::error init_comms(const error_context& where);
  caf::error wait_comms_ready(const error_context& where, steady_time deadline,
                              const std::atomic<bool>* cancel,
                              std::string_view phase);
  caf::error wait_callers_work(const nccl_step_ctx& ctx);
  caf::error enter_gate(const nccl_step_ctx& ctx, gate_pass& pass);
  caf::error wait_done(const nccl_step_ctx& ctx);
  caf::error aborted_error(const error_context& where) const;
  caf::error fail(caf::error err);
  /// fail() for an op that stopped on this rank before it issued anything
  /// (an allocation): says that the communicator went with it.
  caf::error fail_unissued(caf::error err);
  /// Stops the communicators for good: aborts them now when NCCL work of
  /// ours may be in flight, else leaves the abort to the teardown (it
  /// would wait for the caller's work on the device).
  void abort_comms_locked();
  /// Aborts every communicator still held, whatever is in flight.
  void abort_comms_now_locked();
  // Teardown phases (nccl_teardown.cpp).
  bool begin_finalize();
  int poll_finalize();
  void finish_teardown(bool finalized, steady_time deadline);
  static void release_scratch(nccl_slot& slot);

  nccl_clique_spec spec_;
  std::vector<nccl_slot> slots_;
  nccl_paths paths_;
  // Held by a running step, by abort() and by the teardown: a step and an
  // abort never use the communicators at the same time, and abort() waits
  // for the step.
  std::mutex run_mtx_;
  bool comms_alive_ = false; // guarded by run_mtx_
  bool torn_down_ = false;   // guarded by run_mtx_
  // Guarded by run_mtx_: NCCL work of ours may still run (an init or a
  // step issued and not seen complete). True from the start: formation's
  // init is such work.
  bool nccl_work_pending_ = true;
  std::atomic<bool> abort_requested_{false};
  mutable std::mutex reason_mtx_;
  std::string abort_reason_; // guarded by reason_mtx_
};

} // namespace caf_collective::detail
