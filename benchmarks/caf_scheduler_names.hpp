// The names of the CAF scheduler setups the benchmark tools compare
// (caf_scheduler.hpp sets them up), without CAF's headers: option parsers
// that do not touch CAF check them here.
#pragma once

#include <string_view>

namespace caf_collective::bench {

/// The names --caf-scheduler takes, for usage and error texts.
inline constexpr const char* caf_scheduler_names =
  "stealing, sharing or stealing-sleep";

inline bool is_caf_scheduler(std::string_view name) {
  return name == "stealing" || name == "sharing" || name == "stealing-sleep";
}

} // namespace caf_collective::bench
