// Which NCCL this process runs on, and which of its calls the backend uses.
//
// The backend compiles against NCCL 2.28's header, but a process may load an
// older libnccl (the one its framework ships). So the library never links
// against calls newer than its minimum version: ncclGather, ncclScatter and
// ncclAlltoAll (2.28) are looked up at run time in the loaded libnccl, and
// below 2.28 (or when the lookup fails) those ops run as grouped
// ncclSend/ncclRecv. Formation checks ncclGetVersion and refuses NCCL older
// than the minimum with a clear error instead of failing inside NCCL.
#pragma once

#include <string>

#include <caf/error.hpp>

#include "caf_collective/error.hpp"
#include "backends/nccl/nccl_util.hpp"

namespace caf_collective::detail {

/// 2.17: non-blocking communicators with ncclCommFinalize (2.14) and the
/// maxCTAs setting the device gate relies on (2.17).
inline constexpr int nccl_min_version = 21700;

/// 2.28: ncclGather, ncclScatter and ncclAlltoAll.
inline constexpr int nccl_rooted_calls_version = 22800;

/// The calls newer than the minimum, null where the loaded NCCL lacks them.
struct nccl_newer_calls {
  using rooted_fn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t,
                                     int, ncclComm_t, cudaStream_t);
  using alltoall_fn = ncclResult_t (*)(const void*, void*, size_t,
                                       ncclDataType_t, ncclComm_t,
                                       cudaStream_t);
  rooted_fn gather = nullptr;
  rooted_fn scatter = nullptr;
  alltoall_fn alltoall = nullptr;
};

/// Which implementation each op takes: NCCL's own call, or grouped
/// ncclSend/ncclRecv.
struct nccl_paths {
  bool native_gather = false;
  bool native_scatter = false;
  bool native_alltoall = false;

  bool operator==(const nccl_paths&) const = default;
};

/// The native path where `version` has the call and the lookup found it.
nccl_paths choose_nccl_paths(int version,
                             const nccl_newer_calls& calls) noexcept;

/// Looks the newer calls up in the libnccl this process loaded.
nccl_newer_calls find_newer_calls() noexcept;

/// The loaded NCCL, resolved once per process.
struct nccl_runtime {
  /// ncclGetVersion's answer; 0 if it failed.
  int version = 0;
  nccl_newer_calls calls;
  nccl_paths paths;
};

const nccl_runtime& loaded_nccl();

/// unsupported, naming both versions, when `version` is below the minimum.
caf::error check_nccl_version(int version, const error_context& where);

/// "2.28.9" for 22809 (and "2.8.4" for the old encoding 2804).
std::string nccl_version_text(int version);

/// Tests only: makes communicators formed from now on take the grouped
/// send/recv paths whatever the version (the one-GPU suite runs them).
void force_nccl_fallback(bool on) noexcept;

/// The paths a communicator formed now takes.
nccl_paths paths_for_new_communicators();

} // namespace caf_collective::detail
