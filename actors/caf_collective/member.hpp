// Members: actors of the user's own type whose group memberships are fixed
// when they are spawned. The member protocol runs beside the user's
// behavior; operations run on the groups' lanes, never on a scheduler
// thread.
#pragma once

#include <chrono>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/expected.hpp>
#include <caf/message_handler.hpp>
#include <caf/node_id.hpp>

#include "caf_collective/config_options.hpp"
#include "caf_collective/messages.hpp"

namespace caf_collective {

/// The member protocol for `self`: registers every membership with
/// `driver` now, then handles init, check, start, abort, leave, join and
/// status. Append it to your behavior with `or_else` (spawn_member does).
/// If the actor calls `become`, keep the protocol: `become(b.or_else(p))`.
caf::behavior member_protocol(caf::event_based_actor* self, driver_actor driver,
                              std::vector<membership> groups);

/// The user's behavior (possibly empty) with the member protocol behind it.
inline caf::behavior with_member_protocol(caf::behavior user,
                                          caf::behavior protocol) {
  if (!user) return protocol;
  caf::message_handler handler{user.as_behavior_impl()};
  return caf::behavior{handler.or_else(protocol)};
}

/// Spawns an actor running `fun(self, xs...)`'s behavior plus the member
/// protocol, member of every group in `groups` from its first message on.
/// `fun` returns a caf::behavior (possibly empty). It must not set a down
/// handler: the protocol's (its driver's loss) would be replaced.
template<class Fun, class... Ts>
member_actor spawn_member(caf::actor_system& sys, driver_actor driver,
                          std::vector<membership> groups, Fun fun, Ts... xs) {
  return sys.spawn([driver = std::move(driver), groups = std::move(groups),
                    fun = std::move(fun),
                    ... xs = std::move(xs)](caf::event_based_actor* self) {
    auto protocol = member_protocol(self, driver, groups);
    return with_member_protocol(fun(self, xs...), std::move(protocol));
  });
}

/// Lets other nodes spawn members on this node with CAF's remote spawn
/// (spawn_remote_member): registers the actor type `type_name`, whose
/// actors run `fun(self)`'s behavior plus the member protocol with the
/// driver and memberships the spawner passes. Call on the node's config
/// before its actor system exists.
/// `fun` is called as `fun(self)` or, if it takes one more argument, as
/// `fun(self, rank)` with the member's rank in its first group (-1 without
/// groups).
template<class Fun>
void add_member_type(caf::actor_system_config& cfg, std::string type_name,
                     Fun fun) {
  // By value: CAF matches the spawn message against the parameter types
  // as written, and a reference type never matches.
  cfg.add_actor_type(std::move(type_name), [fun](
                                             caf::event_based_actor* self,
                                             driver_actor driver,
                                             std::vector<membership> groups) {
    int32_t rank = groups.empty() ? -1 : groups.front().rank;
    auto protocol = member_protocol(self, std::move(driver), std::move(groups));
    if constexpr (std::is_invocable_v<Fun, caf::event_based_actor*, int32_t>)
      return with_member_protocol(fun(self, rank), std::move(protocol));
    else
      return with_member_protocol(fun(self), std::move(protocol));
  });
}

/// Spawns a member of the type `type_name` (add_member_type) on `node`, a
/// node this system is connected to through the middleman, member of every
/// group in `groups` with `driver` as its driver. Blocks the caller until
/// the node answered: call it from a client thread, not from an actor.
/// Fails with CAF's errors (e.g. the node does not know the type, or the
/// arguments do not match it).
caf::expected<member_actor> spawn_remote_member(
  caf::actor_system& sys, const caf::node_id& node,
  const std::string& type_name, const driver_actor& driver,
  std::vector<membership> groups,
  std::chrono::milliseconds timeout = std::chrono::seconds{10});

/// A member whose only behavior is the member protocol.
inline member_actor spawn_member(caf::actor_system& sys, driver_actor driver,
                                 std::vector<membership> groups) {
  return spawn_member(sys, std::move(driver), std::move(groups),
                      [](caf::event_based_actor*) { return caf::behavior{}; });
}

/// A group to spawn: its name and shape, and the settings every member's
/// membership gets.
struct group_spec {
  std::string name;
  int32_t world_size = 1;
  /// "auto" (shm on one host, else gloo), "gloo", "shm" or "nccl".
  std::string backend = default_backend;
  /// Formation deadline and each op's default deadline, in (0, 24 h].
  std::chrono::milliseconds timeout = std::chrono::seconds{30};
  /// Whether the driver or the members start the group's ops.
  op_source ops_from = op_source::driver;
  /// NCCL: rank r uses CUDA device cuda_devices[r % size]; empty: device 0.
  std::vector<int32_t> cuda_devices;
};

/// A group_spec whose backend and timeout are the node's collective.*
/// settings (config_options.hpp: CAF configuration > environment >
/// default), for `world_size` members of `name`.
inline group_spec spec_from(const collective_settings& settings,
                            std::string name, int32_t world_size) {
  group_spec spec;
  spec.name = std::move(name);
  spec.world_size = world_size;
  spec.backend = settings.backend;
  spec.timeout = settings.timeout;
  return spec;
}

/// Rank `rank`'s membership in the group `spec` describes.
inline membership membership_of(const group_spec& spec, int32_t rank) {
  membership m;
  m.group = spec.name;
  m.rank = rank;
  m.world_size = spec.world_size;
  m.backend = spec.backend;
  m.timeout_ms = spec.timeout.count();
  m.ops_from = spec.ops_from;
  if (!spec.cuda_devices.empty())
    m.cuda_device =
      spec.cuda_devices[static_cast<size_t>(rank) % spec.cuda_devices.size()];
  return m;
}

/// Spawns a whole group: `spec.world_size` members, member r with rank r.
/// `fun(self, rank, xs...)` builds each member's own behavior.
template<class Fun, class... Ts>
std::vector<member_actor>
spawn_group(caf::actor_system& sys, const driver_actor& driver,
            const group_spec& spec, Fun fun, Ts... xs) {
  std::vector<member_actor> result;
  for (int32_t rank = 0; rank < spec.world_size; ++rank)
    result.push_back(spawn_member(
      sys, driver, {membership_of(spec, rank)},
      [fun, rank](caf::event_based_actor* self, const Ts&... ys) {
        return fun(self, rank, ys...);
      },
      xs...));
  return result;
}

/// The positional form of the above (kept for existing programs).
template<class Fun, class... Ts>
std::vector<member_actor>
spawn_group(caf::actor_system& sys, const driver_actor& driver,
            const std::string& group, int32_t world_size,
            const std::string& backend, int64_t timeout_ms, Fun fun, Ts... xs) {
  std::vector<member_actor> result;
  for (int32_t rank = 0; rank < world_size; ++rank) {
    membership m{group, rank, world_size, backend, timeout_ms, 0};
    result.push_back(spawn_member(
      sys, driver, {std::move(m)},
      [fun, rank](caf::event_based_actor* self, const Ts&... ys) {
        return fun(self, rank, ys...);
      },
      xs...));
  }
  return result;
}

} // namespace caf_collective
