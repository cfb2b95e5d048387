#include "caf_collective/object_ref.hpp"

#include <caf/actor_system_config.hpp>

namespace caf_collective {

std::string to_string(const object_ref& x) {
  std::string result = "obj#" + std::to_string(x.id) + "@" + x.node + " ";
  result += to_string(x.type);
  result += '[';
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (i > 0) result += ',';
    result += std::to_string(x.shape[i]);
  }
  result += "] ";
  result += to_string(x.dev);
  return result;
}

void add_object_store_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<object_ref>("caf_collective::object_ref");
  cfg.add_message_type<std::vector<object_ref>>(
    "std::vector<caf_collective::object_ref>");
}

} // namespace caf_collective
