#include "backends/nccl/nccl_util.hpp"

namespace caf_collective::detail {

ncclDataType_t to_nccl(dtype t) noexcept {
  switch (t) {
    case dtype::int8: return ncclInt8;
    case dtype::uint8: return ncclUint8;
    case dtype::int32: return ncclInt32;
    case dtype::int64: return ncclInt64;
    case dtype::float16: return ncclFloat16;
    case dtype::bfloat16: return ncclBfloat16;
    case dtype::float32: return ncclFloat32;
    case dtype::float64: return ncclFloat64;
  }
  return ncclInt8;
}

std::optional<ncclRedOp_t> to_nccl(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::product: return ncclProd;
    case reduce_op::min: return ncclMin;
    case reduce_op::max: return ncclMax;
    case reduce_op::avg: return ncclAvg;
    case reduce_op::band:
    case reduce_op::bor:
    case reduce_op::bxor: return std::nullopt;
  }
  return std::nullopt;
}

std::string cuda_text(cudaError_t err) {
  std::string result = cudaGetErrorName(err);
  result += " (";
  result += cudaGetErrorString(err);
  result += ')';
  return result;
}

std::string nccl_text(ncclResult_t res, ncclComm_t comm) {
  std::string result;
  switch (res) {
    case ncclSuccess: result = "ncclSuccess"; break;
    case ncclUnhandledCudaError: result = "ncclUnhandledCudaError"; break;
    case ncclSystemError: result = "ncclSystemError"; break;
    case ncclInternalError: result = "ncclInternalError"; break;
    case ncclInvalidArgument: result = "ncclInvalidArgument"; break;
    case ncclInvalidUsage: result = "ncclInvalidUsage"; break;
    case ncclRemoteError: result = "ncclRemoteError"; break;
    case ncclInProgress: result = "ncclInProgress"; break;
    default: result = "ncclResult " + std::to_string(static_cast<int>(res));
  }
  result += " (";
  result += ncclGetErrorString(res);
  result += ')';
  // ncclGetLastError may describe an earlier asynchronous failure; it is
  // still the best clue NCCL gives, so it always comes along.
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last) {
    result += "; last NCCL error: ";
    result += last;
  }
  return result;
}

errc errc_of(ncclResult_t res) noexcept {
  return res == ncclRemoteError ? errc::peer_lost : errc::backend_error;
}

caf::error cuda_error(const error_context& where, std::string_view what,
                      cudaError_t err) {
  // Clears the non-sticky error state; a sticky one (a failed kernel)
  // stays and fails every later call, which is what we want to report.
  static_cast<void>(cudaGetLastError());
  std::string text{what};
  text += " failed: ";
  text += cuda_text(err);
  auto code = err == cudaErrorMemoryAllocation ? errc::out_of_memory
                                               : errc::backend_error;
  return make_error(code, where, std::move(text));
}

caf::error nccl_error(const error_context& where, std::string_view what,
                      ncclResult_t res, ncclComm_t comm) {
  std::string text{what};
  text += " failed: ";
  text += nccl_text(res, comm);
  if (res == ncclInvalidArgument || res == ncclInvalidUsage)
    text += " [NCCL blames the call's arguments or order]";
  return make_error(errc_of(res), where, std::move(text));
}

device_guard::device_guard(int ordinal) noexcept {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    previous_ = -1;
  }
  if (previous_ != ordinal) {
    status_ = cudaSetDevice(ordinal);
    if (status_ != cudaSuccess) static_cast<void>(cudaGetLastError());
  }
}

device_guard::~device_guard() {
  int current = -1;
  if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess &&
      current != previous_)
    static_cast<void>(cudaSetDevice(previous_));
}

device_census count_cuda_devices() noexcept {
  device_census result;
  result.status = cudaGetDeviceCount(&result.count);
  if (result.status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    result.count = 0;
  }
  return result;
}

} // namespace caf_collective::detail
