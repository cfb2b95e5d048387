// Small pieces every file of the NCCL backend shares: the mapping of our
// vocabulary onto NCCL's, error texts that carry NCCL's and CUDA's own
// messages, and a scoped current-device switch.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <caf/error.hpp>
#include <cuda_runtime.h>
#include <nccl.h>

#include "caf_collective/dtype.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/reduce_op.hpp"

namespace caf_collective::detail {

using steady_time = std::chrono::steady_clock::time_point;

/// NCCL's element type for `t`; every dtype of ours has one.
ncclDataType_t to_nccl(dtype t) noexcept;

/// NCCL's reduction for `op`, or nothing for the bitwise ops NCCL lacks.
std::optional<ncclRedOp_t> to_nccl(reduce_op op) noexcept;

/// "cudaErrorNoDevice (no CUDA-capable device is detected)".
std::string cuda_text(cudaError_t err);

/// "ncclSystemError (unhandled system error); last NCCL error: ..." with
/// ncclGetLastError of `comm` (may be null).
std::string nccl_text(ncclResult_t res, ncclComm_t comm);

/// Who is at fault for an NCCL result, as our error codes say it: a remote
/// failure means a peer is gone, everything else is the library's.
errc errc_of(ncclResult_t res) noexcept;

/// Makes a CUDA runtime failure an error and clears the runtime's
/// non-sticky last error, so it does not resurface in a later, unrelated
/// call. `what` names the call, e.g. "cudaStreamCreateWithFlags".
caf::error cuda_error(const error_context& where, std::string_view what,
                      cudaError_t err);

/// Makes an NCCL failure an error; `what` names the call.
caf::error nccl_error(const error_context& where, std::string_view what,
                      ncclResult_t res, ncclComm_t comm);

/// Makes `ordinal` the calling thread's current CUDA device for the scope
/// and restores the previous one afterwards: operations may run on a
/// caller's thread, whose current device belongs to the caller.
class device_guard {
 public:
  explicit device_guard(int ordinal) noexcept;
  ~device_guard();
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

  /// The result of switching; cudaSuccess when the device is current.
  cudaError_t status() const noexcept { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

/// Number of CUDA devices, or the runtime's reason why there are none.
struct device_census {
  int count = 0;
  cudaError_t status = cudaSuccess;
};

device_census count_cuda_devices() noexcept;

} // namespace caf_collective::detail
