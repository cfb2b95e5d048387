// Host allocations for tensors: 64-byte aligned, large blocks recycled
// through the cache of host_memory.hpp.
#pragma once

#include <cstddef>
#include <memory>

#include <caf/expected.hpp>

namespace caf_collective::detail {

/// `bytes` of 64-byte aligned host memory; out_of_memory when the system
/// has none (or the size cannot be represented).
caf::expected<std::shared_ptr<void>> allocate_host_block(size_t bytes);

} // namespace caf_collective::detail
