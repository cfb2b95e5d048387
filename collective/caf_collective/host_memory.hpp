// The cache of large host blocks behind tensor::empty and every output the
// library allocates. Touching fresh pages is slow (about 0.7 GB/s on the
// development machines, docs/benchmarks.md, "Recycled host blocks"): a 32 MiB
// output costs ~45 ms the first time and ~3 ms when its pages are reused. Freed
// blocks of 64 KiB and more are therefore kept (up to a capacity) and handed
// out again.
#pragma once

#include <cstddef>

namespace caf_collective {

/// Bytes of freed host blocks the cache may keep (default 512 MiB, or
/// $CAF_COLLECTIVE_HOST_CACHE_MB). 0 turns caching off; shrinking frees
/// what no longer fits.
void set_host_cache_capacity(size_t bytes);

size_t host_cache_capacity();

/// Bytes currently held in the cache (not in use by any tensor).
size_t host_cache_bytes();

/// Returns every cached block to the system.
void trim_host_cache();

} // namespace caf_collective
