#include "vocabulary/log.hpp"

#include "caf_collective/log.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace caf_collective::detail {

namespace {

// Our loggers, kept out of spdlog's registry and never destroyed: a lane
// may still log while the process exits (a group that was forming when
// main returned), after spdlog's registry or any other static of ours has
// been destroyed (TSan saw exactly that race).
struct logger_table {
  std::mutex mtx;
  std::map<std::string, std::shared_ptr<spdlog::logger>> by_name;
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> sink =
    std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  /// Set by set_log_level; wins over the environment.
  std::optional<spdlog::level::level_enum> level_override;
};

logger_table& loggers() {
  static auto* table = new logger_table;
  return *table;
}

spdlog::level::level_enum configured_level(const logger_table& t) {
  if (t.level_override) return *t.level_override;
  const char* env = std::getenv("CAF_COLLECTIVE_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return spdlog::level::warn;
  // spdlog takes a name it does not know for "off": a typo would silence
  // every warning (timeouts' op histories included). Refused, said once.
  auto level = spdlog::level::from_str(env);
  if (level == spdlog::level::off && std::string_view{env} != "off") {
    static std::once_flag said;
    std::call_once(said, [env] {
      std::fprintf(stderr,
                   "caf_collective: CAF_COLLECTIVE_LOG_LEVEL='%s' is not one "
                   "of trace, debug, info, warn, error, critical, off; using "
                   "warn\n",
                   env);
    });
    return spdlog::level::warn;
  }
  return level;
}

} // namespace

spdlog::logger& logger_for(const std::string& subsystem) {
  auto& t = loggers();
  std::lock_guard<std::mutex> guard{t.mtx};
  auto name = "caf_collective." + subsystem;
  auto& entry = t.by_name[name];
  if (!entry) {
    entry = std::make_shared<spdlog::logger>(name, t.sink);
    entry->set_level(configured_level(t));
  }
  return *entry;
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
  auto& t = detail::loggers();
  std::lock_guard<std::mutex> guard{t.mtx};
  t.level_override = parsed;
  for (auto& [name, logger] : t.by_name)
    logger->set_level(parsed);
  return true;
}

} // namespace caf_collective
