// Test support for the NCCL suites: whether this machine has a GPU, CUDA
// tensors filled from and read back to host values (through the CUDA
// runtime directly, so the checks do not rely on the library's own copies),
// and element values exact in every dtype.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>
#include <caf_collective/nccl_multigpu.hpp>

#include "vocabulary/half.hpp"

namespace nccl_test {

namespace col = caf_collective;
using namespace std::chrono_literals;

/// Number of CUDA devices, asked of the runtime directly.
inline int gpu_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

/// Every GPU case starts with `if (!gpu_present()) return;`: without a GPU
/// it says so and the case ends (the binary's main exits 77 before that,
/// which CTest reports as skipped; this covers running cases directly).
inline bool gpu_present() {
  if (gpu_count() > 0) return true;
  std::puts("SKIPPED: no CUDA device");
  return false;
}

/// The element value at index i, small enough to be exact in every dtype
/// (int8 included) and signed where the dtype allows.
inline double value_at(col::dtype t, size_t i, int salt = 0) {
  auto v = static_cast<int>((i * 7 + static_cast<size_t>(salt) * 13) % 50);
  return t == col::dtype::uint8 ? v : v - 20;
}

inline void put(col::dtype t, void* base, size_t i, double v) {
  namespace d = col::detail;
  auto* p = static_cast<std::byte*>(base) + i * col::size_of(t);
  auto store = [p](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (t) {
    case col::dtype::int8: store(static_cast<int8_t>(v)); break;
    case col::dtype::uint8: store(static_cast<uint8_t>(v)); break;
    case col::dtype::int32: store(static_cast<int32_t>(v)); break;
    case col::dtype::int64: store(static_cast<int64_t>(v)); break;
    case col::dtype::float16:
      store(d::float_to_half(static_cast<float>(v)));
      break;
    case col::dtype::bfloat16:
      store(d::float_to_bfloat16(static_cast<float>(v)));
      break;
    case col::dtype::float32: store(static_cast<float>(v)); break;
    case col::dtype::float64: store(v); break;
  }
}

inline double get(col::dtype t, const void* base, size_t i) {
  namespace d = col::detail;
  auto* p = static_cast<const std::byte*>(base) + i * col::size_of(t);
  auto load = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (t) {
    case col::dtype::int8: return load(int8_t{});
    case col::dtype::uint8: return load(uint8_t{});
    case col::dtype::int32: return load(int32_t{});
    case col::dtype::int64: return static_cast<double>(load(int64_t{}));
    case col::dtype::float16: return d::half_to_float(load(uint16_t{}));
    case col::dtype::bfloat16: return d::bfloat16_to_float(load(uint16_t{}));
    case col::dtype::float32: return load(float{});
    case col::dtype::float64: return load(double{});
  }
  return 0;
}

/// A CUDA tensor on device 0 holding `values`.
inline col::tensor cuda_tensor(col::dtype t, const std::vector<double>& values,
                               int device = 0) {
  auto result = col::tensor::empty(t, {static_cast<int64_t>(values.size())},
                                   col::device::cuda(device));
  REQUIRE_MESSAGE(result, col::render(result.error()));
  std::vector<std::byte> host(values.size() * col::size_of(t));
  for (size_t i = 0; i < values.size(); ++i)
    put(t, host.data(), i, values[i]);
  if (!host.empty())
    REQUIRE(cudaMemcpy(result->data(), host.data(), host.size(),
                       cudaMemcpyHostToDevice) == cudaSuccess);
  return std::move(*result);
}

/// A CUDA tensor of `count` elements, every one `fill`.
inline col::tensor cuda_filled(col::dtype t, size_t count, double fill,
                               int device = 0) {
  return cuda_tensor(t, std::vector<double>(count, fill), device);
}

/// The values of a CUDA tensor, read back with a synchronous copy.
inline std::vector<double> host_values(const col::tensor_view& x) {
  std::vector<std::byte> host(x.nbytes());
  if (!host.empty())
    REQUIRE(cudaMemcpy(host.data(), x.data(), host.size(),
                       cudaMemcpyDeviceToHost) == cudaSuccess);
  std::vector<double> result(x.numel());
  for (size_t i = 0; i < result.size(); ++i)
    result[i] = get(x.type(), host.data(), i);
  return result;
}

inline std::vector<double> pattern(col::dtype t, size_t count, int salt = 0) {
  std::vector<double> result(count);
  for (size_t i = 0; i < count; ++i)
    result[i] = value_at(t, i, salt);
  return result;
}

/// The formation timeout, and default op deadline, of the suite's groups:
/// 20 s, or CAF_COLLECTIVE_GPU_TEST_TIMEOUT_S seconds. run-gpu-tests.sh sets
/// it for compute-sanitizer, under which forming the first NCCL communicator
/// of a process once took over 20 s.
inline col::milliseconds test_group_timeout() {
  if (const char* text = std::getenv("CAF_COLLECTIVE_GPU_TEST_TIMEOUT_S")) {
    char* end = nullptr;
    auto seconds = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && seconds > 0)
      return std::chrono::seconds{seconds};
  }
  return 20s;
}

/// A group of one rank on the NCCL backend, on CUDA device 0.
inline col::group_ptr
solo_group(const std::string& name,
           col::milliseconds timeout = test_group_timeout()) {
  col::group_config cfg;
  cfg.name = name;
  cfg.world_size = 1;
  cfg.rank = 0;
  cfg.backend = "nccl";
  cfg.store = col::make_in_process_store();
  cfg.timeout = timeout;
  cfg.cuda_device = 0;
  auto result = col::group::create(std::move(cfg));
  REQUIRE_MESSAGE(result, col::render(result.error()));
  return *result;
}

/// Blocks a stream of device 0 (the legacy default stream unless told
/// otherwise) with a host function until opened, or until `limit` passed: a
/// safety net, so that a test of a hang fails instead of hanging.
class stream_blocker {
 public:
  explicit stream_blocker(std::chrono::milliseconds limit = 5s,
                          cudaStream_t stream = cudaStreamLegacy)
    : stream_(stream), limit_(std::chrono::steady_clock::now() + limit) {
    cudaSetDevice(0);
    REQUIRE(cudaLaunchHostFunc(stream_, &hold, this) == cudaSuccess);
  }

  ~stream_blocker() {
    open();
    cudaStreamSynchronize(stream_);
  }

  stream_blocker(const stream_blocker&) = delete;
  stream_blocker& operator=(const stream_blocker&) = delete;

  void open() { open_ = true; }

 private:
  static void CUDART_CB hold(void* ptr) {
    auto* self = static_cast<stream_blocker*>(ptr);
    while (!self->open_.load() &&
           std::chrono::steady_clock::now() < self->limit_)
      std::this_thread::sleep_for(1ms);
  }

  cudaStream_t stream_;
  std::atomic<bool> open_{false};
  std::chrono::steady_clock::time_point limit_;
};

/// Waits for `w` and returns its rendered error ("none" on success).
inline std::string outcome(const col::work& w) {
  return col::render(w.wait());
}

} // namespace nccl_test
