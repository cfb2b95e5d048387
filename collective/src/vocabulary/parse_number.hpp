// Strict parsing of numbers that settings give as text.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>

namespace caf_collective::detail {

/// The whole of `text` as a number >= 0: no sign, no blanks, no unit, no
/// overflow of Int; nullopt otherwise. Settings from the environment are
/// read this strictly so that a typo is reported, not read as 0.
template<class Int>
std::optional<Int> parse_non_negative(std::string_view text) noexcept {
  Int result{};
  auto [end, ec] =
    std::from_chars(text.data(), text.data() + text.size(), result);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() ||
      result < 0)
    return std::nullopt;
  return result;
}

} // namespace caf_collective::detail
