// The names of the CAF scheduler setups the benchmark tools compare
// (caf_scheduler.hpp sets them up), without CAF's headers: option parsers
// that do not touch CAF check them here.
#pragma once

#include <cstddef>
#include <string_view>

namespace caf_collective::bench {

/// The names --caf-scheduler takes, for usage and error texts.
inline constexpr const char* caf_scheduler_names =
  "stealing, sharing or stealing-sleep, each optionally /N for N workers";

/// A setup's policy name and its number of CAF workers (0: CAF's default,
/// one per core), from "NAME" or "NAME/N".
struct caf_scheduler_setup {
  std::string_view policy;
  size_t workers = 0;
};

/// Splits `name` ("stealing-sleep/4"); a policy of "" if it is malformed.
inline caf_scheduler_setup parse_caf_scheduler(std::string_view name) {
  caf_scheduler_setup result{name, 0};
  if (auto slash = name.find('/'); slash != std::string_view::npos) {
    result.policy = name.substr(0, slash);
    auto digits = name.substr(slash + 1);
    if (digits.empty() || digits.size() > 4) return {};
    for (char c : digits) {
      if (c < '0' || c > '9') return {};
      result.workers = result.workers * 10 + size_t(c - '0');
    }
    if (result.workers == 0) return {};
  }
  auto p = result.policy;
  if (p != "stealing" && p != "sharing" && p != "stealing-sleep") return {};
  return result;
}

inline bool is_caf_scheduler(std::string_view name) {
  return !parse_caf_scheduler(name).policy.empty();
}

} // namespace caf_collective::bench
