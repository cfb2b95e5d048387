// Memory on any device: host memory here, CUDA memory in builds with the
// NCCL backend (device_memory_cuda.cpp replaces device_memory_host.cpp).
#pragma once

#include <cstddef>
#include <memory>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/device.hpp"

namespace caf_collective::detail {

/// Allocates `bytes` on `dev` (64-byte aligned on the host). Fails with
/// out_of_memory, or unsupported for CUDA in a build without CUDA.
caf::expected<std::shared_ptr<void>> allocate_memory(device dev, size_t bytes);

/// Copies `bytes` between any two devices (synchronously).
caf::error copy_memory(void* dst, device dst_dev, const void* src,
                       device src_dev, size_t bytes);

/// Fills `bytes` at `dst` with zeros (synchronously).
caf::error zero_memory(void* dst, device dev, size_t bytes);

} // namespace caf_collective::detail
