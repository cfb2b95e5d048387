// Element types of tensors, as every backend and the object store see them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace caf_collective {

/// Element type of a tensor. bool tensors travel as uint8.
enum class dtype : uint8_t {
  int8,
  uint8,
  int32,
  int64,
  float16,
  bfloat16,
  float32,
  float64,
};

inline constexpr std::array<dtype, 8> all_dtypes = {
  dtype::int8,    dtype::uint8,    dtype::int32,   dtype::int64,
  dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64,
};

/// Whether `t` is one of the enumerators above. Values outside the enum can
/// arrive through casts and deserialized messages; every entry point
/// refuses them.
constexpr bool is_valid(dtype t) noexcept {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(dtype::float64);
}

/// Size of one element in bytes (0 for an invalid dtype).
constexpr size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::int8:
    case dtype::uint8: return 1;
    case dtype::float16:
    case dtype::bfloat16: return 2;
    case dtype::int32:
    case dtype::float32: return 4;
    case dtype::int64:
    case dtype::float64: return 8;
  }
  return 0;
}

constexpr bool is_floating_point(dtype t) noexcept {
  return t == dtype::float16 || t == dtype::bfloat16 || t == dtype::float32 ||
         t == dtype::float64;
}

constexpr bool is_integral(dtype t) noexcept {
  return !is_floating_point(t);
}

/// Lower-case name, e.g. "float32"; matches the benchmark tool's `-d` flag.
std::string_view to_string(dtype t) noexcept;

/// Parses the names of `to_string`, plus the short forms "f32", "bf16", ...
std::optional<dtype> parse_dtype(std::string_view name) noexcept;

} // namespace caf_collective
