// The polling loops of a clique: every wait of a step (the caller's work,
// a device slot, a launch, completion) and of formation polls its deadline
// and its abort or cancel flag, so no thread sits in a call it cannot
// leave, and an abort is seen within about a millisecond.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/nccl/nccl_clique.hpp"
#include "backends/nccl/nccl_poll.hpp"

namespace caf_collective::detail {

namespace {

std::string cuda_dev(int device) {
  return "cuda:" + std::to_string(device);
}

} // namespace

caf::error nccl_clique::wait_comms_ready(const error_context& where,
                                         steady_time deadline,
                                         const std::atomic<bool>* cancel,
                                         std::string_view phase) {
  backoff pace;
  for (;;) {
    bool ready = true;
    for (auto& slot : slots_) {
      if (slot.comm == nullptr) continue;
      ncclResult_t state = ncclSuccess;
      if (auto res = ncclCommGetAsyncError(slot.comm, &state);
          res != ncclSuccess)
        return nccl_error(where, "ncclCommGetAsyncError", res, slot.comm);
      if (state == ncclInProgress)
        ready = false;
      else if (state != ncclSuccess)
        return nccl_error(where, phase, state, slot.comm);
    }
    if (ready) return {};
    if (cancel != nullptr && cancel->load()) {
      if (cancel == &abort_requested_) return aborted_error(where);
      return make_error(errc::aborted, where,
                        std::string{phase} +
                          " was cancelled: the backend is aborted");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string text{phase};
      text += " did not finish in time (are all ranks up and calling it?); "
              "the communicator is aborted; NCCL state: ";
      text += nccl_text(ncclInProgress, slots_.front().comm);
      return make_error(errc::timeout, where, std::move(text));
    }
    pace.pause();
  }
}

caf::error nccl_clique::wait_callers_work(const nccl_step_ctx& ctx) {
  for (auto& slot : slots_) {
    device_guard dev{slot.device};
    if (dev.status() != cudaSuccess)
      return cuda_error(ctx.where, "cudaSetDevice", dev.status());
    if (auto err = cudaEventRecord(slot.ready, cudaStreamLegacy))
      return cuda_error(ctx.where, "cudaEventRecord (legacy default stream)",
                        err);
  }
  backoff pace;
  std::vector<char> ready(slots_.size(), 0);
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (ready[i]) continue;
      auto res = cudaEventQuery(slots_[i].ready);
      if (res == cudaSuccess)
        ready[i] = 1;
      else if (res == cudaErrorNotReady)
        all = false;
      else
        return cuda_error(ctx.where, "cudaEventQuery (legacy default stream)",
                          res);
    }
    if (all) return {};
    if (abort_requested_.load()) return aborted_error(ctx.where);
    if (std::chrono::steady_clock::now() >= ctx.deadline) {
      auto late = std::find(ready.begin(), ready.end(), 0) - ready.begin();
      return make_error(
        errc::timeout, ctx.where,
        "did not complete within " + ms_text(ctx.timeout) +
          ": it never started, because the work queued before it on the "
          "legacy default stream of " +
          cuda_dev(slots_[static_cast<size_t>(late)].device) +
          " did not finish; nothing was sent, but the peers may wait in "
          "the same operation, so NCCL communicator '" +
          spec_.label + "' is aborted");
    }
    pace.pause();
  }
}

caf::error nccl_clique::enter_gate(const nccl_step_ctx& ctx, gate_pass& pass) {
  auto& gate = device_gate::instance();
  backoff pace;
  for (;;) {
    if (pass.try_enter(gate, spec_.devices)) return {};
    if (abort_requested_.load()) return aborted_error(ctx.where);
    if (std::chrono::steady_clock::now() >= ctx.deadline)
      return make_error(
        errc::timeout, ctx.where,
        "did not complete within " + ms_text(ctx.timeout) +
          ": it never started, because " + std::to_string(gate.slots()) +
          " other NCCL operations of this process kept running on its "
          "device(s) (at most that many run on one device at once; see "
          "docs/gpu.md); NCCL communicator '" +
          spec_.label + "' is aborted");
    pace.pause();
  }
}

caf::error nccl_clique::wait_done(const nccl_step_ctx& ctx) {
  backoff pace;
  std::vector<char> done(slots_.size(), 0);
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (done[i]) continue;
      auto res = cudaEventQuery(slots_[i].done);
      if (res == cudaSuccess)
        done[i] = 1;
      else if (res == cudaErrorNotReady)
        all = false;
      else
        return cuda_error(ctx.where, "cudaEventQuery", res);
    }
    if (all) return {};
    // The watchdog part: NCCL reports a failed peer or network through the
    // communicator, not through the stream, which would just never finish.
    for (auto& slot : slots_) {
      ncclResult_t state = ncclSuccess;
      if (auto res = ncclCommGetAsyncError(slot.comm, &state);
          res != ncclSuccess)
        return nccl_error(ctx.where, "ncclCommGetAsyncError", res, slot.comm);
      if (state != ncclSuccess && state != ncclInProgress)
        return nccl_error(ctx.where, "the NCCL operation", state, slot.comm);
    }
    if (abort_requested_.load()) return aborted_error(ctx.where);
    if (std::chrono::steady_clock::now() >= ctx.deadline) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(slots_.front().comm, &state);
      return make_error(errc::timeout, ctx.where,
                        "did not complete within " + ms_text(ctx.timeout) +
                          " (a peer may not have called it, or is stuck or "
                          "gone); NCCL communicator '" +
                          spec_.label + "' is aborted; NCCL state: " +
                          nccl_text(state, slots_.front().comm));
    }
    pace.pause();
  }
}

} // namespace caf_collective::detail
