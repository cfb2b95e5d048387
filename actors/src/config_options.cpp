#include "caf_collective/config_options.hpp"

#include <array>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/config_option_adder.hpp>
#include <caf/settings.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/host_memory.hpp"
#include "caf_collective/log.hpp"

namespace caf_collective {

namespace {

using std::chrono::milliseconds;

constexpr auto longest_timeout = std::chrono::hours{24};

constexpr std::array<std::string_view, 4> backends{"auto", "gloo", "shm",
                                                   "nccl"};

constexpr std::array<std::string_view, 7> log_levels{
  "trace", "debug", "info", "warn", "error", "critical", "off"};

// custom_options_ is protected in CAF 0.17; modules reach it from a
// derived config. A pointer to the member taken in a derived class's scope
// reaches it in any config object.
struct option_set_access : caf::actor_system_config {
  static caf::config_option_set& of(caf::actor_system_config& cfg) {
    return cfg.*(&option_set_access::custom_options_);
  }
};

env_lookup or_process_env(const env_lookup& env) {
  if (env) return env;
  return [](const char* var) -> const char* {
    const char* v = std::getenv(var);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
}

caf::error wrong(const std::string& where, const std::string& value,
                 const std::string& expected) {
  return make_error(errc::invalid_argument,
                    where + "='" + value + "' is not " + expected);
}

// "10s", "500ms", "2min", "1h", or a number of milliseconds.
bool parse_duration(std::string_view text, milliseconds& out) {
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc{} || end == text.data()) return false;
  std::string_view unit{end,
                        static_cast<size_t>(text.data() + text.size() - end)};
  if (unit.empty() || unit == "ms")
    out = milliseconds{n};
  else if (unit == "s")
    out = std::chrono::seconds{n};
  else if (unit == "min")
    out = std::chrono::minutes{n};
  else if (unit == "h")
    out = std::chrono::hours{n};
  else
    return false;
  return true;
}

template<size_t N>
bool one_of(const std::array<std::string_view, N>& names,
            const std::string& x) {
  for (auto name : names)
    if (name == x) return true;
  return false;
}

// A string setting: the CAF option if set, else the variable if set.
void pick(const caf::actor_system_config& cfg, const char* key,
          const env_lookup& env, const char* var, std::string& out,
          std::string& origin) {
  origin = "default";
  if (auto x = caf::get_if<std::string>(&cfg, key)) {
    out = *x;
    origin = key;
  } else if (const char* v = env(var)) {
    out = v;
    origin = var;
  }
}

} // namespace

void sleep_idle_workers(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
}

void add_collective_options(caf::actor_system_config& cfg) {
  caf::config_option_adder{option_set_access::of(cfg), "collective"}
    .add<caf::timespan>("timeout",
                        "group formation and default op deadline (30s)")
    .add<std::string>("hostname",
                      "address Gloo binds to and advertises (127.0.0.1)")
    .add<std::string>("backend", "auto, gloo, shm or nccl (auto)")
    .add<std::string>("store", "rendezvous: file:<dir> or tcp://host:port")
    .add<std::string>("run-id", "names the run in a TCP store")
    .add<std::string>("log-level",
                      "trace, debug, info, warn, error, critical, off (warn)")
    .add<int64_t>("host-cache-mb", "MiB of freed host blocks kept (512)");
}

caf::expected<collective_settings>
settings_of(const caf::actor_system_config& cfg, const env_lookup& lookup) {
  auto env = or_process_env(lookup);
  collective_settings result;
  if (auto x = caf::get_if<caf::timespan>(&cfg, "collective.timeout")) {
    result.timeout = std::chrono::duration_cast<milliseconds>(*x);
    if (result.timeout <= milliseconds{0} || result.timeout > longest_timeout)
      return wrong("collective.timeout",
                   std::to_string(result.timeout.count()) + "ms",
                   "in (0, 24h]");
  } else if (const char* v = env("CAF_COLLECTIVE_TIMEOUT")) {
    if (!parse_duration(v, result.timeout) ||
        result.timeout <= milliseconds{0} || result.timeout > longest_timeout)
      return wrong("CAF_COLLECTIVE_TIMEOUT", v,
                   "a duration in (0, 24h] such as 10s, 500ms or 2min");
  }
  std::string origin;
  pick(cfg, "collective.hostname", env, "CAF_COLLECTIVE_HOSTNAME",
       result.hostname, origin);
  pick(cfg, "collective.backend", env, "CAF_COLLECTIVE_BACKEND", result.backend,
       origin);
  if (!one_of(backends, result.backend))
    return wrong(origin, result.backend, "auto, gloo, shm or nccl");
  pick(cfg, "collective.store", env, "CAF_COLLECTIVE_STORE", result.store,
       origin);
  if (!result.store.empty() && result.store.rfind("file:", 0) != 0 &&
      result.store.rfind("tcp://", 0) != 0)
    return wrong(origin, result.store, "file:<dir> or tcp://host:port");
  pick(cfg, "collective.run-id", env, "CAF_COLLECTIVE_RUN_ID", result.run_id,
       origin);
  pick(cfg, "collective.log-level", env, "CAF_COLLECTIVE_LOG_LEVEL",
       result.log_level, origin);
  if (!one_of(log_levels, result.log_level))
    return wrong(origin, result.log_level,
                 "trace, debug, info, warn, error, critical or off");
  if (auto x = caf::get_if<int64_t>(&cfg, "collective.host-cache-mb")) {
    if (*x < 0 || *x > (int64_t{1} << 30))
      return wrong("collective.host-cache-mb", std::to_string(*x),
                   "a size in MiB (0 turns the cache off)");
    result.host_cache_mb = static_cast<uint64_t>(*x);
  } else if (const char* v = env("CAF_COLLECTIVE_HOST_CACHE_MB")) {
    std::string_view text{v};
    uint64_t n = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size() ||
        n > (uint64_t{1} << 30))
      return wrong("CAF_COLLECTIVE_HOST_CACHE_MB", v,
                   "a size in MiB (0 turns the cache off)");
    result.host_cache_mb = n;
  }
  return result;
}

caf::expected<collective_settings> settings_of(caf::actor_system& sys,
                                               const env_lookup& env) {
  return settings_of(sys.config(), env);
}

void apply_process_settings(const collective_settings& settings) {
  set_log_level(settings.log_level);
  set_host_cache_capacity(static_cast<size_t>(settings.host_cache_mb) << 20);
}

caf::expected<rendezvous_store_ptr>
store_of(const collective_settings& settings, std::string_view group_name,
         int rank, const env_lookup& lookup) {
  auto env = or_process_env(lookup);
  // The settings' store and run id stand in for the variables; everything
  // else (secret, who serves, MASTER_ADDR/MASTER_PORT) comes from `env`.
  env_lookup merged = [&](const char* var) -> const char* {
    std::string_view name{var};
    if (name == "CAF_COLLECTIVE_STORE" && !settings.store.empty())
      return settings.store.c_str();
    if (name == "CAF_COLLECTIVE_RUN_ID" && !settings.run_id.empty())
      return settings.run_id.c_str();
    return env(var);
  };
  auto addr = read_store_environment(merged);
  if (!addr) return addr.error();
  return open_group_store(*addr, group_name, rank, settings.timeout);
}

} // namespace caf_collective
