// The actor layer from a consumer: an actor system with the layer's message
// types, a driver, and a tensor through the node's object store.
#include <cstdio>
#include <vector>

#include <caf/all.hpp>

#include <caf_collective/driver.hpp>
#include <caf_collective/messages.hpp>
#include <caf_collective/object_store.hpp>

namespace col = caf_collective;

int main() {
  caf::actor_system_config cfg;
  col::add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto driver = col::spawn_driver(sys);
  auto store = col::local_store(sys);
  auto ref = store->put(col::tensor::from_vector(std::vector<float>{1, 2, 3}));
  bool ok = false;
  if (ref) {
    auto view = store->get(*ref);
    ok = view && view->data_as<float>()[2] == 3.0f;
    ok = ok && !store->release(*ref);
  }
  caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
  std::printf("consumer_actors: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
