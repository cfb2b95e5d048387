// The CAF scheduler setups the benchmark tools compare: CAF's default
// work stealing, work sharing, and work stealing whose idle workers sleep
// at once (caf_collective::sleep_idle_workers), each with CAF's number of
// workers (one per core) or a given one ("stealing/4").
#pragma once

#include <stdexcept>
#include <string>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include "caf_collective/config_options.hpp"

#include "caf_scheduler_names.hpp"

namespace caf_collective::bench {

/// Sets up `cfg` for the scheduler `name` (see is_caf_scheduler).
inline void use_caf_scheduler(caf::actor_system_config& cfg,
                              const std::string& name) {
  if (!is_caf_scheduler(name))
    throw std::invalid_argument("unknown CAF scheduler '" + name +
                                "' (expected " + caf_scheduler_names + ")");
  auto setup = parse_caf_scheduler(name);
  cfg.set("scheduler.policy", setup.policy == "sharing"
                                ? caf::atom("sharing")
                                : caf::atom("stealing"));
  if (setup.policy == "stealing-sleep") sleep_idle_workers(cfg);
  if (setup.workers > 0) cfg.set("scheduler.max-threads", setup.workers);
}

} // namespace caf_collective::bench
