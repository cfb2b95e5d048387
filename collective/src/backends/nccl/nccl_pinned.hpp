// Pinned host memory for the backend's staging (integer avg, p2p headers),
// reused for the life of the process.
//
// cudaHostAlloc and cudaFreeHost synchronize with the device, and
// cudaFreeHost waits for every kernel on it, another group's hung one
// included. So the backend never frees pinned memory: a block given back
// waits here for the next request of its size class (a power of two, at
// least 4 KiB), as PyTorch's pinned-memory cache does. The memory held is
// bounded by the most staging this process ever used at once.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include <cuda_runtime.h>

namespace caf_collective::detail {

class pinned_cache;

/// One block, handed back to its cache on destruction.
class pinned_block {
 public:
  pinned_block() = default;

  pinned_block(pinned_cache* cache, void* ptr, size_t bytes) noexcept
    : cache_(cache), ptr_(ptr), bytes_(bytes) {
    // nop
  }

  pinned_block(pinned_block&& other) noexcept;
  pinned_block& operator=(pinned_block&& other) noexcept;
  ~pinned_block() { reset(); }

  void* get() const noexcept { return ptr_; }

  /// The usable size: the size class, at least what was asked for.
  size_t size() const noexcept { return bytes_; }

  void reset() noexcept;

  /// Drops the block without handing it back: for memory a copy that was
  /// never waited for may still write.
  void abandon() noexcept;

 private:
  pinned_cache* cache_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class pinned_cache {
 public:
  /// Allocates pinned memory: cudaHostAlloc for the process's cache, plain
  /// memory in tests.
  using allocator = cudaError_t (*)(void** ptr, size_t bytes);

  /// Frees the cached blocks of a cache that is destroyed (tests only).
  using deallocator = void (*)(void* ptr);

  explicit pinned_cache(allocator alloc, deallocator dealloc = nullptr)
    : alloc_(alloc), dealloc_(dealloc) {
    // nop
  }

  ~pinned_cache();

  pinned_cache(const pinned_cache&) = delete;
  pinned_cache& operator=(const pinned_cache&) = delete;

  /// Never destroyed: blocks may be given back during static destruction,
  /// and freeing pinned memory then could synchronize a device in use.
  static pinned_cache& instance();

  /// A block of at least `bytes`: a cached one of its class, else a new one.
  cudaError_t take(size_t bytes, pinned_block& out);

  /// Blocks of `size_class` bytes waiting for reuse.
  size_t cached(size_t size_class) const;

  static size_t size_class(size_t bytes) noexcept;

 private:
  friend class pinned_block;

  void give_back(void* ptr, size_t size_class) noexcept;

  allocator alloc_;
  deallocator dealloc_;
  mutable std::mutex mtx_;
  std::multimap<size_t, void*> free_; // guarded by mtx_
};

} // namespace caf_collective::detail
