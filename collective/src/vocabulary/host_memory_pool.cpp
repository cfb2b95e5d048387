#include "vocabulary/host_memory_pool.hpp"

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "caf_collective/error.hpp"
#include "caf_collective/host_memory.hpp"
#include "vocabulary/log.hpp"
#include "vocabulary/parse_number.hpp"

namespace caf_collective::detail {

namespace {

// 64-byte alignment keeps vectorized reductions on full cache lines.
constexpr size_t alignment = 64;

// Below this size blocks come from the heap, which reuses them anyway;
// above it glibc maps fresh pages for every allocation.
constexpr size_t min_cached = size_t{64} << 10;

size_t default_capacity() {
  constexpr size_t fallback = size_t{512} << 20;
  const char* env = std::getenv("CAF_COLLECTIVE_HOST_CACHE_MB");
  if (env == nullptr || *env == '\0') return fallback;
  // Strict: a typo must not turn the cache off unnoticed (strtoull read it
  // as 0).
  auto mb = parse_non_negative<size_t>(env);
  if (mb && *mb <= (SIZE_MAX >> 20)) return *mb << 20;
  logger_for("memory").warn("CAF_COLLECTIVE_HOST_CACHE_MB='{}' is not a "
                            "number of MiB >= 0; using {}",
                            env, fallback >> 20);
  return fallback;
}

// Rounds up to one of four classes per power of two (2^k * 1, 1.25, 1.5,
// 1.75), so that similar sizes share blocks and at most 25% is wasted.
size_t size_class(size_t bytes) {
  auto top = std::bit_floor(bytes);
  auto step = top / 4;
  return (bytes + step - 1) / step * step;
}

class pool {
 public:
  static pool& instance() {
    // Never destroyed: tensors in static objects may free blocks after
    // every other static is gone.
    static auto* self = new pool;
    return *self;
  }

  void* take(size_t cls) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = free_.find(cls);
    if (i == free_.end() || i->second.empty()) return nullptr;
    auto* ptr = i->second.back();
    i->second.pop_back();
    cached_ -= cls;
    return ptr;
  }

  void give_back(void* ptr, size_t cls) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (cached_ + cls <= capacity_) {
        free_[cls].push_back(ptr);
        cached_ += cls;
        return;
      }
    }
    std::free(ptr);
  }

  void set_capacity(size_t bytes) {
    std::unique_lock<std::mutex> guard{mtx_};
    capacity_ = bytes;
    shrink_to(capacity_, guard);
  }

  void trim() {
    std::unique_lock<std::mutex> guard{mtx_};
    shrink_to(0, guard);
  }

  size_t capacity() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return capacity_;
  }

  size_t cached() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return cached_;
  }

 private:
  pool() : capacity_(default_capacity()) {}

  // Frees cached blocks, largest first (the most expensive to keep), until
  // at most `limit` bytes stay cached. Releases the lock before freeing.
  void shrink_to(size_t limit, std::unique_lock<std::mutex>& guard) {
    std::vector<void*> surplus;
    for (auto i = free_.rbegin(); i != free_.rend() && cached_ > limit; ++i) {
      while (!i->second.empty() && cached_ > limit) {
        surplus.push_back(i->second.back());
        i->second.pop_back();
        cached_ -= i->first;
      }
    }
    guard.unlock();
    for (auto* ptr : surplus)
      std::free(ptr);
  }

  mutable std::mutex mtx_;
  std::map<size_t, std::vector<void*>> free_; // by size class, LIFO
  size_t cached_ = 0;
  size_t capacity_;
};

} // namespace

caf::expected<std::shared_ptr<void>> allocate_host_block(size_t bytes) {
  auto no_memory = [bytes] {
    return make_error(errc::out_of_memory, "cannot allocate " +
                                             std::to_string(bytes) +
                                             " bytes of host memory");
  };
  // Rounding up to a size class must not wrap around.
  if (bytes > SIZE_MAX / 2) return no_memory();
  if (bytes < min_cached) {
    auto rounded = (bytes + alignment - 1) / alignment * alignment;
    void* ptr =
      std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
    if (ptr == nullptr) return no_memory();
    return std::shared_ptr<void>{ptr, [](void* p) { std::free(p); }};
  }
  auto cls = size_class(bytes);
  auto& p = pool::instance();
  void* ptr = p.take(cls);
  if (ptr == nullptr) ptr = std::aligned_alloc(alignment, cls);
  if (ptr == nullptr) {
    // Out of memory: cached blocks of other sizes may make room.
    p.trim();
    ptr = std::aligned_alloc(alignment, cls);
    if (ptr == nullptr) return no_memory();
  }
  return std::shared_ptr<void>{
    ptr, [cls](void* q) { pool::instance().give_back(q, cls); }};
}

} // namespace caf_collective::detail

namespace caf_collective {

void set_host_cache_capacity(size_t bytes) {
  detail::pool::instance().set_capacity(bytes);
}

size_t host_cache_capacity() {
  return detail::pool::instance().capacity();
}

size_t host_cache_bytes() {
  return detail::pool::instance().cached();
}

void trim_host_cache() {
  detail::pool::instance().trim();
}

} // namespace caf_collective
