// float16 and bfloat16 <-> float32 conversions (IEEE 754 binary16 and the
// upper half of binary32), rounding to nearest even as hardware does.
#pragma once

#include <bit>
#include <cstdint>

namespace caf_collective::detail {

inline float half_to_float(uint16_t h) noexcept {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) { // inf or nan
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) { // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) { // zero
    bits = sign;
  } else { // subnormal: value = mantissa * 2^-24
    float value = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -value : value;
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t float_to_half(float f) noexcept {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) // inf or nan (keep nan quiet)
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  if (abs >= 0x477ff000u) // rounds to a value beyond 65504: overflow
    return sign | 0x7c00u;
  if (abs < 0x38800000u) { // below the smallest normal half: subnormal
    // Adding 0.5 (as float) aligns the mantissa so the FPU rounds for us.
    float shifted = std::bit_cast<float>(abs) + 0.5f;
    return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(shifted) -
                                        0x3f000000u);
  }
  uint32_t odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + odd; // rebias exponent (-112 << 23) and round
  return sign | static_cast<uint16_t>(abs >> 13);
}

inline float bfloat16_to_float(uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bfloat16(float f) noexcept {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // nan: keep it a quiet nan
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t odd = (bits >> 16) & 1u;
  bits += 0x7fffu + odd;
  return static_cast<uint16_t>(bits >> 16);
}

} // namespace caf_collective::detail
