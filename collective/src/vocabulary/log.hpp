// Loggers of the collective layer: one named spdlog logger per subsystem
// ("caf_collective.group", "caf_collective.gloo"), level from
// $CAF_COLLECTIVE_LOG_LEVEL (trace, debug, info, warn, error, off; default
// warn), printed to stderr.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace caf_collective::detail {

/// The logger named "caf_collective.<subsystem>", created on first use.
spdlog::logger& logger_for(const std::string& subsystem);

} // namespace caf_collective::detail
