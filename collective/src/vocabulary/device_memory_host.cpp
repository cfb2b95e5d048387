// Device memory in builds without CUDA: host memory only; CUDA requests are
// refused with a clear error.
#include "vocabulary/device_memory.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "caf_collective/error.hpp"
#include "vocabulary/host_memory_pool.hpp"

namespace caf_collective::detail {

namespace {

caf::error no_cuda(device dev) {
  return make_error(errc::unsupported,
                    "device " + to_string(dev) +
                      " requested, but caf-collective was built without "
                      "CUDA (CAF_COLLECTIVE_HAVE_NCCL=0)");
}

} // namespace

caf::expected<std::shared_ptr<void>> allocate_memory(device dev, size_t bytes) {
  if (!dev.is_cpu()) return no_cuda(dev);
  return allocate_host_block(bytes);
}

caf::error copy_memory(void* dst, device dst_dev, const void* src,
                       device src_dev, size_t bytes) {
  if (!dst_dev.is_cpu()) return no_cuda(dst_dev);
  if (!src_dev.is_cpu()) return no_cuda(src_dev);
  if (bytes > 0) std::memmove(dst, src, bytes);
  return {};
}

caf::error zero_memory(void* dst, device dev, size_t bytes) {
  if (!dev.is_cpu()) return no_cuda(dev);
  if (bytes > 0) std::memset(dst, 0, bytes);
  return {};
}

} // namespace caf_collective::detail
