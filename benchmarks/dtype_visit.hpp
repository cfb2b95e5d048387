// Calls fn(T{}) with the C++ type of a dtype the perf tool supports.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "caf_collective/dtype.hpp"

namespace caf_collective::bench {

/// Whether the perf tool (and raw Gloo's kernels) handle `t`; float16 and
/// bfloat16 have no exact reference arithmetic here.
inline bool is_supported(dtype t) noexcept {
  return t != dtype::float16 && t != dtype::bfloat16;
}

template<class Fn>
decltype(auto) visit_dtype(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::int8: return fn(int8_t{});
    case dtype::uint8: return fn(uint8_t{});
    case dtype::int32: return fn(int32_t{});
    case dtype::int64: return fn(int64_t{});
    case dtype::float32: return fn(float{});
    case dtype::float64: return fn(double{});
    default:
      throw std::invalid_argument("unsupported dtype " +
                                  std::string{to_string(t)});
  }
}

} // namespace caf_collective::bench
