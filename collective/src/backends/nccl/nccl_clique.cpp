#include "backends/nccl/nccl_clique.hpp"

#include <algorithm>

#include "backends/nccl/nccl_issue.hpp"
#include "vocabulary/log.hpp"

namespace caf_collective::detail {

namespace {

spdlog::logger& log() {
  static auto& instance = logger_for("nccl");
  return instance;
}

std::string cuda_dev(int device) {
  return "cuda:" + std::to_string(device);
}

} // namespace

nccl_clique::nccl_clique(nccl_clique_spec spec) : spec_(std::move(spec)) {
  slots_.resize(spec_.devices.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].device = spec_.devices[i];
    slots_[i].rank = spec_.first_rank + static_cast<int>(i);
  }
}

const nccl_newer_calls& nccl_clique::calls() const noexcept {
  return loaded_nccl().calls;
}

caf::expected<std::unique_ptr<nccl_clique>>
nccl_clique::create(nccl_clique_spec spec, const error_context& where,
                    steady_time deadline, const std::atomic<bool>* cancel) {
  if (auto err = check_nccl_version(loaded_nccl().version, where)) return err;
  std::unique_ptr<nccl_clique> self{new nccl_clique(std::move(spec))};
  self->paths_ = paths_for_new_communicators();
  std::unique_lock<std::mutex> guard{self->run_mtx_};
  auto err = self->setup_slots(where);
  if (!err) err = self->init_comms(where);
  if (!err)
    err = self->wait_comms_ready(where, deadline, cancel,
                                 "forming NCCL communicator '" +
                                   self->spec_.label + "'");
  if (err) {
    self->abort_comms_now_locked(); // NCCL's init may still be running
    return err;
  }
  self->nccl_work_pending_ = false;
  guard.unlock();
  log().debug("communicator '{}' ready: {} local rank(s) of {}",
              self->spec_.label, self->slots_.size(), self->spec_.nranks);
  return self;
}

caf::error nccl_clique::setup_slots(const error_context& where) {
  for (auto& slot : slots_) {
    device_guard dev{slot.device};
    if (dev.status() != cudaSuccess)
      return cuda_error(where,
                        "cudaSetDevice(" + std::to_string(slot.device) + ")",
                        dev.status());
    if (auto err =
          cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking))
      return cuda_error(where, "cudaStreamCreateWithFlags", err);
    // Timing off: these events only order and signal, which is cheaper.
    if (auto err =
          cudaEventCreateWithFlags(&slot.ready, cudaEventDisableTiming))
      return cuda_error(where, "cudaEventCreateWithFlags", err);
    if (auto err = cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming))
      return cuda_error(where, "cudaEventCreateWithFlags", err);
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported,
                               slot.device) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      pools = 0;
    }
    slot.pools = pools != 0;
  }
  return {};
}

caf::error nccl_clique::init_comms(const error_context& where) {
  // One config per slot: the CTA budget depends on the device.
  std::vector<ncclConfig_t> configs(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    // Non-blocking: init and every later call return at once, so a missing
    // peer or an abort never pins a thread inside NCCL.
    config.blocking = 0;
    config.commName = spec_.label.c_str();
    // The device gate's half of the bargain: the kernels of all slots of a
    // device fit on it together (nccl_device_gate.hpp).
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
                               slots_[i].device) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      sms = 0;
    }
    config.maxCTAs = ctas_per_communicator(sms);
    configs[i] = config;
  }
  caf::error init_err;
  auto body = [&]() -> caf::error {
    for (size_t i = 0; i < slots_.size(); ++i) {
      auto& slot = slots_[i];
      device_guard dev{slot.device};
      auto res = ncclCommInitRankConfig(&slot.comm, spec_.nranks, spec_.id,
                                        slot.rank, &configs[i]);
      if (slot.comm != nullptr) comms_alive_ = true;
      if (res != ncclSuccess && res != ncclInProgress)
        return nccl_error(
          where,
          "ncclCommInitRankConfig (rank " + std::to_string(slot.rank) + " of " +
            std::to_string(spec_.nranks) + " on " + cuda_dev(slot.device) + ")",
          res, slot.comm);
    }
    return {};
  };
  // The outcome's pending flag needs no handling: wait_comms_ready polls
  // every communicator until it is ready either way.
  return issue_group(where, "ncclCommInitRankConfig", nullptr, body).err;
}

caf::error nccl_clique::aborted_error(const error_context& where) const {
  std::string reason;
  {
    std::lock_guard<std::mutex> guard{reason_mtx_};
    reason = abort_reason_;
  }
  return make_error(errc::aborted, where,
                    "NCCL communicator '" + spec_.label +
                      "' is aborted: " + (reason.empty() ? "?" : reason));
}

caf::error nccl_clique::fail(caf::error err) {
  {
    std::lock_guard<std::mutex> guard{reason_mtx_};
    if (abort_reason_.empty())
      abort_reason_ = "an earlier operation failed: " + render(err);
  }
  abort_requested_ = true;
  abort_comms_locked();
  return err;
}

void nccl_clique::abort(std::string_view why) {
  {
    std::lock_guard<std::mutex> guard{reason_mtx_};
    if (abort_reason_.empty()) abort_reason_ = std::string{why};
  }
  abort_requested_ = true;
  // A running step sees the flag within a polling round, aborts and
  // returns; waiting for it here keeps the promise that the buffers are
  // free once abort() returns.
  std::lock_guard<std::mutex> guard{run_mtx_};
  abort_comms_locked();
}

void nccl_clique::abort_comms_locked() {
  if (!comms_alive_) return;
  comms_alive_ = false;
  // Nothing of ours is queued on the communicators (the step failed before
  // it issued, or the clique sat idle): no kernel can touch a buffer, so
  // the communicators may wait for the teardown. ncclCommAbort frees
  // device memory, and that waits for all work on the device, the caller's
  // legacy-stream work included: a step that timed out behind a host
  // function there returned only once that function did (seen on an
  // H100: 30 s instead of 300 ms). Only work in flight must be stopped now.
  if (!nccl_work_pending_) {
    log().info("communicator '{}' stopped with nothing in flight; aborted "
               "at teardown",
               spec_.label);
    return;
  }
  abort_comms_now_locked();
}

void nccl_clique::abort_comms_now_locked() {
  comms_alive_ = false;
  bool any = false;
  // Outside the issue mutex: ncclCommAbort waits for NCCL's streams and
  // threads, and other communicators must keep issuing meanwhile.
  for (auto& slot : slots_) {
    if (slot.comm == nullptr) continue;
    any = true;
    device_guard dev{slot.device};
    // Stops the kernels still running on the communicator, so the
    // operations' buffers are no longer touched once this returns.
    if (auto res = ncclCommAbort(slot.comm); res != ncclSuccess)
      log().warn("ncclCommAbort of '{}' failed: {}", spec_.label,
                 nccl_text(res, nullptr));
    slot.comm = nullptr;
  }
  nccl_work_pending_ = false;
  if (any) log().info("communicator '{}' aborted", spec_.label);
}

caf::error nccl_clique::run(const nccl_step_ctx& ctx, enqueue_ref enqueue,
                            enqueue_ref after) {
  std::lock_guard<std::mutex> guard{run_mtx_};
  if (abort_requested_.load() || !comms_alive_) {
    abort_comms_locked();
    return aborted_error(ctx.where);
  }
  if (auto err = wait_callers_work(ctx)) return fail(std::move(err));
  // Declared before every fail() below: the slots go back only after an
  // abort stopped the kernels.
  gate_pass pass;
  if (auto err = enter_gate(ctx, pass)) return fail(std::move(err));
  auto body = [&]() -> caf::error {
    for (size_t i = 0; i < slots_.size(); ++i) {
      device_guard dev{slots_[i].device};
      if (auto err = enqueue(slots_[i], i)) return err;
    }
    return {};
  };
  // issue_group reports after releasing the issue mutex, so fail() below
  // never runs with it held.
  nccl_work_pending_ = true;
  issue_outcome issued;
  try {
    issued =
      issue_group(ctx.where, "the NCCL operation", slots_.front().comm, body);
  } catch (const std::exception& ex) {
    // Part of the op may be queued on the communicators: abort them, as
    // for any failure here, instead of leaving the unwinding to the group.
    return fail(make_error(errc::backend_error, ctx.where,
                           std::string{"issuing the NCCL operation threw: "} +
                             ex.what()));
  }
  if (issued.err) return fail(std::move(issued.err));
  if (issued.pending)
    if (auto err = wait_comms_ready(ctx.where, ctx.deadline, &abort_requested_,
                                    "launching the NCCL operation"))
      return fail(std::move(err));
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto& slot = slots_[i];
    device_guard dev{slot.device};
    if (after)
      if (auto err = after(slot, i)) return fail(std::move(err));
    if (auto err = cudaEventRecord(slot.done, slot.stream))
      return fail(cuda_error(ctx.where, "cudaEventRecord", err));
  }
  if (auto err = wait_done(ctx)) return fail(std::move(err));
  nccl_work_pending_ = false;
  return {};
}

} // namespace caf_collective::detail
