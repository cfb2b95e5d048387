// ThreadSanitizer annotations of the shm backend's synchronization.
//
// Each rank maps the group's segment itself, so ranks of one process see
// the same flags at different addresses, and TSan, which tracks memory by
// address, never links a rank's release of its epoch with a peer's acquire
// of it: every read of a peer's buffer after a sync step looked like a race
// (docs/sanitizers.md). The backend therefore also tells TSan about each
// publication and observation, on one address per rank that all ranks of
// the process agree on and that outlives every rank's backend: the rank's
// record in the group's arrival hub (arrival_hub::sync_key). Outside TSan
// builds these are no-ops.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define CAF_COLLECTIVE_SHM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CAF_COLLECTIVE_SHM_TSAN 1
#endif
#endif

#ifdef CAF_COLLECTIVE_SHM_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace caf_collective::detail::shm {

/// What this thread wrote so far happens before what a thread that calls
/// tsan_acquire(key) afterwards reads.
inline void tsan_release([[maybe_unused]] const void* key) noexcept {
#ifdef CAF_COLLECTIVE_SHM_TSAN
  __tsan_release(const_cast<void*>(key));
#endif
}

inline void tsan_acquire([[maybe_unused]] const void* key) noexcept {
#ifdef CAF_COLLECTIVE_SHM_TSAN
  __tsan_acquire(const_cast<void*>(key));
#endif
}

} // namespace caf_collective::detail::shm
