#include "layouts.hpp"

namespace caf_collective::detail {

shape_type stacked_shape(const shape_type& in, int world_size) {
  shape_type result{world_size};
  for (auto extent : in)
    result.push_back(extent);
  return result;
}

shape_type slice_shape(const shape_type& in, size_t numel, int world_size) {
  if (!in.empty() && in[0] % world_size == 0) {
    shape_type result = in;
    result[0] /= world_size;
    return result;
  }
  return {static_cast<int64_t>(numel / static_cast<size_t>(world_size))};
}

} // namespace caf_collective::detail
