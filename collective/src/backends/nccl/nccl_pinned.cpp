#include "backends/nccl/nccl_pinned.hpp"

#include <bit>
#include <utility>

namespace caf_collective::detail {

pinned_block::pinned_block(pinned_block&& other) noexcept
  : cache_(std::exchange(other.cache_, nullptr)),
    ptr_(std::exchange(other.ptr_, nullptr)),
    bytes_(std::exchange(other.bytes_, 0)) {
  // nop
}

pinned_block& pinned_block::operator=(pinned_block&& other) noexcept {
  if (this != &other) {
    reset();
    cache_ = std::exchange(other.cache_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void pinned_block::reset() noexcept {
  if (cache_ != nullptr && ptr_ != nullptr) cache_->give_back(ptr_, bytes_);
  cache_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

void pinned_block::abandon() noexcept {
  cache_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

pinned_cache::~pinned_cache() {
  if (dealloc_ == nullptr) return;
  for (auto& [size, ptr] : free_)
    dealloc_(ptr);
}

pinned_cache& pinned_cache::instance() {
  static auto* cache = new pinned_cache([](void** ptr, size_t bytes) {
    return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
  });
  return *cache;
}

size_t pinned_cache::size_class(size_t bytes) noexcept {
  constexpr size_t smallest = 4096;
  return bytes <= smallest ? smallest : std::bit_ceil(bytes);
}

cudaError_t pinned_cache::take(size_t bytes, pinned_block& out) {
  auto wanted = size_class(bytes);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto i = free_.find(wanted); i != free_.end()) {
      out = pinned_block{this, i->second, wanted};
      free_.erase(i);
      return cudaSuccess;
    }
  }
  void* ptr = nullptr;
  if (auto err = alloc_(&ptr, wanted); err != cudaSuccess) return err;
  out = pinned_block{this, ptr, wanted};
  return cudaSuccess;
}

size_t pinned_cache::cached(size_t size_class) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return free_.count(size_class);
}

void pinned_cache::give_back(void* ptr, size_t size_class) noexcept {
  std::lock_guard<std::mutex> guard{mtx_};
  free_.emplace(size_class, ptr);
}

} // namespace caf_collective::detail
