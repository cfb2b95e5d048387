// Teardown of cliques: a clean finalize where possible, an abort where not,
// and every wait bounded by one deadline shared by all cliques of a backend
// (its main communicator and its point-to-point ones finalize side by
// side, not one timeout after another).
#include <vector>

#include "vocabulary/log.hpp"
#include "backends/nccl/nccl_clique.hpp"
#include "backends/nccl/nccl_issue.hpp"
#include "backends/nccl/nccl_poll.hpp"

namespace caf_collective::detail {

namespace {

spdlog::logger& log() {
  static auto& instance = logger_for("nccl");
  return instance;
}

enum class finalize_state { pending, finalized, failed };

} // namespace

nccl_clique::~nccl_clique() {
  bool done = false;
  {
    std::lock_guard<std::mutex> guard{run_mtx_};
    done = torn_down_;
  }
  if (done) return;
  nccl_clique* self = this;
  shutdown({&self, 1},
           std::chrono::steady_clock::now() + spec_.teardown_timeout);
}

void nccl_clique::shutdown(std::span<nccl_clique* const> cliques,
                           steady_time deadline) {
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<nccl_clique*> todo;
  for (auto* clique : cliques) {
    if (clique == nullptr) continue;
    std::unique_lock<std::mutex> lock{clique->run_mtx_};
    if (clique->torn_down_) continue;
    locks.push_back(std::move(lock));
    todo.push_back(clique);
  }
  // 1. Every finalize is issued before any is waited for.
  std::vector<finalize_state> state(todo.size(), finalize_state::failed);
  for (size_t i = 0; i < todo.size(); ++i)
    if (todo[i]->begin_finalize()) state[i] = finalize_state::pending;
  // 2. One polling loop over all of them, one deadline.
  backoff pace;
  for (;;) {
    bool waiting = false;
    for (size_t i = 0; i < todo.size(); ++i) {
      if (state[i] != finalize_state::pending) continue;
      auto polled = todo[i]->poll_finalize();
      if (polled > 0)
        state[i] = finalize_state::finalized;
      else if (polled < 0)
        state[i] = finalize_state::failed;
      else
        waiting = true;
    }
    if (!waiting || std::chrono::steady_clock::now() >= deadline) break;
    pace.pause();
  }
  // 3. Destroy what finalized, abort the rest, free the memory.
  for (size_t i = 0; i < todo.size(); ++i) {
    if (state[i] == finalize_state::pending)
      log().warn("communicator '{}' did not finalize in time (are the peers "
                 "destroying their groups too?); aborting it instead",
                 todo[i]->spec_.label);
    todo[i]->finish_teardown(state[i] == finalize_state::finalized, deadline);
  }
}

bool nccl_clique::begin_finalize() {
  // An aborted or failed communicator has nothing to flush, and its peers
  // may be gone.
  if (!comms_alive_ || abort_requested_.load()) return false;
  auto body = [&]() -> caf::error {
    for (auto& slot : slots_) {
      if (slot.comm == nullptr) continue;
      device_guard dev{slot.device};
      auto res = ncclCommFinalize(slot.comm);
      if (res != ncclSuccess && res != ncclInProgress)
        return nccl_error({}, "ncclCommFinalize", res, slot.comm);
    }
    return {};
  };
  auto issued = issue_group({}, "ncclCommFinalize", slots_.front().comm, body);
  if (!issued.err) return true;
  log().warn("communicator '{}': {}; aborting it instead", spec_.label,
             render(issued.err));
  return false;
}

int nccl_clique::poll_finalize() {
  bool ready = true;
  for (auto& slot : slots_) {
    if (slot.comm == nullptr) continue;
    ncclResult_t state = ncclSuccess;
    auto res = ncclCommGetAsyncError(slot.comm, &state);
    if (res != ncclSuccess ||
        (state != ncclSuccess && state != ncclInProgress)) {
      log().warn("finalizing communicator '{}' failed: {}; aborting it",
                 spec_.label,
                 nccl_text(res != ncclSuccess ? res : state, slot.comm));
      return -1;
    }
    if (state == ncclInProgress) ready = false;
  }
  return ready ? 1 : 0;
}

void nccl_clique::finish_teardown(bool finalized, steady_time deadline) {
  if (finalized) {
    // Outside the issue mutex, like every call that may wait.
    for (auto& slot : slots_) {
      if (slot.comm == nullptr) continue;
      device_guard dev{slot.device};
      if (auto res = ncclCommDestroy(slot.comm); res != ncclSuccess)
        log().warn("ncclCommDestroy of '{}' failed: {}", spec_.label,
                   nccl_text(res, nullptr));
      slot.comm = nullptr;
    }
    comms_alive_ = false;
  } else {
    abort_comms_now_locked();
  }
  for (auto& slot : slots_) {
    device_guard dev{slot.device};
    release_scratch(slot);
    // The pinned staging goes back to the process's cache only once nothing
    // queued on our stream (a copy left behind by an aborted step) can
    // still write it; otherwise it is dropped. Never cudaFreeHost: it would
    // synchronize the device.
    if (slot.host.get() != nullptr && slot.stream != nullptr) {
      backoff pace;
      auto idle = cudaStreamQuery(slot.stream);
      while (idle == cudaErrorNotReady &&
             std::chrono::steady_clock::now() < deadline) {
        pace.pause();
        idle = cudaStreamQuery(slot.stream);
      }
      if (idle != cudaSuccess) slot.host.abandon();
    }
    slot.host.reset();
    // Only devices without memory pools get here; cudaFree synchronizes
    // the device, which the teardown can afford and an op cannot.
    for (auto* ptr : slot.retired_scratch)
      static_cast<void>(cudaFree(ptr));
    slot.retired_scratch.clear();
    if (slot.done != nullptr) cudaEventDestroy(slot.done);
    if (slot.ready != nullptr) cudaEventDestroy(slot.ready);
    // Returns at once; CUDA releases the stream when its work finished.
    if (slot.stream != nullptr) cudaStreamDestroy(slot.stream);
    slot.done = nullptr;
    slot.ready = nullptr;
    slot.stream = nullptr;
  }
  static_cast<void>(cudaGetLastError());
  torn_down_ = true;
}

} // namespace caf_collective::detail
