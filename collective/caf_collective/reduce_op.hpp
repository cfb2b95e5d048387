// Reduction operators of reduce, allreduce and reduce_scatter.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "caf_collective/dtype.hpp"

namespace caf_collective {

/// How reduce, allreduce and reduce_scatter combine the ranks' elements.
///
/// - `avg` is the sum divided by the world size. On integer dtypes the sum is
///   formed exactly (in 64 bits) and then divided with C++ integer division,
///   i.e. truncated toward zero.
/// - `band`, `bor`, `bxor` are defined on integer dtypes only; asking for them
///   on a floating-point dtype is an `errc::invalid_argument` error.
enum class reduce_op : uint8_t {
  sum,
  product,
  min,
  max,
  avg,
  band,
  bor,
  bxor,
};

inline constexpr std::array<reduce_op, 8> all_reduce_ops = {
  reduce_op::sum, reduce_op::product, reduce_op::min, reduce_op::max,
  reduce_op::avg, reduce_op::band,    reduce_op::bor, reduce_op::bxor,
};

/// Whether `op` is one of the enumerators above (see is_valid(dtype)).
constexpr bool is_valid(reduce_op op) noexcept {
  return static_cast<uint8_t>(op) <= static_cast<uint8_t>(reduce_op::bxor);
}

constexpr bool is_bitwise(reduce_op op) noexcept {
  return op == reduce_op::band || op == reduce_op::bor || op == reduce_op::bxor;
}

/// Whether `op` is defined on elements of type `t` (both valid, bitwise
/// ops only on integers).
constexpr bool is_defined(reduce_op op, dtype t) noexcept {
  return is_valid(op) && is_valid(t) && (!is_bitwise(op) || is_integral(t));
}

std::string_view to_string(reduce_op op) noexcept;

std::optional<reduce_op> parse_reduce_op(std::string_view name) noexcept;

} // namespace caf_collective
