// What the files implementing the NCCL operations share: turning call
// results into errors, addressing blocks of a tensor, and checking that
// each local rank got a tensor on its own device.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <caf/error.hpp>

#include "backends/nccl/nccl_ops.hpp"

namespace caf_collective::detail {

/// Turns the result of an NCCL call inside a group into an error. Inside a
/// group, ncclInProgress only means "queued"; ncclGroupEnd reports the rest.
inline caf::error launched(const nccl_step_ctx& ctx, const char* what,
                           ncclResult_t res, const nccl_slot& slot) {
  if (res == ncclSuccess || res == ncclInProgress) return {};
  return nccl_error(ctx.where, what, res, slot.comm);
}

inline caf::error cuda_launched(const nccl_step_ctx& ctx, const char* what,
                                cudaError_t res) {
  if (res == cudaSuccess) return {};
  return cuda_error(ctx.where, what, res);
}

/// Element `first` of `view`.
inline void* at(const tensor_view& view, size_t first) {
  return static_cast<std::byte*>(view.data()) + first * size_of(view.type());
}

/// Checks one side (in or out) of a call: one tensor per local NCCL rank,
/// each on that rank's device. Sides a rank does not use (the root-only
/// buffers on other ranks) are skipped through `used`.
template<class Used>
caf::error check_side(nccl_clique& c, const nccl_step_ctx& ctx, views side,
                      std::string_view name, Used used) {
  if (side.size() != c.size())
    return make_error(errc::invalid_argument, ctx.where,
                      "expected one '" + std::string{name} +
                        "' tensor per local CUDA device (" +
                        std::to_string(c.size()) + "), got " +
                        std::to_string(side.size()));
  for (size_t i = 0; i < side.size(); ++i) {
    auto& view = side[i];
    if (!used(c.slot(i)) || view.numel() == 0) continue;
    auto want = device::cuda(c.slot(i).device);
    if (view.dev() != want)
      return make_error(
        errc::invalid_argument, ctx.where,
        "'" + std::string{name} + "' tensor " + std::to_string(i) +
          " lives on " + to_string(view.dev()) +
          ", but the NCCL backend runs this rank on " + to_string(want) +
          " (stage host tensors to the device first)");
    if (view.data() == nullptr)
      return make_error(
        errc::invalid_argument, ctx.where,
        "'" + std::string{name} + "' tensor " + std::to_string(i) + " has " +
          std::to_string(view.numel()) + " elements but no memory");
  }
  return {};
}

inline constexpr auto every_rank = [](const nccl_slot&) { return true; };

/// A device-to-device copy of `bytes` on the slot's stream; none when the
/// two are the same memory (an in-place call).
inline caf::error copy_block(const nccl_step_ctx& ctx, nccl_slot& s, void* dst,
                             const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return {};
  return cuda_launched(
    ctx, "cudaMemcpyAsync (own block)",
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.stream));
}

} // namespace caf_collective::detail
