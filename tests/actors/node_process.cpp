// One node of the multi-node test: a separate process with its own actor
// system and object store, joined to the test's driver through CAF's
// middleman. Usage:
//   node_process <port> <group> <world size> <first rank> <count>
//                <timeout ms> <start delay ms>
//     spawns members with ranks [first, first + count) of <group>;
//     (ending in "own_driver": with a driver of its own, announced as
//     rank -1, instead of the test's);
//   node_process <port> factory
//     spawns nothing: the test spawns members here (remote spawn of the
//     member type "test_worker").
// Either form may end in "heartbeats" to turn on the middleman's
// heartbeats (the test process then uses them too). The first form may end
// in "backend=<name>" (before "heartbeats"): the backend its members ask
// for; default auto (shm, since the test's nodes share this host).
// With CAF_COLLECTIVE_TEST_SLOW_START_RANK=<rank> in its environment, that
// rank's member takes each driver start 3 s late.
// Lives until the test's directory actor goes away.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/tensor.hpp>

#include "member_test_hooks.hpp"
#include "node_protocol.hpp"

namespace col = caf_collective;

namespace {

// A worker that makes and reads tensors in its own node's store.
caf::behavior node_worker(caf::event_based_actor* self) {
  auto store = col::local_store(self->system());
  return {
    [store](node_test::make_atom, int32_t n,
            float base) -> caf::result<col::object_ref> {
      auto t =
        col::tensor::empty(col::dtype::float32, {static_cast<int64_t>(n)});
      if (!t) return std::move(t.error());
      auto* p = static_cast<float*>(t->data());
      for (int32_t i = 0; i < n; ++i)
        p[i] = base + static_cast<float>(i);
      auto ref = store->put(std::move(*t));
      if (!ref) return std::move(ref.error());
      return std::move(*ref);
    },
    [store](node_test::read_atom,
            const col::object_ref& ref) -> caf::result<std::vector<float>> {
      auto view = store->get(ref);
      if (!view) return std::move(view.error());
      auto* p = view->data_as<float>();
      return std::vector<float>(p, p + view->numel());
    },
  };
}

// With node_test::slow_start_env set to a rank, that rank's member takes
// every start 3 s late (its handler sleeps first): a test then releases
// the rank's input between the driver's check and the start.
void slow_down_starts() {
  const char* rank = std::getenv(node_test::slow_start_env);
  if (rank == nullptr) return;
  static const int32_t slow_rank = static_cast<int32_t>(std::atoi(rank));
  col::detail::before_start_test_hook = [](const std::string&, int32_t r) {
    if (r == slow_rank)
      std::this_thread::sleep_for(std::chrono::milliseconds{3000});
  };
}

} // namespace

// Connects to the directory, announces this node as a factory and waits
// until the directory goes away.
int serve_as_factory(caf::actor_system& sys, const caf::actor& dir) {
  caf::scoped_actor self{sys};
  self->send(dir, caf::put_atom::value, std::string{"factory"});
  self->monitor(dir);
  self->receive([](caf::down_msg&) {},
                caf::after(std::chrono::minutes{5}) >> [] {});
  return 0;
}

int main(int argc, char** argv) {
  bool own_driver =
    argc > 1 && std::string{argv[argc - 1]} == node_test::own_driver_arg;
  if (own_driver) --argc;
  bool heartbeats =
    argc > 1 && std::string{argv[argc - 1]} == node_test::heartbeats_arg;
  if (heartbeats) --argc;
  std::string backend = col::default_backend;
  std::string prefix = node_test::backend_arg;
  if (argc > 1 && std::string{argv[argc - 1]}.rfind(prefix, 0) == 0) {
    backend = std::string{argv[argc - 1]}.substr(prefix.size());
    --argc;
  }
  if (argc == 3 && std::string{argv[2]} == "factory") {
    caf::actor_system_config cfg;
    cfg.load<caf::io::middleman>();
    cfg.set("scheduler.max-threads", 2);
    col::add_message_types(cfg);
    node_test::add_types(cfg);
    if (heartbeats) node_test::enable_heartbeats(cfg);
    col::add_member_type(cfg, "test_worker", node_worker);
    caf::actor_system sys{cfg};
    auto dir = sys.middleman().remote_actor(
      "127.0.0.1", static_cast<uint16_t>(std::atoi(argv[1])));
    if (!dir) {
      std::fprintf(stderr, "node: cannot reach the directory: %s\n",
                   sys.render(dir.error()).c_str());
      return 3;
    }
    return serve_as_factory(sys, *dir);
  }
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: %s port group world first count timeout_ms "
                 "delay_ms [backend=<name>] [heartbeats]\n",
                 argv[0]);
    return 2;
  }
  auto port = static_cast<uint16_t>(std::atoi(argv[1]));
  std::string group = argv[2];
  auto world = static_cast<int32_t>(std::atoi(argv[3]));
  auto first = static_cast<int32_t>(std::atoi(argv[4]));
  auto count = static_cast<int32_t>(std::atoi(argv[5]));
  int64_t timeout_ms = std::atoll(argv[6]);
  int64_t delay_ms = std::atoll(argv[7]);
  slow_down_starts();
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", 2);
  col::add_message_types(cfg);
  node_test::add_types(cfg);
  if (heartbeats) node_test::enable_heartbeats(cfg);
  caf::actor_system sys{cfg};
  auto dir = sys.middleman().remote_actor("127.0.0.1", port);
  if (!dir) {
    std::fprintf(stderr, "node: cannot reach the directory: %s\n",
                 sys.render(dir.error()).c_str());
    return 3;
  }
  std::vector<caf::actor> members;
  caf::actor driver;
  {
    caf::scoped_actor self{sys};
    if (own_driver) {
      driver = col::spawn_driver(sys);
      self->send(*dir, caf::put_atom::value, node_test::driver_rank, driver);
    } else {
      self->request(*dir, std::chrono::seconds{10}, caf::get_atom::value)
        .receive([&](caf::actor& d) { driver = std::move(d); },
                 [&](caf::error& err) {
                   std::fprintf(stderr, "node: no driver: %s\n",
                                sys.render(err).c_str());
                 });
    }
    if (!driver) return 4;
    for (int32_t rank = first; rank < first + count; ++rank) {
      col::membership m{group, rank, world, backend, timeout_ms, delay_ms};
      members.push_back(
        col::spawn_member(sys, driver, {std::move(m)}, node_worker));
      self->send(*dir, caf::put_atom::value, rank, members.back());
    }
    // The test owns this process's lifetime: when its directory goes away
    // (or after a generous limit, should the test itself be killed), stop.
    self->monitor(*dir);
    self->receive([](caf::down_msg&) {},
                  caf::after(std::chrono::minutes{5}) >> [] {});
  }
  for (auto& m : members)
    caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
  if (own_driver) caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
  return 0;
}
