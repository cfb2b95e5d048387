// What ranks must agree on, and the checks every backend shares: the
// agreement key mixed into every op, and the count checks of the
// uneven-size ops, which see every rank's counts at once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include <caf/error.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective::detail {

/// Mixes what every rank of an operation must agree on (op kind, sizes,
/// root, dtype, reduce op) into one key.
inline uint64_t agreement_key(std::initializer_list<uint64_t> parts) noexcept {
  uint64_t h = 1469598103934665603ull; // FNV-1a
  for (auto part : parts) {
    h ^= part;
    h *= 1099511628211ull;
  }
  return h;
}

/// allgatherv: `all` holds every rank's header [dtype, counts...] (1 + W
/// values each, rank-major). `mismatch` naming the groups of ranks unless
/// every header is the same.
caf::error check_allgatherv_headers(const error_context& where, int world_size,
                                    const std::vector<uint64_t>& all);

/// alltoallv: `all` holds every rank's header [dtype, send counts...,
/// recv counts...] (1 + 2W values each). `mismatch` naming the ranks unless
/// every rank's send count to j is rank j's recv count from it.
caf::error check_alltoallv_headers(const error_context& where, int world_size,
                                   const std::vector<uint64_t>& all);

} // namespace caf_collective::detail
