// Members on other nodes: separate processes with their own actor systems
// and object stores, joined to this process's driver through CAF's
// middleman. Their groups ask for the default backend, auto: the processes
// share this host, so tensors move through shared memory (shm) between them;
// one test asks for Gloo (TCP between the processes, as between hosts) by
// name. A node that dies mid-op turns into peer_lost for the client and the
// survivors.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/client_ops.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/member.hpp>

#include "node_protocol.hpp"

extern char** environ;

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

struct directory_state {
  caf::actor driver;
  std::map<int32_t, caf::actor> members;
  std::vector<caf::node_id> factories; // nodes that spawn on request
};

// Hands the driver to nodes and collects the members they spawned.
caf::behavior directory(caf::stateful_actor<directory_state>* self,
                        caf::actor driver) {
  self->state.driver = std::move(driver);
  return {
    [=](caf::get_atom) { return self->state.driver; },
    [=](caf::put_atom, int32_t rank, caf::actor& member) {
      self->state.members[rank] = std::move(member);
    },
    [=](caf::put_atom, const std::string&) {
      self->state.factories.push_back(self->current_sender()->node());
    },
    [=](caf::get_atom, const std::string&,
        int32_t index) -> caf::result<caf::node_id> {
      if (index < 0 ||
          static_cast<size_t>(index) >= self->state.factories.size())
        return caf::make_error(caf::sec::runtime_error,
                               "factory not announced yet");
      return self->state.factories[index];
    },
    [=](caf::get_atom, int32_t rank) -> caf::result<caf::actor> {
      auto i = self->state.members.find(rank);
      if (i == self->state.members.end())
        return caf::make_error(caf::sec::runtime_error,
                               "rank not announced yet");
      return i->second;
    },
  };
}

caf::actor_system_config& prepare(caf::actor_system_config& cfg,
                                  bool heartbeats) {
  cfg.load<caf::io::middleman>();
  col::add_message_types(cfg);
  node_test::add_types(cfg);
  if (heartbeats) node_test::enable_heartbeats(cfg);
  return cfg;
}

struct node_spec {
  int32_t first = 0;
  int32_t count = 1;
  int64_t delay_ms = 0;
};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

struct fixture {
  // Heartbeats on this node and every node it starts (node_protocol.hpp).
  bool heartbeats;
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self{sys};
  col::driver_actor driver = col::spawn_driver(sys);
  caf::actor dir = sys.spawn(directory, driver);
  uint16_t port = 0;
  std::vector<pid_t> nodes;
  std::vector<caf::actor> members; // by rank
  std::vector<caf::actor> spawned; // spawned by this process on the nodes
  // The backend the members of the nodes start_node starts ask for.
  std::string backend = col::default_backend;
  // Whether the nodes start_node starts bring a driver of their own
  // (node_protocol.hpp, own_driver_arg) instead of using this one.
  bool own_driver = false;

  explicit fixture(bool with_heartbeats = false)
    : heartbeats(with_heartbeats), sys(prepare(cfg, with_heartbeats)) {
    auto p = sys.middleman().publish(dir, 0, "127.0.0.1");
    REQUIRE(p);
    port = *p;
  }

  ~fixture() {
    // A node's actor system waits for every actor on it before it exits.
    for (auto& m : spawned)
      caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
    // Nodes stop when the directory goes away.
    caf::anon_send_exit(dir, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
    for (auto pid : nodes)
      CHECK(wait_node(pid, 60s) == 0);
  }

  pid_t start_node(const std::string& group, int32_t world,
                   const node_spec& spec, int64_t timeout_ms) {
    std::string exe = CAF_COLLECTIVE_NODE_PROCESS;
    std::vector<std::string> args{exe,
                                  std::to_string(port),
                                  group,
                                  std::to_string(world),
                                  std::to_string(spec.first),
                                  std::to_string(spec.count),
                                  std::to_string(timeout_ms),
                                  std::to_string(spec.delay_ms),
                                  node_test::backend_arg + backend};
    if (heartbeats) args.emplace_back(node_test::heartbeats_arg);
    if (own_driver) args.emplace_back(node_test::own_driver_arg);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(),
                        environ) == 0);
    nodes.push_back(pid);
    return pid;
  }

  // Waits for `pid`; kills it after `limit`. The exit status, -1 if it died
  // by a signal or had to be killed.
  static int wait_node(pid_t pid, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int status = 0;
      auto r = waitpid(pid, &status, WNOHANG);
      if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      if (r < 0) return -1; // reaped already
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
      }
      std::this_thread::sleep_for(10ms);
    }
  }

  // The actor a node announced under `rank` (the directory's protocol),
  // waiting for it up to 30 s.
  // Starts one node holding a driver of its own and both ranks of the
  // 2-rank group `group` (each op started `delay_ms` late), waits until the
  // group formed there, and returns that node's driver.
  caf::actor far_group(const std::string& group, int64_t delay_ms) {
    own_driver = true;
    start_node(group, 2, {0, 2, delay_ms}, 10000);
    auto far_driver = announced(node_test::driver_rank);
    REQUIRE(far_driver.node() != sys.node());
    members = {announced(0), announced(1)};
    REQUIRE(!col::await_group(self, far_driver, group, 30s));
    return far_driver;
  }

  caf::actor announced(int32_t rank) {
    caf::actor result;
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!result && std::chrono::steady_clock::now() < deadline) {
      self->request(dir, 5s, caf::get_atom::value, rank)
        .receive([&](caf::actor& m) { result = std::move(m); },
                 [](caf::error&) {});
      if (!result) std::this_thread::sleep_for(20ms);
    }
    REQUIRE(result);
    return result;
  }

  // Starts one process per spec and waits until group `group` is formed.
  void form(const std::string& group, int32_t world,
            const std::vector<node_spec>& specs, int64_t timeout_ms = 10000) {
    for (auto& spec : specs)
      start_node(group, world, spec, timeout_ms);
    members.clear();
    for (int32_t r = 0; r < world; ++r)
      members.push_back(announced(r));
    auto err = col::await_group(self, driver, group, 30s);
    INFO(col::render(err));
    REQUIRE(!err);
  }

  col::object_ref make(int32_t rank, int32_t n, float base) {
    col::object_ref result;
    self->request(members[rank], 10s, node_test::make_atom::value, n, base)
      .receive([&](col::object_ref& ref) { result = std::move(ref); },
               [&](caf::error& err) { FAIL(col::render(err)); });
    return result;
  }

  // Whether rank `rank`'s node still stores `ref` (reading it succeeds).
  bool holds(int32_t rank, const col::object_ref& ref) {
    bool result = false;
    self->request(members[rank], 10s, node_test::read_atom::value, ref)
      .receive([&](std::vector<float>&) { result = true; },
               [&](caf::error&) { result = false; });
    return result;
  }

  // Whether `done()` holds within 10 s (polled every 20 ms).
  template<class Pred>
  static bool soon(Pred done) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }

  // Whether rank `rank`'s node lets go of `ref` within 10 s.
  bool released_soon(int32_t rank, const col::object_ref& ref) {
    return soon([&] { return !holds(rank, ref); });
  }

  std::vector<float> read(int32_t rank, const col::object_ref& ref) {
    std::vector<float> result;
    self->request(members[rank], 10s, node_test::read_atom::value, ref)
      .receive([&](std::vector<float>& xs) { result = std::move(xs); },
               [&](caf::error& err) { FAIL(col::render(err)); });
    return result;
  }

  // Starts a node that spawns members on request and returns its id.
  caf::node_id start_factory(int32_t index) {
    std::string exe = CAF_COLLECTIVE_NODE_PROCESS;
    std::vector<std::string> args{exe, std::to_string(port), "factory"};
    if (heartbeats) args.emplace_back(node_test::heartbeats_arg);
    if (own_driver) args.emplace_back(node_test::own_driver_arg);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(),
                        environ) == 0);
    nodes.push_back(pid);
    caf::node_id result;
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!result && std::chrono::steady_clock::now() < deadline) {
      self
        ->request(dir, 5s, caf::get_atom::value, std::string{"factory"}, index)
        .receive([&](caf::node_id& id) { result = std::move(id); },
                 [](caf::error&) {});
      if (!result) std::this_thread::sleep_for(20ms);
    }
    REQUIRE(result);
    return result;
  }

  std::string node_of(int32_t rank) { return to_string(members[rank].node()); }

  // The backend the driver says `group` formed on.
  std::string backend_of(const std::string& group) {
    auto st = col::status_of(self, driver, group, 10s);
    REQUIRE(st);
    return st->backend;
  }
};

std::vector<float> iota(int32_t n, float base) {
  std::vector<float> xs(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    xs[i] = base + static_cast<float>(i);
  return xs;
}

} // namespace

TEST_CASE("members on two other nodes run collectives on their own nodes' "
          "tensors through this node's driver") {
  fixture f;
  // Node A holds ranks 0 and 1, node B rank 2.
  f.form("nodes", 3, {{0, 2, 0}, {2, 1, 0}});
  CHECK(f.node_of(0) == f.node_of(1));
  CHECK(f.node_of(0) != f.node_of(2));
  CHECK(f.node_of(0) != col::node_name(f.sys));
  // auto: the two processes share this host.
  CHECK(f.backend_of("nodes") == "shm");
  constexpr int32_t n = 3000; // above the small-message path
  std::vector<col::object_ref> xs;
  for (int32_t r = 0; r < 3; ++r)
    xs.push_back(f.make(r, n, 1000.0f * static_cast<float>(r)));
  CHECK(xs[0].node == f.node_of(0));
  CHECK(xs[2].node == f.node_of(2));

  SUBCASE("allreduce in place") {
    auto res = col::run_op(f.self, f.driver,
                           {"nodes", col::op_kind::allreduce, xs, {}}, 20s);
    REQUIRE(res);
    std::vector<float> want(n);
    for (int32_t i = 0; i < n; ++i)
      want[i] = 3000.0f + 3.0f * static_cast<float>(i);
    for (int32_t r = 0; r < 3; ++r)
      CHECK(f.read(r, xs[r]) == want);
  }
  SUBCASE("allgather: each rank's output is a new ref on its own node") {
    auto res = col::run_op(f.self, f.driver,
                           {"nodes", col::op_kind::allgather, xs, {}}, 20s);
    REQUIRE(res);
    REQUIRE(res->refs.size() == 3);
    std::vector<float> want;
    for (int32_t r = 0; r < 3; ++r) {
      auto part = iota(n, 1000.0f * static_cast<float>(r));
      want.insert(want.end(), part.begin(), part.end());
    }
    for (int32_t r = 0; r < 3; ++r) {
      CHECK(res->refs[r].node == f.node_of(r));
      CHECK(f.read(r, res->refs[r]) == want);
    }
  }
  SUBCASE("send from node B to node A, then a collective on all ranks") {
    col::op_params p;
    p.root = 2;
    p.peer = 0;
    auto sent = col::run_op(
      f.self, f.driver, {"nodes", col::op_kind::send, {{}, {}, xs[2]}, p}, 20s);
    REQUIRE(sent);
    REQUIRE(sent->refs.size() == 3);
    CHECK(sent->refs[0].node == f.node_of(0));
    CHECK(f.read(0, sent->refs[0]) == iota(n, 2000.0f));
    auto bar = col::run_op(f.self, f.driver,
                           {"nodes", col::op_kind::barrier, {}, {}}, 20s);
    CHECK(bar);
  }
  SUBCASE("a ref named for the wrong rank's node is refused before any data "
          "moves") {
    auto swapped = xs;
    std::swap(swapped[0], swapped[2]);
    auto res = col::run_op(
      f.self, f.driver, {"nodes", col::op_kind::allreduce, swapped, {}}, 20s);
    REQUIRE(!res);
    CHECK(col::code_of(res.error()) == col::errc::unknown_object);
    CHECK(contains(col::render(res.error()), "ranks [0, 2]"));
    CHECK(f.read(0, xs[0]) == iota(n, 0.0f)); // untouched
  }
}

TEST_CASE("an input its member checked for the driver stays the op's when "
          "it is released before the member takes the start: the op "
          "succeeds on both ranks") {
  fixture f;
  // Both ranks on one node; rank 1's member takes its start 3 s late.
  setenv(node_test::slow_start_env, "1", 1);
  f.start_node("checked", 2, {0, 2, 0}, 8000);
  unsetenv(node_test::slow_start_env);
  f.members = {f.announced(0), f.announced(1)};
  REQUIRE(!col::await_group(f.self, f.driver, "checked", 30s));
  std::vector<col::object_ref> xs{f.make(0, 2, 1.0f), f.make(1, 2, 3.0f)};
  auto requested = std::chrono::steady_clock::now();
  auto pending = f.self->request(
    f.driver, 20s,
    col::op_request{"checked", col::op_kind::allreduce, xs, col::op_params{}});
  // Both members checked their refs (the driver started the op once rank
  // 0's lane lists it); rank 1 still sleeps before its start.
  std::string history;
  CHECK(fixture::soon([&] {
    f.self
      ->request(f.members[0], 2s, col::history_atom::value,
                std::string{"checked"})
      .receive([&](std::string& h) { history = std::move(h); },
               [](caf::error&) {});
    return contains(history, "allreduce");
  }));
  // Rank 1's input is released through rank 0's member (same node, same
  // store), which is not held up.
  bool released = false;
  f.self->request(f.members[0], 5s, col::release_atom::value, xs[1])
    .receive([&](caf::ok_atom) { released = true; },
             [](caf::error& err) { FAIL(col::render(err)); });
  REQUIRE(released);
  // Else the release may have come after the start, and proves nothing.
  REQUIRE(std::chrono::steady_clock::now() - requested < 2500ms);
  CHECK(!f.holds(0, xs[1]));
  bool ok = false;
  pending.receive([&](col::op_result&) { ok = true; },
                  [](caf::error& err) { FAIL(col::render(err)); });
  CHECK(ok);
  // Rank 1 took its start late indeed (else nothing was shown).
  CHECK(std::chrono::steady_clock::now() - requested >= 2900ms);
  CHECK(f.read(0, xs[0]) == std::vector<float>{4, 6});
}

TEST_CASE("members on two other nodes asking for gloo by name run an "
          "allreduce and an allgather over TCP between the processes") {
  fixture f;
  f.backend = "gloo";
  f.form("tcp", 3, {{0, 2, 0}, {2, 1, 0}});
  CHECK(f.backend_of("tcp") == "gloo");
  constexpr int32_t n = 3000;
  std::vector<col::object_ref> xs;
  for (int32_t r = 0; r < 3; ++r)
    xs.push_back(f.make(r, n, 1000.0f * static_cast<float>(r)));
  auto gathered = col::run_op(f.self, f.driver,
                              {"tcp", col::op_kind::allgather, xs, {}}, 20s);
  REQUIRE(gathered);
  std::vector<float> all;
  for (int32_t r = 0; r < 3; ++r) {
    auto part = iota(n, 1000.0f * static_cast<float>(r));
    all.insert(all.end(), part.begin(), part.end());
  }
  for (int32_t r = 0; r < 3; ++r)
    CHECK(f.read(r, gathered->refs[r]) == all);
  auto res = col::run_op(f.self, f.driver,
                         {"tcp", col::op_kind::allreduce, xs, {}}, 20s);
  REQUIRE(res);
  std::vector<float> want(n);
  for (int32_t i = 0; i < n; ++i)
    want[i] = 3000.0f + 3.0f * static_cast<float>(i);
  for (int32_t r = 0; r < 3; ++r)
    CHECK(f.read(r, xs[r]) == want);
}

TEST_CASE("an actor's requests to a driver on another node reach it in the "
          "order the actor sent them") {
  fixture f;
  auto far_driver = f.far_group("order", 0);
  // The driver numbers a group's ops as their requests arrive: the
  // sequence numbers of the answers show the order of arrival.
  constexpr size_t n = 24;
  auto seqs = std::make_shared<std::promise<std::vector<int64_t>>>();
  auto got = seqs->get_future();
  auto typed = col::typed_driver(far_driver);
  f.sys.spawn([=](caf::event_based_actor* self) {
    auto by_request = std::make_shared<std::vector<int64_t>>(n, -1);
    auto left = std::make_shared<size_t>(n);
    for (size_t i = 0; i < n; ++i)
      col::barrier(self, typed, "order")
        .then(
          [=](col::op_result& r) {
            (*by_request)[i] = static_cast<int64_t>(r.seq);
            if (--*left == 0) seqs->set_value(*by_request);
          },
          [=](caf::error&) {
            if (--*left == 0) seqs->set_value(*by_request);
          });
  });
  REQUIRE(got.wait_for(30s) == std::future_status::ready);
  auto by_request = got.get();
  for (size_t i = 0; i < n; ++i) {
    INFO("request " << i);
    CHECK(by_request[i] >= 0); // answered with a result
    if (i > 0) CHECK(by_request[i] == by_request[i - 1] + 1);
  }
}

TEST_CASE("an actor's outputs through a relay are the actor's: they outlive "
          "the relay and are released on their node when the actor ends") {
  fixture f;
  auto far_driver = f.far_group("owned", 0);
  std::vector<col::object_ref> xs{f.make(0, 8, 1.0f), f.make(1, 8, 2.0f)};
  auto typed = col::typed_driver(far_driver);
  auto answer = std::make_shared<std::promise<caf::expected<col::op_result>>>();
  auto answered = answer->get_future();
  // The client keeps running after its answer, until it is stopped.
  auto client = f.sys.spawn([=](caf::event_based_actor* self) -> caf::behavior {
    col::allgather(self, typed, "owned", xs)
      .then([=](col::op_result& res) { answer->set_value(std::move(res)); },
            [=](caf::error& err) { answer->set_value(std::move(err)); });
    return {[](caf::ok_atom) {}};
  });
  REQUIRE(answered.wait_for(30s) == std::future_status::ready);
  auto res = answered.get();
  REQUIRE_MESSAGE(res, col::render(res.error()));
  REQUIRE(res->refs.size() == 2);
  // The relay quits once it has no request left; the outputs do not go
  // with it.
  std::this_thread::sleep_for(1s);
  for (int32_t r = 0; r < 2; ++r)
    CHECK(f.holds(r, res->refs[r]));
  caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  CHECK(f.released_soon(0, res->refs[0]));
  CHECK(f.released_soon(1, res->refs[1]));
  CHECK(f.holds(0, xs[0])); // the inputs stay
}

TEST_CASE("an output handed to an actor of another node stays there while "
          "that actor lives and is released when it ends") {
  fixture f;
  auto far_driver = f.far_group("handed", 0);
  std::vector<col::object_ref> xs{f.make(0, 8, 1.0f), f.make(1, 8, 2.0f)};
  auto typed = col::typed_driver(far_driver);
  // An actor of this node that lives until it is stopped.
  auto keeper = f.sys.spawn([]() -> caf::behavior { return {[](int) {}}; });
  auto to = keeper.address();
  auto answer = std::make_shared<std::promise<caf::expected<col::op_result>>>();
  auto answered = answer->get_future();
  // The client hands rank 0's output to the keeper, through the relay.
  auto client = f.sys.spawn([=](caf::event_based_actor* self) -> caf::behavior {
    col::allgather(self, typed, "handed", xs)
      .then(
        [=](col::op_result& res) {
          col::hand_over(self, typed, res.refs[0], to)
            .then([=](caf::ok_atom) { answer->set_value(res); },
                  [=](caf::error& err) { answer->set_value(std::move(err)); });
        },
        [=](caf::error& err) { answer->set_value(std::move(err)); });
    return {[](caf::ok_atom) {}};
  });
  REQUIRE(answered.wait_for(30s) == std::future_status::ready);
  auto res = answered.get();
  REQUIRE_MESSAGE(res, col::render(res.error()));
  REQUIRE(res->refs.size() == 2);
  caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  CHECK(f.released_soon(1, res->refs[1])); // not handed over
  std::this_thread::sleep_for(500ms);
  CHECK(f.holds(0, res->refs[0]));
  caf::anon_send_exit(keeper, caf::exit_reason::user_shutdown);
  CHECK(f.released_soon(0, res->refs[0]));
  CHECK(f.holds(0, xs[0])); // the inputs stay
}

TEST_CASE("an object handed to an actor of another node is released when "
          "that node is killed") {
  fixture f;
  f.form("keeper", 1, {{0, 1, 0}}); // its member will own the object
  auto store = col::local_store(f.sys);
  auto ref = store->put(col::tensor::from_vector(std::vector<float>{1, 2, 3}));
  REQUIRE(ref);
  auto err = col::hand_over(f.self, col::typed_driver(f.driver), *ref,
                            f.members[0].address());
  REQUIRE_MESSAGE(!err, col::render(err));
  std::this_thread::sleep_for(500ms);
  CHECK(store->contains(*ref));
  kill(f.nodes[0], SIGKILL);
  CHECK(fixture::wait_node(f.nodes[0], 10s) == -1);
  f.nodes.pop_back();
  // CAF ends the proxies of a lost node, which runs the owner's watch.
  CHECK(fixture::soon([&] { return !store->contains(*ref); }));
}

TEST_CASE("clients of a driver on another node - blocking ones and actors - "
          "get an error naming the op soon after that node is killed mid-op "
          "- no hang") {
  fixture f;
  // The node holds the driver and both ranks, which start each op 4 s late:
  // the op is surely unanswered when the node is killed.
  auto far_driver = f.far_group("far", 4000);
  std::vector<col::object_ref> xs{f.make(0, 100, 1.0f), f.make(1, 100, 2.0f)};
  auto spare = f.make(0, 10, 0.0f);
  // An actor releases a ref through the far driver (answered: the relay
  // passes answers on), then asks for a second allreduce through the typed
  // helper's response handle: its error handler must run, with no monitor
  // of its own. (The promises are shared: the actor may outlive a failed
  // check.)
  auto actor_released = std::make_shared<std::promise<caf::error>>();
  auto actor_heard = std::make_shared<std::promise<caf::error>>();
  auto released = actor_released->get_future();
  auto heard = actor_heard->get_future();
  auto typed = col::typed_driver(far_driver);
  f.sys.spawn([=](caf::event_based_actor* self) {
    col::release(self, typed, spare)
      .then(
        [=](caf::ok_atom) {
          actor_released->set_value(caf::error{});
          col::allreduce(self, typed, "far", xs)
            .then(
              [=](col::op_result&) {
                actor_heard->set_value(
                  caf::make_error(caf::sec::unexpected_response));
              },
              [=](caf::error& err) { actor_heard->set_value(std::move(err)); });
        },
        [=](caf::error& err) { actor_released->set_value(std::move(err)); });
  });
  REQUIRE(released.wait_for(10s) == std::future_status::ready);
  auto release_err = released.get();
  REQUIRE_MESSAGE(!release_err, col::render(release_err));
  std::thread killer([&] {
    std::this_thread::sleep_for(500ms);
    kill(f.nodes[0], SIGKILL);
  });
  auto t0 = std::chrono::steady_clock::now();
  // The typed helper waits without a timer: CAF 0.17 answers nothing for a
  // node that is lost, so only the client's watch ends this wait.
  auto res = col::allreduce(f.self, col::typed_driver(far_driver), "far", xs);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  killer.join();
  REQUIRE(!res);
  auto text = col::render(res.error());
  INFO(text);
  CHECK(col::code_of(res.error()) == col::errc::aborted);
  CHECK(contains(text, "group 'far' allreduce"));
  CHECK(contains(text, "went away"));
  CHECK(elapsed < 3s); // the members' 4 s delay never ended
  // The actor's request went through a relay that watched the driver.
  REQUIRE(heard.wait_for(3s) == std::future_status::ready);
  auto actor_err = heard.get();
  auto actor_text = col::render(actor_err);
  INFO(actor_text);
  CHECK(col::code_of(actor_err) == col::errc::aborted);
  CHECK(contains(actor_text, "group 'far' allreduce"));
  CHECK(contains(actor_text, "went away"));
  // With a timeout of its own, a later request to that driver ends at once.
  t0 = std::chrono::steady_clock::now();
  auto later = col::run_op(f.self, far_driver,
                           {"far", col::op_kind::barrier, {}, {}}, 20s);
  REQUIRE(!later);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  // A blocking release through the lost driver ends at once, naming the
  // object (before: an error naming nothing).
  auto lost_release =
    col::release(f.self, col::typed_driver(far_driver), xs[1]);
  auto lost_text = col::render(lost_release);
  INFO(lost_text);
  CHECK(col::code_of(lost_release) == col::errc::aborted);
  CHECK(contains(lost_text, "release of object " + std::to_string(xs[1].id)));
  CHECK(fixture::wait_node(f.nodes[0], 10s) == -1);
  f.nodes.pop_back();
}

TEST_CASE("a node killed mid-op: the client gets peer_lost naming its rank, "
          "the survivors on the other node abort and stay usable") {
  fixture f;
  // Rank 2's node waits 4 s before running each op, so the op is surely
  // in flight on ranks 0 and 1 when the node is killed.
  f.form("nodes", 3, {{0, 2, 0}, {2, 1, 4000}}, 8000);
  constexpr int32_t n = 1000;
  std::vector<col::object_ref> xs;
  for (int32_t r = 0; r < 3; ++r)
    xs.push_back(f.make(r, n, static_cast<float>(r)));
  auto t0 = std::chrono::steady_clock::now();
  auto pending = f.self->request(
    f.driver, 30s, col::op_request{"nodes", col::op_kind::allreduce, xs, {}});
  std::this_thread::sleep_for(500ms);
  kill(f.nodes[1], SIGKILL);
  caf::error err;
  pending.receive([](col::op_result&) {}, [&](caf::error& e) { err = e; });
  auto elapsed = std::chrono::steady_clock::now() - t0;
  REQUIRE(err);
  CHECK(col::code_of(err) == col::errc::peer_lost);
  auto text = col::render(err);
  INFO(text);
  CHECK(contains(text, "rank 2 died"));
  CHECK(contains(text, "group 'nodes'"));
  // Well before the op's own 8 s deadline: the lost connection is the news.
  CHECK(elapsed < 7s);
  // The survivors were told and report the group broken, naming rank 2.
  for (int32_t r = 0; r < 2; ++r) {
    auto st = col::status_of(f.self, f.members[r], "nodes", 10s);
    REQUIRE(st);
    CHECK(st->state == "broken");
    CHECK(contains(col::render(st->reason), "rank 2 died"));
  }
  // The killed node is gone for good.
  CHECK(fixture::wait_node(f.nodes[1], 10s) == -1);
  f.nodes.pop_back();
  // The driver stays up; the survivors form a new group and run an op.
  REQUIRE(!col::destroy_group(f.self, f.driver, "nodes", 10s));
  auto declared =
    col::declare_group(f.self, f.driver, "pair", {f.members[0], f.members[1]},
                       col::default_backend, 20s);
  INFO(col::render(declared));
  REQUIRE(!declared);
  std::vector<col::object_ref> ys{f.make(0, n, 10.0f), f.make(1, n, 20.0f)};
  auto res = col::run_op(f.self, f.driver,
                         {"pair", col::op_kind::allreduce, ys, {}}, 20s);
  INFO((res ? std::string{"ok"} : col::render(res.error())));
  REQUIRE(res);
  std::vector<float> want(n);
  for (int32_t i = 0; i < n; ++i)
    want[i] = 30.0f + 2.0f * static_cast<float>(i);
  CHECK(f.read(0, ys[0]) == want);
  CHECK(f.read(1, ys[1]) == want);
}

TEST_CASE("a frozen node (SIGSTOP) is declared lost by the middleman's "
          "heartbeats: peer_lost before the op's deadline - and a release of "
          "an object there ends too") {
  fixture f{true};
  f.form("nodes", 3, {{0, 2, 0}, {2, 1, 0}}, 20000);
  constexpr int32_t n = 1000;
  std::vector<col::object_ref> xs;
  for (int32_t r = 0; r < 3; ++r)
    xs.push_back(f.make(r, n, static_cast<float>(r)));
  // A frozen process keeps its sockets open and its pid alive: the backend
  // alone (Gloo or shm) would wait for the 20 s deadline.
  kill(f.nodes[1], SIGSTOP);
  // kill() returns before the node has stopped: until it has, the node may
  // still run its part of the op, which then succeeds (seen once in CI).
  int stopped = 0;
  REQUIRE(waitpid(f.nodes[1], &stopped, WUNTRACED) == f.nodes[1]);
  REQUIRE(WIFSTOPPED(stopped));
  auto t0 = std::chrono::steady_clock::now();
  // Meanwhile a client releases rank 2's object through the driver, which
  // hands the release to the frozen node: it must end with the node's loss
  // (the typed helper has no timeout of its own).
  auto release = std::async(std::launch::async, [&] {
    caf::scoped_actor client{f.sys};
    auto err = col::release(client, col::typed_driver(f.driver), xs[2]);
    return std::make_pair(err, std::chrono::steady_clock::now() - t0);
  });
  auto res = col::run_op(f.self, f.driver,
                         {"nodes", col::op_kind::allreduce, xs, {}}, 30s);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  REQUIRE(release.wait_for(15s) == std::future_status::ready);
  auto [release_err, release_elapsed] = release.get();
  kill(f.nodes[1], SIGKILL);
  CHECK(fixture::wait_node(f.nodes[1], 10s) == -1);
  f.nodes.pop_back();
  REQUIRE(!res);
  auto text = col::render(res.error());
  INFO(text);
  CHECK(col::code_of(res.error()) == col::errc::peer_lost);
  CHECK(contains(text, "rank 2 died"));
  CHECK(elapsed < 15s);
  for (int32_t r = 0; r < 2; ++r) {
    auto st = col::status_of(f.self, f.members[r], "nodes", 10s);
    REQUIRE(st);
    CHECK(st->state == "broken");
  }
  REQUIRE(release_err);
  auto release_text = col::render(release_err);
  INFO(release_text);
  CHECK(col::code_of(release_err) == col::errc::aborted);
  CHECK(
    contains(release_text, "release of object " + std::to_string(xs[2].id)));
  CHECK(contains(release_text, "went away"));
  CHECK(release_elapsed < 15s);
}

TEST_CASE("the driver's node spawns members on other nodes (remote spawn, "
          "membership included) and they form a group") {
  fixture f;
  auto a = f.start_factory(0);
  auto b = f.start_factory(1);
  REQUIRE(a != b);
  // A type the node does not know is refused.
  auto unknown = col::spawn_remote_member(
    f.sys, a, "no_such_type", f.driver,
    {{"spawned", 0, 3, col::default_backend, 10000, 0}});
  CHECK(!unknown);
  std::vector<caf::node_id> where{a, a, b};
  f.members.resize(3);
  for (int32_t r = 0; r < 3; ++r) {
    auto m = col::spawn_remote_member(
      f.sys, where[r], "test_worker", f.driver,
      {{"spawned", r, 3, col::default_backend, 10000, 0}});
    INFO((m ? std::string{"ok"} : col::render(m.error())));
    REQUIRE(m);
    CHECK(m->node() == where[r]);
    f.members[r] = *m;
    f.spawned.push_back(*m);
  }
  auto formed = col::await_group(f.self, f.driver, "spawned", 30s);
  INFO(col::render(formed));
  REQUIRE(!formed);
  constexpr int32_t n = 2000;
  std::vector<col::object_ref> xs;
  for (int32_t r = 0; r < 3; ++r)
    xs.push_back(f.make(r, n, 100.0f * static_cast<float>(r)));
  CHECK(xs[2].node == to_string(b));
  auto res = col::run_op(f.self, f.driver,
                         {"spawned", col::op_kind::allreduce, xs, {}}, 20s);
  REQUIRE(res);
  std::vector<float> want(n);
  for (int32_t i = 0; i < n; ++i)
    want[i] = 300.0f + 3.0f * static_cast<float>(i);
  for (int32_t r = 0; r < 3; ++r)
    CHECK(f.read(r, xs[r]) == want);
  // The driver monitors remote-spawned members like any other (from their
  // registration on): node b's death breaks the group, naming rank 2.
  kill(f.nodes[1], SIGKILL);
  CHECK(fixture::wait_node(f.nodes[1], 10s) == -1);
  f.nodes.pop_back();
  caf::expected<col::group_status> st = col::group_status{};
  auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    std::this_thread::sleep_for(20ms);
    st = col::status_of(f.self, f.driver, "spawned", 5s);
    REQUIRE(st);
  } while (st->state == "ready" && std::chrono::steady_clock::now() < deadline);
  CHECK(st->state == "broken");
  CHECK(col::code_of(st->reason) == col::errc::peer_lost);
  CHECK(contains(col::render(st->reason), "rank 2 died"));
}

TEST_CASE("a node holding ranks 0 and 1 killed mid-op: the client's "
          "peer_lost names both ranks and the op that was running") {
  fixture f;
  // Node A (ranks 0, 1) waits 4 s before running each op, so rank 2 on
  // node B is surely inside the op when node A is killed.
  f.form("nodes", 3, {{0, 2, 4000}, {2, 1, 0}}, 8000);
  constexpr int32_t n = 1000;
  std::vector<col::object_ref> xs;
  for (int32_t r = 0; r < 3; ++r)
    xs.push_back(f.make(r, n, static_cast<float>(r)));
  auto t0 = std::chrono::steady_clock::now();
  auto pending = f.self->request(
    f.driver, 30s, col::op_request{"nodes", col::op_kind::allreduce, xs, {}});
  std::this_thread::sleep_for(500ms);
  auto killed = f.nodes[0];
  kill(killed, SIGKILL);
  caf::error err;
  pending.receive([](col::op_result&) {}, [&](caf::error& e) { err = e; });
  auto elapsed = std::chrono::steady_clock::now() - t0;
  CHECK(fixture::wait_node(f.nodes[0], 10s) == -1);
  f.nodes.erase(f.nodes.begin());
  REQUIRE(err);
  auto text = col::render(err);
  INFO(text);
  CHECK(col::code_of(err) == col::errc::peer_lost);
  CHECK(contains(text, "ranks [0, 1] died"));
  // The lost node is named: CAF's node id ends in its process id.
  CHECK(contains(text, "#" + std::to_string(killed) + " is unreachable"));
  CHECK(contains(text, "allreduce seq 0"));
  CHECK(elapsed < 7s);
  auto st = col::status_of(f.self, f.members[2], "nodes", 10s);
  REQUIRE(st);
  CHECK(st->state == "broken");
  CHECK(contains(col::render(st->reason), "ranks [0, 1] died"));
}
