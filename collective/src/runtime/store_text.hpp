// Store values are bytes; the formation protocols keep text in them (names,
// tokens, host identities).
#pragma once

#include <string>
#include <vector>

namespace caf_collective::detail {

inline std::vector<char> bytes_of(const std::string& text) {
  return {text.begin(), text.end()};
}

inline std::string text_of(const std::vector<char>& bytes) {
  return {bytes.begin(), bytes.end()};
}

} // namespace caf_collective::detail
