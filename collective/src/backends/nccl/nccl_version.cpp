#include "backends/nccl/nccl_version.hpp"

#include <atomic>

#include <dlfcn.h>

namespace caf_collective::detail {

namespace {

std::atomic<bool> fallback_forced{false};

/// The handle of the libnccl that provides ncclGetVersion to this process:
/// by its soname first (the usual case), else through the address of a
/// call we link against. Both only find an already loaded library.
void* loaded_nccl_handle() noexcept {
  if (auto* handle = dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_LAZY))
    return handle;
  Dl_info info{};
  auto* anchor = reinterpret_cast<void*>(&ncclGetVersion);
  if (dladdr(anchor, &info) != 0 && info.dli_fname != nullptr)
    if (auto* handle = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY))
      return handle;
  return RTLD_DEFAULT; // NCCL linked statically into the program
}

template<class Fn>
Fn lookup(void* handle, const char* name) noexcept {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

} // namespace

nccl_paths choose_nccl_paths(int version,
                             const nccl_newer_calls& calls) noexcept {
  nccl_paths result;
  if (version < nccl_rooted_calls_version) return result;
  result.native_gather = calls.gather != nullptr;
  result.native_scatter = calls.scatter != nullptr;
  result.native_alltoall = calls.alltoall != nullptr;
  return result;
}

nccl_newer_calls find_newer_calls() noexcept {
  nccl_newer_calls result;
  auto* handle = loaded_nccl_handle();
  result.gather = lookup<nccl_newer_calls::rooted_fn>(handle, "ncclGather");
  result.scatter = lookup<nccl_newer_calls::rooted_fn>(handle, "ncclScatter");
  result.alltoall =
    lookup<nccl_newer_calls::alltoall_fn>(handle, "ncclAlltoAll");
  // The handle stays open: the calls must outlive every communicator.
  return result;
}

const nccl_runtime& loaded_nccl() {
  static const nccl_runtime instance = [] {
    nccl_runtime result;
    if (ncclGetVersion(&result.version) != ncclSuccess) result.version = 0;
    result.calls = find_newer_calls();
    result.paths = choose_nccl_paths(result.version, result.calls);
    return result;
  }();
  return instance;
}

std::string nccl_version_text(int version) {
  // NCCL_VERSION encodes major * 10000 + minor * 100 + patch since 2.9,
  // major * 1000 + minor * 100 + patch before.
  int major = version >= 10000 ? version / 10000 : version / 1000;
  int minor = version >= 10000 ? version % 10000 / 100 : version % 1000 / 100;
  int patch = version % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(patch);
}

caf::error check_nccl_version(int version, const error_context& where) {
  if (version >= nccl_min_version) return {};
  return make_error(errc::unsupported, where,
                    "backend nccl needs NCCL " +
                      nccl_version_text(nccl_min_version) +
                      " or newer, but this process loaded NCCL " +
                      (version > 0 ? nccl_version_text(version)
                                   : std::string{"of unknown version"}) +
                      " (see docs/gpu.md for what each version needs)");
}

void force_nccl_fallback(bool on) noexcept {
  fallback_forced = on;
}

nccl_paths paths_for_new_communicators() {
  if (fallback_forced.load()) return {};
  return loaded_nccl().paths;
}

} // namespace caf_collective::detail
