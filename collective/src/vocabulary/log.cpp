#include "vocabulary/log.hpp"

#include "caf_collective/log.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace caf_collective::detail {

namespace {

// Set by set_log_level; wins over the environment.
std::optional<spdlog::level::level_enum> level_override;

spdlog::level::level_enum configured_level() {
  if (level_override) return *level_override;
  const char* env = std::getenv("CAF_COLLECTIVE_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return spdlog::level::warn;
  return spdlog::level::from_str(env);
}

std::mutex& loggers_mutex() {
  static std::mutex mtx;
  return mtx;
}

} // namespace

spdlog::logger& logger_for(const std::string& subsystem) {
  std::lock_guard<std::mutex> guard{loggers_mutex()};
  auto name = "caf_collective." + subsystem;
  if (auto existing = spdlog::get(name)) return *existing;
  auto created = spdlog::stderr_color_mt(name);
  created->set_level(configured_level());
  return *created;
}

} // namespace caf_collective::detail

namespace caf_collective {

void log_warning(const std::string& subsystem, const std::string& text) {
  detail::logger_for(subsystem).warn("{}", text);
}

} // namespace caf_collective

namespace caf_collective {

bool set_log_level(const std::string& level) {
  static const std::string names[] = {"trace", "debug",    "info", "warn",
                                      "error", "critical", "off"};
  if (std::find(std::begin(names), std::end(names), level) == std::end(names))
    return false;
  auto parsed = spdlog::level::from_str(level);
  std::lock_guard<std::mutex> guard{detail::loggers_mutex()};
  detail::level_override = parsed;
  spdlog::apply_all([parsed](const std::shared_ptr<spdlog::logger>& l) {
    if (l->name().rfind("caf_collective.", 0) == 0) l->set_level(parsed);
  });
  return true;
}

} // namespace caf_collective
