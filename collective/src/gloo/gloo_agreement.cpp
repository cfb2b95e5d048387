// Gloo backend: the agreement step of the uneven-size operations.
//
// allgatherv and alltoallv move a different number of bytes between each
// pair of ranks, so no single key mixed into the tag can show that the ranks
// agree: rank 0 may send 3 elements to rank 1 while rank 1 expects 2. Gloo
// itself either terminates the process (more bytes than expected) or leaves
// part of the output unwritten (fewer). So before any payload moves, every
// rank publishes its dtype and counts in one small allgather of a size all
// ranks know (it depends on the world size only), and every rank checks the
// whole picture. Ranks that disagree all fail with the same `mismatch`
// error, naming them; nothing else was sent, so the group stays usable.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gloo/allgather.h>

#include "gloo/gloo_backend.hpp"

namespace caf_collective::detail {

namespace {

// Header layout: [dtype, counts...]; alltoallv: [dtype, send..., recv...].
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

std::string list_ranks(const std::vector<int>& ranks) {
  std::string result = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) result += ", ";
    result += std::to_string(ranks[i]);
  }
  return result + "]";
}

} // namespace

caf::expected<std::vector<uint64_t>>
gloo_backend::exchange_headers(op_kind op, const op_call& call,
                               const std::vector<uint64_t>& mine) {
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(world_size_));
  auto err = guarded(op, call, [&] {
    gloo::AllgatherOptions opts{context_};
    // The header's own tag: no payload of any operation uses it.
    opts.setTag(tag_of(call.seq, agreement_key({uint64_t(op), 0x68647221u,
                                                uint64_t(world_size_)})));
    opts.setTimeout(call.timeout);
    opts.setInput(const_cast<uint64_t*>(mine.data()), mine.size());
    opts.setOutput(all.data(), all.size());
    gloo::allgather(opts);
  });
  if (err) return err;
  return all;
}

caf::error gloo_backend::agree_allgatherv(const op_call& call, dtype type,
                                          const std::vector<size_t>& counts) {
  header mine{uint64_t(type)};
  mine.insert(mine.end(), counts.begin(), counts.end());
  auto all = exchange_headers(op_kind::allgatherv, call, mine);
  if (!all) return std::move(all.error());
  // Every rank must hold the same header; group the ranks by what they hold.
  auto n = mine.size();
  std::map<header, std::vector<int>> variants;
  for (int r = 0; r < world_size_; ++r) {
    auto first = all->begin() + static_cast<ptrdiff_t>(r * n);
    variants[header(first, first + static_cast<ptrdiff_t>(n))].push_back(r);
  }
  if (variants.size() == 1) return {};
  std::string detail = "ranks disagree on allgatherv's dtype or counts:";
  for (const auto& [values, ranks] : variants)
    detail += " ranks " + list_ranks(ranks) + " have " + dtype_name(values[0]) +
              " counts " + list_counts(values.data() + 1, values.size() - 1) +
              ";";
  detail.pop_back();
  return make_error(errc::mismatch, context(op_kind::allgatherv, call),
                    std::move(detail));
}

caf::error gloo_backend::agree_alltoallv(const op_call& call, dtype type,
                                         const std::vector<size_t>& sends,
                                         const std::vector<size_t>& recvs) {
  header mine{uint64_t(type)};
  mine.insert(mine.end(), sends.begin(), sends.end());
  mine.insert(mine.end(), recvs.begin(), recvs.end());
  auto all = exchange_headers(op_kind::alltoallv, call, mine);
  if (!all) return std::move(all.error());
  auto n = mine.size();
  auto w = static_cast<size_t>(world_size_);
  auto at = [&](size_t rank, size_t index) { return (*all)[rank * n + index]; };
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
  return make_error(errc::mismatch, context(op_kind::alltoallv, call),
                    "ranks " + list_ranks(culprits) +
                      " disagree on alltoallv's dtype or counts:" + detail);
}

} // namespace caf_collective::detail
