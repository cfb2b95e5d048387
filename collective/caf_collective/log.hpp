// The library's log for its other layers (the actor layer's driver): the
// spdlog logger "caf_collective.<subsystem>" on stderr, level from
// $CAF_COLLECTIVE_LOG_LEVEL (trace, debug, info, warn, error, off; default
// warn). spdlog itself stays a private dependency.
#pragma once

#include <string>

namespace caf_collective {

/// Logs `text` at warning level to "caf_collective.<subsystem>".
void log_warning(const std::string& subsystem, const std::string& text);

/// Sets the level of every logger of the library, those that exist and
/// those created later, overriding $CAF_COLLECTIVE_LOG_LEVEL: "trace",
/// "debug", "info", "warn", "error", "critical" or "off". Returns false and
/// changes nothing for any other text.
bool set_log_level(const std::string& level);

} // namespace caf_collective
