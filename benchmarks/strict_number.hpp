// Strict parsing of the benchmark tools' numeric flags: the whole text must
// be the number and it must lie in the flag's range. std::stoi and
// std::stod stop at the first character they cannot use ("2x" is 2) and
// take "nan", and a cast of a negative double to size_t wraps: each of
// those once turned a typo into a silently different measurement or a
// heap overrun.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace caf_collective::bench {

/// Largest byte count a size flag takes (1 TiB): far above any buffer a
/// run can allocate, and far enough below SIZE_MAX that sizes plus the
/// tools' slack cannot wrap.
inline constexpr size_t max_flag_bytes = size_t{1} << 40;

/// `text` as an integer in [lo, hi]; throws std::invalid_argument naming
/// `flag` otherwise.
inline long long parse_integer(std::string_view flag, std::string_view text,
                               long long lo, long long hi) {
  long long value = 0;
  auto [end, ec] =
    std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < lo ||
      value > hi)
    throw std::invalid_argument(
      std::string{flag} + " takes a whole number from " + std::to_string(lo) +
      " to " + std::to_string(hi) + ", not '" + std::string{text} + "'");
  return value;
}

inline int parse_int(std::string_view flag, std::string_view text, int lo,
                     int hi) {
  return static_cast<int>(parse_integer(flag, text, lo, hi));
}

/// `text` as a finite number >= lo; throws std::invalid_argument otherwise.
inline double parse_finite(std::string_view flag, std::string_view text,
                           double lo) {
  double value = 0;
  auto [end, ec] =
    std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() ||
      !std::isfinite(value) || value < lo) {
    // %g: "1", not std::to_string's "1.000000".
    char bound[32];
    std::snprintf(bound, sizeof(bound), "%g", lo);
    throw std::invalid_argument(std::string{flag} +
                                " takes a finite number >= " + bound +
                                ", not '" + std::string{text} + "'");
  }
  return value;
}

/// A byte count: a number with an optional suffix K, M or G (powers of
/// 1024; "1.5K" is 1536). The result must be a whole number of bytes from
/// 0 to max_flag_bytes.
inline size_t parse_byte_count(std::string_view flag, std::string_view text) {
  auto fail = [&](const char* why) {
    return std::invalid_argument(std::string{flag} + " takes a byte count " +
                                 why + " (suffixes K M G), not '" +
                                 std::string{text} + "'");
  };
  double scale = 1;
  auto digits = text;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
      case 'k': scale = 1024.0; break;
      case 'M':
      case 'm': scale = 1024.0 * 1024; break;
      case 'G':
      case 'g': scale = 1024.0 * 1024 * 1024; break;
      default: break;
    }
    if (scale > 1) digits.remove_suffix(1);
  }
  double value = 0;
  auto [end, ec] =
    std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || end != digits.data() + digits.size() ||
      !std::isfinite(value))
    throw fail("that is a number");
  if (value < 0) throw fail(">= 0");
  auto bytes = value * scale;
  if (bytes > static_cast<double>(max_flag_bytes))
    throw fail("of at most 1024G");
  if (bytes != std::floor(bytes)) throw fail("that is a whole number of bytes");
  return static_cast<size_t>(bytes);
}

} // namespace caf_collective::bench
