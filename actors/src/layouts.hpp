// Output layouts of out-of-place ops, computed alike by the driver (for
// every rank of a request) and by a member (for its own member-initiated
// op), so that both paths hand the lanes the same tensors.
#pragma once

#include <cstddef>

#include "caf_collective/tensor.hpp"

namespace caf_collective::detail {

/// allgather and gather: every rank's input stacked, {world, ...shape}.
shape_type stacked_shape(const shape_type& in, int world_size);

/// reduce_scatter and scatter: a 1/world slice of an input of `numel`
/// elements. Splits the leading extent when it divides, else flattens.
shape_type slice_shape(const shape_type& in, size_t numel, int world_size);

} // namespace caf_collective::detail
