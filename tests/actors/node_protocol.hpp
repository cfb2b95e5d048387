// What the multi-node test (test_nodes.cpp) and its node processes
// (node_process.cpp) say to each other besides the driver protocol.
//
// The test process hosts the driver and a published directory actor. Each
// node process connects to the directory through the middleman, asks it
// for the driver, spawns its members (membership at spawn, registering with
// the remote driver) and tells the directory which rank each member has.
// Members own their node's tensors: the test asks them to make and read
// tensors in their own node's object store.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/timespan.hpp>

namespace node_test {

/// client -> member: (make, n, base) -> object_ref of n floats base + i,
/// put into the member's own node store.
using make_atom = caf::atom_constant<caf::atom("t_make")>;
/// client -> member: (read, object_ref) -> std::vector<float>.
using read_atom = caf::atom_constant<caf::atom("t_read")>;

// Directory protocol (caf::get_atom / caf::put_atom):
// - (get) -> the driver
// - (put, int32 rank, actor member): a node announces a member
// - (get, int32 rank) -> the member, or an error while it is unknown

inline void add_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<std::vector<float>>("std::vector<float>");
}

/// Heartbeats turn a frozen node (or a silent network) into a down message.
/// Every node of a test must agree: a node that expects heartbeats drops a
/// peer that sends none. Only the test of a frozen node turns them on: on a
/// loaded machine a starved middleman could miss a healthy peer's beats, and
/// the other tests would lose a node for nothing. The timeout is generous
/// for the same reason.
inline void enable_heartbeats(caf::actor_system_config& cfg) {
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::milliseconds{200}});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::milliseconds{5000}});
}

/// The node process's very last argument when its members register with a
/// driver of its own, which it announces to the directory as rank -1,
/// instead of with the test's driver: a client in the test then talks to
/// a driver on another node.
constexpr const char* own_driver_arg = "own_driver";

/// The rank under which a node announces its own driver.
constexpr int32_t driver_rank = -1;

/// The environment variable naming the rank whose member takes its starts
/// 3 s late (node_process.cpp).
constexpr const char* slow_start_env = "CAF_COLLECTIVE_TEST_SLOW_START_RANK";

/// The node process's last argument when the test uses heartbeats.
constexpr const char* heartbeats_arg = "heartbeats";

/// Prefix of the node process's argument naming the backend its members ask
/// for ("backend=gloo"); without it they ask for the default, auto.
constexpr const char* backend_arg = "backend=";

} // namespace node_test
