// Device memory in builds with the NCCL backend: host memory as in
// device_memory_host.cpp, CUDA memory through the CUDA runtime. Every
// function is synchronous: when it returns, the memory holds the result,
// whatever stream the caller uses next.
#include "vocabulary/device_memory.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include <cuda_runtime.h>

#include "caf_collective/error.hpp"
#include "vocabulary/host_memory_pool.hpp"
#include "backends/nccl/nccl_util.hpp"

namespace caf_collective::detail {

namespace {

/// The error of a failed CUDA call on `dev`: no device at all and a bad
/// ordinal are the caller's or the machine's problem, not a runtime fault.
caf::error device_error(device dev, std::string_view what, cudaError_t err) {
  static_cast<void>(cudaGetLastError());
  std::string text{what};
  text += " on ";
  text += to_string(dev);
  text += " failed: ";
  text += cuda_text(err);
  switch (err) {
    case cudaErrorMemoryAllocation:
      return make_error(errc::out_of_memory, std::move(text));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return make_error(errc::unsupported,
                        text + " (this machine has no usable CUDA device)");
    case cudaErrorInvalidDevice: {
      auto census = count_cuda_devices();
      return make_error(errc::invalid_argument, text + " (this process sees " +
                                                  std::to_string(census.count) +
                                                  " CUDA devices)");
    }
    default: return make_error(errc::backend_error, std::move(text));
  }
}

caf::expected<std::shared_ptr<void>> allocate_cuda(device dev, size_t bytes) {
  device_guard guard{dev.index};
  if (guard.status() != cudaSuccess)
    return device_error(dev, "cudaSetDevice", guard.status());
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported,
                             dev.index) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    pools = 0;
  }
  void* ptr = nullptr;
  // Never a null pointer, even for zero bytes: a defined tensor has an
  // address, and NCCL rejects null buffers. Stream ordered on the legacy
  // default stream: usable at once there and on blocking streams (and by
  // NCCL ops, which wait for that stream on the host first).
  auto n = bytes == 0 ? size_t{1} : bytes;
  auto err =
    pools ? cudaMallocAsync(&ptr, n, cudaStreamLegacy) : cudaMalloc(&ptr, n);
  if (err != cudaSuccess)
    return device_error(
      dev, "cudaMalloc of " + std::to_string(bytes) + " bytes", err);
  // Freed in order behind the caller's work on the legacy default stream,
  // without a host wait: cudaFree would synchronize the whole device, NCCL
  // kernels that wait for a peer included. Devices without memory pools
  // keep cudaFree. An error at exit (driver unloaded) is not actionable.
  return std::shared_ptr<void>{
    ptr, [pools, index = dev.index](void* p) {
      device_guard on{index};
      auto err = pools ? cudaFreeAsync(p, cudaStreamLegacy) : cudaFree(p);
      if (err != cudaSuccess) static_cast<void>(cudaGetLastError());
    }};
}

} // namespace

caf::expected<std::shared_ptr<void>> allocate_memory(device dev, size_t bytes) {
  if (dev.is_cpu()) return allocate_host_block(bytes);
  return allocate_cuda(dev, bytes);
}

caf::error copy_memory(void* dst, device dst_dev, const void* src,
                       device src_dev, size_t bytes) {
  if (bytes == 0) return {};
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memmove(dst, src, bytes);
    return {};
  }
  // The legacy default stream orders the copy after work the caller queued
  // on any blocking stream; cudaMemcpyDefault reads the direction from the
  // (unified) addresses, peer copies between GPUs included.
  auto on = dst_dev.is_cuda() ? dst_dev : src_dev;
  device_guard guard{on.index};
  if (guard.status() != cudaSuccess)
    return device_error(on, "cudaSetDevice", guard.status());
  auto what = "cudaMemcpy of " + std::to_string(bytes) + " bytes from " +
              to_string(src_dev) + " to " + to_string(dst_dev);
  if (auto err =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamLegacy);
      err != cudaSuccess)
    return device_error(on, what, err);
  if (auto err = cudaStreamSynchronize(cudaStreamLegacy); err != cudaSuccess)
    return device_error(on, what, err);
  return {};
}

caf::error zero_memory(void* dst, device dev, size_t bytes) {
  if (bytes == 0) return {};
  if (dev.is_cpu()) {
    std::memset(dst, 0, bytes);
    return {};
  }
  device_guard guard{dev.index};
  if (guard.status() != cudaSuccess)
    return device_error(dev, "cudaSetDevice", guard.status());
  // cudaMemset alone may return before the device memory is written.
  auto what = "cudaMemset of " + std::to_string(bytes) + " bytes";
  if (auto err = cudaMemsetAsync(dst, 0, bytes, cudaStreamLegacy);
      err != cudaSuccess)
    return device_error(dev, what, err);
  if (auto err = cudaStreamSynchronize(cudaStreamLegacy); err != cudaSuccess)
    return device_error(dev, what, err);
  return {};
}

} // namespace caf_collective::detail
