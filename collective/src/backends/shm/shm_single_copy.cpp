// shm backend: single copy across processes. A rank reads a peer's buffer
// straight from the peer's address space with process_vm_readv, instead of
// the peer copying it into the segment first (staged mode): one copy of
// every byte instead of two.
//
// The kernel may refuse it: Yama's ptrace_scope, processes of different
// credentials, a seccomp filter (containers). So at formation every rank
// reads every peer's probe word, publishes whether that worked, and the
// group uses single copy only if it worked for every rank; otherwise it
// stays with the staged copy. CAF_COLLECTIVE_SHM_SINGLE_COPY=off in any
// rank's environment forces the fallback (the tests compare both paths).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include <sys/uio.h>
#include <unistd.h>

#include "backends/shm/shm_backend.hpp"
#include "vocabulary/log.hpp"

namespace caf_collective::detail::shm {

namespace {

bool disabled_by_environment() {
  const char* env = std::getenv("CAF_COLLECTIVE_SHM_SINGLE_COPY");
  return env != nullptr && std::string_view{env} == "off";
}

// How long a rank whose read failed waits for the reason (the peer's death
// or abort) to become visible before it reports the bare system error.
constexpr auto reason_wait = std::chrono::seconds{1};

} // namespace

caf::error shm_backend::agree_on_single_copy(clock::time_point deadline) {
  std::string refusal; // why this rank cannot read its peers, if it cannot
  if (disabled_by_environment())
    refusal = "disabled by CAF_COLLECTIVE_SHM_SINGLE_COPY=off";
  for (int r = 0; r < world_size_ && refusal.empty(); ++r) {
    if (pids_[size_t(r)] == pids_[size_t(rank_)]) continue;
    uint64_t got = 0;
    iovec local{&got, sizeof(got)};
    iovec remote{reinterpret_cast<void*>(seg_.control(r).probe_addr),
                 sizeof(got)};
    auto n = process_vm_readv(pids_[size_t(r)], &local, 1, &remote, 1, 0);
    if (n < 0)
      refusal = "process_vm_readv of rank " + std::to_string(r) +
                "'s memory failed: " + std::strerror(errno);
    else if (n != sizeof(got) || got != probe_value(r))
      refusal = "process_vm_readv of rank " + std::to_string(r) +
                "'s memory read the wrong bytes";
  }
  seg_.control(rank_).cpus =
    static_cast<int32_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  seg_.control(rank_).single_copy_verdict.store(refusal.empty() ? 1 : 2,
                                                std::memory_order_release);
  ring();
  auto undecided = [this] {
    std::vector<int> result;
    for (int r = 0; r < world_size_; ++r)
      if (seg_.control(r).single_copy_verdict.load(std::memory_order_acquire) ==
          0)
        result.push_back(r);
    return result;
  };
  auto until = lazy_deadline::fixed(deadline);
  if (auto err = wait_until([&] { return undecided().empty(); }, undecided,
                            op_kind::barrier, nullptr, until))
    return err;
  std::vector<int> refused;
  for (int r = 0; r < world_size_; ++r)
    if (seg_.control(r).single_copy_verdict.load() != 1) refused.push_back(r);
  // Every rank takes the same count: the op's path depends on it.
  cpus_ = seg_.control(0).cpus;
  for (int r = 1; r < world_size_; ++r)
    cpus_ = std::min(cpus_, int(seg_.control(r).cpus));
  single_copy_ = refused.empty();
  auto& log = logger_for("shm");
  if (single_copy_) {
    // Reductions pull peers' blocks into scratch of this size.
    acc_.resize(16 * single_copy_block_elements);
    tmp_.resize(8 * single_copy_block_elements);
    pulled_.resize(8 * single_copy_block_elements);
    auto range = [this](op_kind op) {
      auto r = single_copy_range(op, world_size_, cpus_);
      return std::to_string(r.min) + "-" + std::to_string(r.max);
    };
    log.info("group '{}' rank {}/{}: ranks in several processes; messages "
             "move by single copy (process_vm_readv) at {} bytes for the "
             "other ops that copy, {} for allgather, {} for reduce_scatter, "
             "{} for reduce, staged otherwise and for allreduce",
             group_name_, rank_, world_size_, range(op_kind::broadcast),
             range(op_kind::allgather), range(op_kind::reduce_scatter),
             range(op_kind::reduce));
  } else {
    log.info("group '{}' rank {}/{}: ranks in several processes; messages "
             "move by staged copy through the segment (no single copy: "
             "ranks {} refused{}{})",
             group_name_, rank_, world_size_, list_ranks(refused),
             refusal.empty() ? "" : "; this rank: ", refusal);
  }
  return {};
}

caf::error shm_backend::copy_from(const op_state& st, int peer,
                                  const std::byte* from, std::byte* to,
                                  size_t bytes) {
  if (st.how != path::single_copy) {
    std::memcpy(to, from, bytes);
    return {};
  }
  return pull(st, peer, reinterpret_cast<uint64_t>(from), to, bytes);
}

caf::error shm_backend::pull(const op_state& st, int peer, uint64_t from,
                             std::byte* to, size_t bytes) {
  if (pids_[size_t(peer)] == pids_[size_t(rank_)]) {
    std::memcpy(to, reinterpret_cast<const std::byte*>(from), bytes);
    return {};
  }
  size_t done = 0;
  while (done < bytes) {
    iovec local{to + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(from + done), bytes - done};
    auto n = process_vm_readv(pids_[size_t(peer)], &local, 1, &remote, 1, 0);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    // ESRCH: the process is gone; EFAULT: its buffer is unmapped (it is
    // exiting, or it left the op and its caller freed the buffer). Name
    // the reason once it shows.
    auto code = n < 0 ? errno : EFAULT;
    auto until = clock::now() + reason_wait;
    for (;;) {
      if (auto err = failure_if_any(st.op, st.call, {peer}))
        return leave_after(std::move(err));
      if (clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
    return leave_after(
      make_error(errc::peer_lost, context(st.op, st.call),
                 "cannot read the buffer of rank " + std::to_string(peer) +
                   " (pid " + std::to_string(pids_[size_t(peer)]) +
                   "): process_vm_readv: " + std::strerror(code)));
  }
  return {};
}

} // namespace caf_collective::detail::shm
