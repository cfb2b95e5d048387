#include "vocabulary/log.hpp"

#include "caf_collective/log.hpp"

#include <cstdlib>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace caf_collective::detail {

namespace {

spdlog::level::level_enum configured_level() {
  const char* env = std::getenv("CAF_COLLECTIVE_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return spdlog::level::warn;
  return spdlog::level::from_str(env);
}

} // namespace

spdlog::logger& logger_for(const std::string& subsystem) {
  static std::mutex mtx;
  std::lock_guard<std::mutex> guard{mtx};
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
