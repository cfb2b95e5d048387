#include "nccl/nccl_clique.hpp"

#include <algorithm>
#include <thread>

#include "log.hpp"

namespace caf_collective::detail {

namespace {

using namespace std::chrono_literals;

spdlog::logger& log() {
  static auto& instance = logger_for("nccl");
  return instance;
}

/// Pacing of the polling loops: yield for the first 100 us, so a small
/// collective is seen within microseconds, then sleep with a growing
/// interval up to 1 ms, so a long one costs the lane thread almost no CPU
/// and an abort or a deadline is still noticed within about a millisecond.
class backoff {
 public:
  void pause() {
    auto spent = std::chrono::steady_clock::now() - start_;
    if (spent < 100us) {
      std::this_thread::yield();
      return;
    }
    sleep_ = std::min<std::chrono::microseconds>(
      sleep_ == 0us ? 10us : sleep_ * 2, 1000us);
    std::this_thread::sleep_for(sleep_);
  }

 private:
  steady_time start_ = std::chrono::steady_clock::now();
  std::chrono::microseconds sleep_{0};
};

std::string ms_text(milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

} // namespace

nccl_clique::nccl_clique(nccl_clique_spec spec) : spec_(std::move(spec)) {
  slots_.resize(spec_.devices.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].device = spec_.devices[i];
    slots_[i].rank = spec_.first_rank + static_cast<int>(i);
  }
}

caf::expected<std::unique_ptr<nccl_clique>>
nccl_clique::create(nccl_clique_spec spec, const error_context& where,
                    steady_time deadline, const std::atomic<bool>* cancel) {
  std::unique_ptr<nccl_clique> self{new nccl_clique(std::move(spec))};
  std::unique_lock<std::mutex> guard{self->run_mtx_};
  if (auto err = self->setup_slots(where)) return err;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: init and every later call return at once, so a missing
  // peer or an abort never pins the lane inside NCCL.
  config.blocking = 0;
  config.commName = self->spec_.label.c_str();
  caf::error init_err;
  ncclResult_t end = ncclSuccess;
  {
    std::lock_guard<std::mutex> issue{nccl_issue_mutex()};
    if (auto res = ncclGroupStart(); res != ncclSuccess)
      return nccl_error(where, "ncclGroupStart", res, nullptr);
    for (auto& slot : self->slots_) {
      device_guard dev{slot.device};
      auto res = ncclCommInitRankConfig(&slot.comm, self->spec_.nranks,
                                        self->spec_.id, slot.rank, &config);
      if (slot.comm != nullptr) self->comms_alive_ = true;
      if (res != ncclSuccess && res != ncclInProgress) {
        init_err = nccl_error(where,
                              "ncclCommInitRankConfig (rank " +
                                std::to_string(slot.rank) + " of " +
                                std::to_string(self->spec_.nranks) +
                                " on cuda:" + std::to_string(slot.device) + ")",
                              res, slot.comm);
        break;
      }
    }
    end = ncclGroupEnd();
  }
  if (!init_err && end != ncclSuccess && end != ncclInProgress)
    init_err = nccl_error(where, "ncclGroupEnd after ncclCommInitRankConfig",
                          end, self->slots_.front().comm);
  if (!init_err)
    init_err = self->wait_comms_ready(where, deadline, cancel,
                                      "forming NCCL communicator '" +
                                        self->spec_.label + "'");
  if (init_err) {
    self->abort_comms_locked();
    return init_err;
  }
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
  }
  return {};
}

nccl_clique::~nccl_clique() {
  std::lock_guard<std::mutex> guard{run_mtx_};
  teardown_locked();
}

void nccl_clique::teardown_locked() {
  if (comms_alive_ && !abort_requested_.load()) {
    // A clean finalize flushes and releases the communicators in step with
    // the peers; if that does not finish in time, abort instead of hanging
    // the member's shutdown.
    ncclResult_t end = ncclSuccess;
    {
      std::lock_guard<std::mutex> issue{nccl_issue_mutex()};
      ncclGroupStart();
      for (auto& slot : slots_)
        if (slot.comm != nullptr) ncclCommFinalize(slot.comm);
      end = ncclGroupEnd();
    }
    caf::error err;
    if (end != ncclSuccess && end != ncclInProgress)
      err = nccl_error({}, "ncclCommFinalize", end, slots_.front().comm);
    else
      err = wait_comms_ready(
        {}, std::chrono::steady_clock::now() + spec_.teardown_timeout, nullptr,
        "finalizing '" + spec_.label + "'");
    if (err) {
      log().warn("communicator '{}': {}; aborting it instead", spec_.label,
                 render(err));
      abort_comms_locked();
    } else {
      std::lock_guard<std::mutex> issue{nccl_issue_mutex()};
      for (auto& slot : slots_) {
        if (slot.comm == nullptr) continue;
        if (auto res = ncclCommDestroy(slot.comm); res != ncclSuccess)
          log().warn("ncclCommDestroy of '{}' failed: {}", spec_.label,
                     nccl_text(res, nullptr));
        slot.comm = nullptr;
      }
      comms_alive_ = false;
    }
  } else {
    abort_comms_locked();
  }
  for (auto& slot : slots_) {
    device_guard dev{slot.device};
    // After a finalize or an abort nothing of ours runs on the device, so
    // the frees below (some synchronize it) do not wait for long.
    free_scratch(slot);
    if (slot.host != nullptr) cudaFreeHost(slot.host);
    for (auto* ptr : slot.retired_host)
      cudaFreeHost(ptr);
    if (slot.done != nullptr) cudaEventDestroy(slot.done);
    if (slot.ready != nullptr) cudaEventDestroy(slot.ready);
    if (slot.stream != nullptr) cudaStreamDestroy(slot.stream);
    slot = nccl_slot{};
  }
  static_cast<void>(cudaGetLastError());
}

void nccl_clique::abort_comms_locked() {
  if (!comms_alive_) return;
  comms_alive_ = false;
  std::lock_guard<std::mutex> issue{nccl_issue_mutex()};
  for (auto& slot : slots_) {
    if (slot.comm == nullptr) continue;
    device_guard dev{slot.device};
    // Stops the kernels still running on the communicator, so the
    // operations' buffers are no longer touched once this returns.
    if (auto res = ncclCommAbort(slot.comm); res != ncclSuccess)
      log().warn("ncclCommAbort of '{}' failed: {}", spec_.label,
                 nccl_text(res, nullptr));
    slot.comm = nullptr;
  }
  log().info("communicator '{}' aborted", spec_.label);
}

caf::error nccl_clique::reserve_scratch(size_t index, size_t bytes,
                                        const error_context& where) {
  auto& slot = slots_[index];
  if (slot.scratch_bytes >= bytes) return {};
  // Grow geometrically: fresh device memory is costly, and a sequence of
  // slowly growing calls should not reallocate every time.
  auto wanted = std::max(bytes, slot.scratch_bytes * 2);
  device_guard dev{slot.device};
  free_scratch(slot);
  // Stream ordered: later steps on this stream see the memory, and no
  // device-wide synchronization happens on the way.
  auto err = cudaMallocAsync(&slot.scratch, wanted, slot.stream);
  slot.scratch_async = err == cudaSuccess;
  if (err == cudaErrorNotSupported) {
    static_cast<void>(cudaGetLastError());
    err = cudaMalloc(&slot.scratch, wanted);
  }
  if (err != cudaSuccess) {
    slot.scratch = nullptr;
    return cuda_error(
      where,
      "allocating " + std::to_string(wanted) +
        " bytes of NCCL scratch on cuda:" + std::to_string(slot.device),
      err);
  }
  slot.scratch_bytes = wanted;
  return {};
}

void nccl_clique::free_scratch(nccl_slot& slot) {
  if (slot.scratch == nullptr) return;
  if (slot.scratch_async)
    cudaFreeAsync(slot.scratch, slot.stream);
  else
    cudaFree(slot.scratch);
  slot.scratch = nullptr;
  slot.scratch_bytes = 0;
}

caf::error nccl_clique::reserve_host(size_t index, size_t bytes,
                                     const error_context& where) {
  auto& slot = slots_[index];
  if (slot.host_bytes >= bytes) return {};
  auto wanted = std::max(bytes, slot.host_bytes * 2);
  device_guard dev{slot.device};
  if (slot.host != nullptr) {
    slot.retired_host.push_back(slot.host);
    slot.host = nullptr;
    slot.host_bytes = 0;
  }
  if (auto err = cudaHostAlloc(&slot.host, wanted, cudaHostAllocDefault);
      err != cudaSuccess)
    return cuda_error(where,
                      "cudaHostAlloc of " + std::to_string(wanted) +
                        " bytes of pinned staging memory",
                      err);
  slot.host_bytes = wanted;
  return {};
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
                        std::string{phase} + " was cancelled");
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

caf::error nccl_clique::run(const nccl_step_ctx& ctx, enqueue_ref enqueue) {
  std::lock_guard<std::mutex> guard{run_mtx_};
  if (abort_requested_.load() || !comms_alive_) {
    abort_comms_locked();
    return aborted_error(ctx.where);
  }
  for (auto& slot : slots_) {
    device_guard dev{slot.device};
    if (dev.status() != cudaSuccess)
      return fail(cuda_error(ctx.where, "cudaSetDevice", dev.status()));
    if (auto err = cudaEventRecord(slot.ready, cudaStreamLegacy))
      return fail(cuda_error(ctx.where, "cudaEventRecord", err));
    if (auto err = cudaStreamWaitEvent(slot.stream, slot.ready, 0))
      return fail(cuda_error(ctx.where, "cudaStreamWaitEvent", err));
  }
  caf::error enqueue_err;
  ncclResult_t end = ncclSuccess;
  {
    std::lock_guard<std::mutex> issue{nccl_issue_mutex()};
    if (auto res = ncclGroupStart(); res != ncclSuccess)
      return fail(nccl_error(ctx.where, "ncclGroupStart", res, nullptr));
    for (size_t i = 0; i < slots_.size() && !enqueue_err; ++i) {
      device_guard dev{slots_[i].device};
      enqueue_err = enqueue(slots_[i], i);
    }
    // Always closed, even after a failed enqueue: an open group would
    // swallow the next step's calls.
    end = ncclGroupEnd();
  }
  if (enqueue_err) return fail(std::move(enqueue_err));
  if (end != ncclSuccess && end != ncclInProgress)
    return fail(
      nccl_error(ctx.where, "ncclGroupEnd", end, slots_.front().comm));
  if (end == ncclInProgress)
    if (auto err = wait_comms_ready(ctx.where, ctx.deadline, &abort_requested_,
                                    "launching the NCCL operation"))
      return fail(std::move(err));
  for (auto& slot : slots_) {
    device_guard dev{slot.device};
    if (auto err = cudaEventRecord(slot.done, slot.stream))
      return fail(cuda_error(ctx.where, "cudaEventRecord", err));
  }
  if (auto err = wait_done(ctx)) return fail(std::move(err));
  return {};
}

} // namespace caf_collective::detail
