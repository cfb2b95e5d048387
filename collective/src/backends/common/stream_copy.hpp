// A copy for results far larger than the caches (the shm backend's large
// reductions): it writes past them.
#pragma once

#include <cstddef>

namespace caf_collective::detail {

/// Copies `bytes` from `src` to `dst` with stores that bypass the caches
/// (x86-64: SSE2 non-temporal stores; elsewhere memcpy). For results far
/// larger than the caches: a plain store first reads the line it writes
/// (read for ownership), a third memory pass that a streaming store saves.
/// The stores are weakly ordered: call stream_fence() before another thread
/// may read `dst`.
void stream_copy(void* dst, const void* src, size_t bytes) noexcept;

/// Orders every stream_copy of this thread before its later stores.
void stream_fence() noexcept;

} // namespace caf_collective::detail
