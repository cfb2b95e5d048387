#include "backends/common/agreement.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "caf_collective/dtype.hpp"

namespace caf_collective::detail {

namespace {

using header = std::vector<uint64_t>;

std::string list_counts(const uint64_t* first, size_t n) {
  constexpr size_t shown = 8;
  std::string result = "{";
  for (size_t i = 0; i < std::min(n, shown); ++i) {
    if (i > 0) result += ", ";
    result += std::to_string(first[i]);
  }
  if (n > shown) result += ", ...";
  return result + "}";
}

std::string dtype_name(uint64_t raw) {
  auto type = static_cast<dtype>(raw);
  return is_valid(type) ? std::string{to_string(type)}
                        : "dtype " + std::to_string(raw);
}

} // namespace

caf::error check_allgatherv_headers(const error_context& where, int world_size,
                                    const std::vector<uint64_t>& all) {
  // Every rank must hold the same header; group the ranks by what they hold.
  auto n = all.size() / static_cast<size_t>(world_size);
  std::map<header, std::vector<int>> variants;
  for (int r = 0; r < world_size; ++r) {
    auto first = all.begin() + static_cast<ptrdiff_t>(size_t(r) * n);
    variants[header(first, first + static_cast<ptrdiff_t>(n))].push_back(r);
  }
  if (variants.size() == 1) return {};
  std::string detail = "ranks disagree on allgatherv's dtype or counts:";
  for (const auto& [values, ranks] : variants)
    detail += " ranks " + list_ranks(ranks) + " have " + dtype_name(values[0]) +
              " counts " + list_counts(values.data() + 1, values.size() - 1) +
              ";";
  detail.pop_back();
  return make_error(errc::mismatch, where, std::move(detail));
}

caf::error check_alltoallv_headers(const error_context& where, int world_size,
                                   const std::vector<uint64_t>& all) {
  auto w = static_cast<size_t>(world_size);
  auto n = all.size() / w;
  auto at = [&](size_t rank, size_t index) { return all[rank * n + index]; };
  std::vector<int> culprits;
  std::string detail;
  size_t reported = 0;
  auto note = [&](std::string what, std::initializer_list<size_t> ranks) {
    for (auto r : ranks)
      culprits.push_back(static_cast<int>(r));
    if (reported++ < 4) detail += " " + what + ";";
  };
  for (size_t r = 0; r < w; ++r)
    if (at(r, 0) != at(0, 0))
      note("rank " + std::to_string(r) + " has " + dtype_name(at(r, 0)) +
             ", rank 0 has " + dtype_name(at(0, 0)),
           {0, r});
  for (size_t src = 0; src < w; ++src)
    for (size_t dst = 0; dst < w; ++dst) {
      auto sent = at(src, 1 + dst);
      auto expected = at(dst, 1 + w + src);
      if (sent != expected)
        note("rank " + std::to_string(src) + " sends " + std::to_string(sent) +
               " elements to rank " + std::to_string(dst) + ", which expects " +
               std::to_string(expected),
             {src, dst});
    }
  if (culprits.empty()) return {};
  std::sort(culprits.begin(), culprits.end());
  culprits.erase(std::unique(culprits.begin(), culprits.end()), culprits.end());
  if (reported > 4) detail += " and " + std::to_string(reported - 4) + " more;";
  detail.pop_back();
  return make_error(errc::mismatch, where,
                    "ranks " + list_ranks(culprits) +
                      " disagree on alltoallv's dtype or counts:" + detail);
}

} // namespace caf_collective::detail
