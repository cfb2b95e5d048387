// CAF's deterministic scheduler for protocol tests: every actor runs on the
// test's thread, one message at a time, and time moves only when the test
// advances the clock.
#pragma once

#include <cstddef>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <caf_collective/messages.hpp>

namespace testing_scheduler {

/// The config of a system on the testing policy, with our message types.
inline caf::actor_system_config& prepare(caf::actor_system_config& cfg) {
  caf_collective::add_message_types(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  return cfg;
}

/// Runs every actor until no message is left; moves no time. Returns the
/// number of messages handled.
inline size_t run_all(caf::scheduler::test_coordinator& sched) {
  size_t steps = 0;
  while (sched.try_run_once())
    ++steps;
  return steps;
}

} // namespace testing_scheduler
