// The collective layer's settings as CAF configuration: `collective.*`
// options on an actor_system_config, readable from the command line
// (`--collective.timeout=10s`) and CAF's config file (`[collective]`), with
// the CAF_COLLECTIVE_* environment variables as the fallback.
//
// Precedence, for each setting: the CAF configuration (command line over
// config file, as CAF merges them) > the environment variable > the
// built-in default. docs/config.md lists every setting.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "caf_collective/api.hpp"
#include "caf_collective/launch.hpp"
#include "caf_collective/rendezvous.hpp"

namespace caf_collective {

/// The effective settings of one actor system.
struct collective_settings {
  /// collective.timeout / CAF_COLLECTIVE_TIMEOUT ("10s", "500ms", "2min"
  /// or milliseconds): group formation deadline and each op's default
  /// deadline. In (0, 24 h].
  std::chrono::milliseconds timeout = std::chrono::seconds{30};
  /// collective.hostname / CAF_COLLECTIVE_HOSTNAME: the address this
  /// process's Gloo devices bind to and advertise; empty: 127.0.0.1.
  std::string hostname;
  /// collective.backend / CAF_COLLECTIVE_BACKEND: "auto", "gloo", "shm" or
  /// "nccl".
  std::string backend = "auto";
  /// collective.store / CAF_COLLECTIVE_STORE: "file:<dir>" or
  /// "tcp://host:port"; empty: none (in-process store, or the address the
  /// launcher's variables give).
  std::string store;
  /// collective.run-id / CAF_COLLECTIVE_RUN_ID: names the run in a TCP
  /// store; empty: the launcher's job id, else "default".
  std::string run_id;
  /// collective.log-level / CAF_COLLECTIVE_LOG_LEVEL: trace, debug, info,
  /// warn, error, critical or off.
  std::string log_level = "warn";
  /// collective.host-cache-mb / CAF_COLLECTIVE_HOST_CACHE_MB: MiB of freed
  /// host blocks kept for reuse; 0 turns the cache off.
  uint64_t host_cache_mb = 512;
};

/// Registers the `collective.*` options on `cfg`. Call it before
/// `cfg.parse(...)` (or in the constructor of your config class), so the
/// command line and the config file may set them.
void add_collective_options(caf::actor_system_config& cfg);

/// The effective settings: what `cfg` holds, else the environment
/// (`env`, default std::getenv), else the defaults. Fails with
/// invalid_argument naming the option or variable whose value is wrong
/// (an unknown backend or log level, a timeout out of range).
caf::expected<collective_settings>
settings_of(const caf::actor_system_config& cfg, const env_lookup& env = {});

/// settings_of(sys.config()).
caf::expected<collective_settings> settings_of(caf::actor_system& sys,
                                               const env_lookup& env = {});

/// Lets idle workers of CAF's work-stealing scheduler sleep on their
/// condition variable right after their short busy poll
/// (work-stealing.moderate-poll-attempts = 0). By default an idle worker
/// wakes every 50 us for 25 ms before it sleeps; a program whose messages
/// come every few hundred microseconds (an op on a group, its completion)
/// keeps both workers in that phase for good, and on a machine with few
/// cores their wake-ups take CPU time from the lanes that move the data
/// and delay the next message by up to a sleep. With this setting an
/// enqueue from outside the scheduler (a blocking client, a lane) wakes a
/// sleeping worker at once. The cost: a worker with a queue of ready actors
/// gets help from an idle one only after that one's 10 ms sleep
/// (work-stealing.relaxed-sleep-duration), so CPU-heavy actors spread over
/// the workers more slowly. docs/benchmarks.md has the measurements. Call
/// it before `cfg.parse(...)`: the command line and the config file may
/// still set the option.
void sleep_idle_workers(caf::actor_system_config& cfg);

/// Applies the process-wide settings to the collective layer: the log level
/// of its loggers and the host block cache's capacity. Groups read the
/// others when they are formed.
void apply_process_settings(const collective_settings& settings);

/// The store of group `group_name` that `settings` name, for the member of
/// rank `rank` (open_group_store: a TCP store is served by rank 0 unless
/// CAF_COLLECTIVE_STORE_SERVER=external; the secret comes from
/// CAF_COLLECTIVE_SECRET or the launcher's job id, never from the CAF
/// configuration). Without collective.store, the environment's address
/// (CAF_COLLECTIVE_STORE, MASTER_ADDR/MASTER_PORT) counts. Null when none
/// is set. Fails with invalid_argument for a malformed address or a missing
/// secret.
caf::expected<rendezvous_store_ptr>
store_of(const collective_settings& settings, std::string_view group_name,
         int rank, const env_lookup& env = {});

} // namespace caf_collective
