#include "caf_collective/messages.hpp"

#include <mutex>

#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/node_id.hpp>
#include <caf/runtime_settings_map.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/member_ops.hpp"

namespace caf_collective {

void add_message_types(caf::actor_system_config& cfg) {
  add_object_store_types(cfg);
  add_error_category(cfg);
  cfg.add_message_type<membership>("caf_collective::membership");
  cfg.add_message_type<std::vector<membership>>(
    "std::vector<caf_collective::membership>");
  cfg.add_message_type<op_params>("caf_collective::op_params");
  cfg.add_message_type<member_op>("caf_collective::member_op");
  cfg.add_message_type<op_request>("caf_collective::op_request");
  cfg.add_message_type<op_result>("caf_collective::op_result");
  cfg.add_message_type<start_msg>("caf_collective::start_msg");
  cfg.add_message_type<group_status>("caf_collective::group_status");
  cfg.add_message_type<std::vector<caf::actor>>("std::vector<caf::actor>");
}

const char* to_cstr(op_source x) {
  return x == op_source::members ? "members" : "driver";
}

bool is_valid(op_source x) {
  return x == op_source::driver || x == op_source::members;
}

bool is_backend_name(const std::string& name) {
  return name == "gloo" || name == "shm" || name == "nccl" || name == "auto";
}

std::string node_name(caf::actor_system& sys) {
  if (sys.node()) return to_string(sys.node());
  // Without a middleman every system's node id is "invalid-node": number
  // the systems instead, remembering the number in the system itself.
  static std::mutex mtx;
  static uint64_t systems = 0;
  auto key = caf::atom("col_node");
  std::lock_guard<std::mutex> guard{mtx};
  auto number = sys.runtime_settings().get(key);
  if (!caf::holds_alternative<uint64_t>(number)) {
    number = ++systems;
    sys.runtime_settings().set(key, number);
  }
  return "local-" + std::to_string(::getpid()) + "-" +
         std::to_string(caf::get<uint64_t>(number));
}

object_store_ptr local_store(caf::actor_system& sys) {
  return object_store::for_node(node_name(sys));
}

} // namespace caf_collective
