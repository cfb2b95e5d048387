// The demo: a driver, a group of four workers whose membership is fixed at
// spawn, tensors in the node's object store, and every collective run
// through the driver on object refs. Exits non-zero on any wrong result.
#include <cstdio>
#include <string>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/config_options.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/messages.hpp>

#include "every_op.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

// A worker of the user's own type: it answers pings while collectives run
// on its group's lane.
caf::behavior worker(caf::event_based_actor*, int32_t rank) {
  return {
    [rank](caf::ping_atom) { return rank; },
  };
}

int run_demo(caf::actor_system& sys) {
  auto driver = col::spawn_driver(sys);
  // Membership at spawn: 4 workers of group "demo", ranks 0..3, on the
  // backend "auto" resolves to: shm here (every worker is on this host),
  // gloo for members spread over hosts.
  const std::string asked = col::default_backend;
  auto workers = col::spawn_group(sys, driver, "demo", 4, asked, 10000, worker);
  caf::scoped_actor self{sys};
  int rc = 0;
  if (auto err = col::await_group(self, driver, "demo", 15s)) {
    std::printf("group formation failed: %s\n", col::render(err).c_str());
    rc = 1;
  } else {
    // The driver's status names the backend every rank formed the group on.
    auto status = col::status_of(self, driver, "demo", 5s);
    if (!status) {
      std::printf("no status: %s\n", col::render(status.error()).c_str());
      rc = 1;
    } else {
      std::printf("group 'demo' formed on %s (asked for %s)\n",
                  status->backend.c_str(), asked.c_str());
    }
    auto store = col::local_store(sys);
    auto reports =
      col::demo::run_every_op(self, driver, *store, "demo", 4, 1 << 16, 10s);
    std::printf("%-16s %12s %10s  %s\n", "op", "bytes/rank", "time(ms)",
                "result");
    for (auto& r : reports) {
      std::printf("%-16s %12zu %10.2f  %s\n", r.op.c_str(), r.bytes, r.ms,
                  r.ok ? "ok" : r.error.c_str());
      if (!r.ok) rc = 1;
    }
    std::printf("store after the run: %zu objects, %zu bytes\n",
                store->objects(), store->bytes());
  }
  for (auto& w : workers)
    self->send_exit(w, caf::exit_reason::user_shutdown);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  return rc;
}

int main() {
  caf::actor_system_config cfg;
  col::add_message_types(cfg);
  // CAF's default work stealing, with idle workers that sleep at once
  // instead of polling every 50 us: a collective program on few cores then
  // keeps its CPU time for the lanes that move the data, and a request from
  // main() wakes a worker at once (docs/benchmarks.md, "Idle CAF workers").
  col::sleep_idle_workers(cfg);
  caf::actor_system sys{cfg};
  return run_demo(sys);
}
