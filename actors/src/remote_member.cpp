// Members spawned on other nodes through CAF's remote spawn.
#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include "caf_collective/member.hpp"

namespace caf_collective {

caf::expected<member_actor>
spawn_remote_member(caf::actor_system& sys, const caf::node_id& node,
                    const std::string& type_name, const driver_actor& driver,
                    std::vector<membership> groups,
                    std::chrono::milliseconds timeout) {
  return sys.middleman().remote_spawn<caf::actor>(
    node, type_name, caf::make_message(driver, std::move(groups)), timeout);
}

} // namespace caf_collective
