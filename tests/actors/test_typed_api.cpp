// The typed client path: groups spawned from a group_spec, one helper per
// op on the driver's typed view (blocking from a scoped actor, response
// handles from an actor), results read back with read_vector, and member
// types whose functions learn their rank.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <future>
#include <thread>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/client_ops.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/interfaces.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/object_refs.hpp>
#include <caf_collective/read.hpp>

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

using rank_atom = caf::atom_constant<caf::atom("t_rank")>;
using go_atom = caf::atom_constant<caf::atom("t_go")>;

caf::behavior tells_rank(caf::event_based_actor*, int32_t rank) {
  return {[rank](rank_atom) { return rank; }};
}

struct fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  col::driver_actor driver;
  col::driver_api typed;
  col::object_store_ptr store;
  std::vector<caf::actor> actors;

  fixture()
    : sys((col::add_message_types(cfg),
           col::add_member_type(cfg, "ranked", tells_rank), cfg)),
      driver(col::spawn_driver(sys)), typed(col::typed_driver(driver)),
      store(col::local_store(sys)) {
    // nop
  }

  ~fixture() {
    for (auto& a : actors)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
  }

  /// Spawns `spec`'s members (stopped with the fixture) and waits until the
  /// group formed.
  std::vector<col::member_actor> group(caf::scoped_actor& self,
                                       const col::group_spec& spec) {
    auto ms = col::spawn_group(sys, driver, spec, tells_rank);
    actors.insert(actors.end(), ms.begin(), ms.end());
    REQUIRE(!col::await_group(self, driver, spec.name, 15s));
    return ms;
  }

  std::vector<col::object_ref> put_each(int ws, float base) {
    std::vector<col::object_ref> refs;
    for (int r = 0; r < ws; ++r) {
      auto ref = store->put(
        col::tensor::from_vector(std::vector<float>{base + r, base + 10 * r}));
      REQUIRE(ref);
      refs.push_back(*ref);
    }
    return refs;
  }
};

} // namespace

TEST_CASE("groups spawned from a group_spec run ops through the typed "
          "blocking helpers") {
  fixture f;
  caf::scoped_actor self{f.sys};
  col::group_spec spec;
  spec.name = "typed";
  spec.world_size = 3;
  spec.timeout = 10s;
  auto ms = f.group(self, spec);
  for (int32_t r = 0; r < 3; ++r)
    self->request(ms[r], 5s, rank_atom::value)
      .receive([&](int32_t x) { CHECK(x == r); },
               [&](caf::error& err) { FAIL(col::render(err)); });

  auto refs = f.put_each(3, 1.0f); // rank r: {1 + r, 1 + 10 r}
  col::allreduce_options sum;
  auto res = col::allreduce(self, f.typed, "typed", refs, sum);
  REQUIRE(res);
  for (auto& ref : res->refs) {
    auto xs = col::read_vector<float>(*f.store, ref);
    REQUIRE(xs);
    CHECK(*xs == std::vector<float>{6, 33});
  }

  col::broadcast_options from2;
  from2.root = 2;
  refs = f.put_each(3, 0.0f);
  res = col::broadcast(self, f.typed, "typed", refs, from2);
  REQUIRE(res);
  CHECK(col::read_vector<float>(*f.store, res->refs[0]).value() ==
        std::vector<float>{2, 20});

  res = col::allgather(self, f.typed, "typed", f.put_each(3, 0.0f));
  REQUIRE(res);
  CHECK(col::read_vector<float>(*f.store, res->refs[1]).value() ==
        std::vector<float>{0, 0, 1, 10, 2, 20});

  auto p2p = std::vector<col::object_ref>(3);
  p2p[0] = f.put_each(1, 5.0f)[0];
  res = col::send_recv(self, f.typed, "typed", p2p, 0, 2);
  REQUIRE(res);
  CHECK(col::read_vector<float>(*f.store, res->refs[2]).value() ==
        std::vector<float>{5, 5});

  REQUIRE(col::barrier(self, f.typed, "typed"));

  // A result read as the wrong type is refused, naming both.
  auto wrong = col::read_vector<int32_t>(*f.store, res->refs[2]);
  REQUIRE(!wrong);
  CHECK(col::render(wrong.error()).find("float32") != std::string::npos);

  // Errors come back through the helpers as through run_op.
  col::gather_options bad_root;
  bad_root.root = 7;
  res = col::gather(self, f.typed, "typed", f.put_each(3, 0.0f), bad_root);
  REQUIRE(!res);
  CHECK(col::code_of(res.error()) == col::errc::invalid_argument);
}

TEST_CASE("an actor runs ops through the typed helpers with .then and keeps "
          "handling messages") {
  fixture f;
  caf::scoped_actor self{f.sys};
  col::group_spec spec;
  spec.name = "async";
  spec.world_size = 2;
  spec.timeout = 10s;
  auto ms = f.group(self, spec);
  auto refs = f.put_each(2, 1.0f);
  auto store = f.store;
  auto driver = f.typed;
  // The client actor answers `go` with the first element of rank 0's sum.
  auto client = f.sys.spawn([=](caf::event_based_actor* me) -> caf::behavior {
    return {
      [=](go_atom) -> caf::result<float> {
        auto rp = me->make_response_promise<float>();
        col::allreduce_options o;
        o.op = col::reduce_op::max;
        col::allreduce(me, driver, "async", refs, o)
          .then(
            [=](col::op_result& r) mutable {
              auto xs = col::read_vector<float>(*store, r.refs[0]);
              rp.deliver(xs ? xs->at(1) : -1.0f);
            },
            [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
        return rp;
      },
      [](caf::ping_atom) { return caf::pong_atom::value; },
    };
  });
  f.actors.push_back(client);
  self->request(client, 15s, go_atom::value)
    .receive([](float x) { CHECK(x == 11.0f); },
             [](caf::error& err) { FAIL(col::render(err)); });
  self->request(client, 5s, caf::ping_atom::value)
    .receive([](caf::pong_atom) {},
             [](caf::error& err) { FAIL(col::render(err)); });
}

TEST_CASE("a member type's function learns its rank") {
  fixture f;
  caf::scoped_actor self{f.sys};
  col::group_spec spec;
  spec.name = "remote-style";
  spec.world_size = 2;
  spec.timeout = 10s;
  std::vector<caf::actor> ms;
  // Spawned by name, as remote spawn does, with the driver and memberships.
  for (int32_t r = 0; r < 2; ++r) {
    auto m = f.sys.spawn<caf::actor>(
      "ranked", caf::make_message(f.driver, std::vector<col::membership>{
                                              col::membership_of(spec, r)}));
    REQUIRE(m);
    ms.push_back(*m);
    f.actors.push_back(*m);
  }
  REQUIRE(!col::await_group(self, f.driver, "remote-style", 15s));
  for (int32_t r = 0; r < 2; ++r)
    self->request(ms[r], 5s, rank_atom::value)
      .receive([&](int32_t x) { CHECK(x == r); },
               [&](caf::error& err) { FAIL(col::render(err)); });
}

TEST_CASE("a member's status through its typed view") {
  fixture f;
  caf::scoped_actor self{f.sys};
  col::group_spec spec;
  spec.name = "viewed";
  spec.world_size = 1;
  auto ms = f.group(self, spec);
  self
    ->request(col::typed_member(ms[0]), 5s, col::status_atom::value,
              std::string{"viewed"})
    .receive([](col::group_status& st) { CHECK(st.state == "ready"); },
             [](caf::error& err) { FAIL(col::render(err)); });
}

TEST_CASE("the driver releases refs of its own node and, through a member "
          "living there, of another node") {
  fixture f;
  caf::scoped_actor self{f.sys};
  // A second actor system in this process is another node: its own name
  // and its own store.
  caf::actor_system_config other_cfg;
  col::add_message_types(other_cfg);
  caf::actor_system other{other_cfg};
  auto other_store = col::local_store(other);
  REQUIRE(other_store->node() != f.store->node());
  col::group_spec spec;
  spec.name = "far";
  spec.world_size = 1;
  auto far = col::spawn_group(other, f.driver, spec, tells_rank);
  REQUIRE(!col::await_group(self, f.driver, "far", 15s));
  auto remote = other_store->put(col::tensor::from_vector(std::vector<int>{1}));
  auto local = f.store->put(col::tensor::from_vector(std::vector<int>{2}));
  REQUIRE((remote && local));
  CHECK(!col::release(self, f.typed, *local));
  CHECK(!f.store->contains(*local));
  CHECK(!col::release(self, f.typed, *remote));
  CHECK(!other_store->contains(*remote));
  // Gone already: the member's store says so, through the driver.
  auto err = col::release(self, f.typed, *remote);
  CHECK(col::code_of(err) == col::errc::unknown_object);
  // A node no member of the driver lives on.
  auto stray = *remote;
  stray.node = "nowhere";
  err = col::release(self, f.typed, stray);
  CHECK(col::code_of(err) == col::errc::unknown_object);
  CHECK(col::render(err).find("nowhere") != std::string::npos);
  for (auto& a : far)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("the node's collective.* settings give a group_spec its backend and "
          "timeout, and a wrong hostname fails formation naming it") {
  caf::actor_system_config cfg;
  col::add_message_types(cfg);
  col::add_collective_options(cfg);
  const char* argv[] = {"test", "--collective.backend=gloo",
                        "--collective.timeout=3s",
                        "--collective.hostname=no-such-host.invalid"};
  REQUIRE(!cfg.parse(4, const_cast<char**>(argv)));
  caf::actor_system sys{cfg};
  auto settings = col::settings_of(sys);
  REQUIRE(settings);
  auto spec = col::spec_from(*settings, "configured", 2);
  CHECK(spec.backend == "gloo");
  CHECK(spec.timeout == 3s);
  auto driver = col::spawn_driver(sys);
  auto ms = col::spawn_group(sys, driver, spec, tells_rank);
  caf::scoped_actor self{sys};
  auto err = col::await_group(self, driver, "configured", 15s);
  REQUIRE(err);
  CHECK(col::render(err).find("no-such-host.invalid") != std::string::npos);
  for (auto& m : ms)
    caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
}

TEST_CASE("a group_spec gives each rank its CUDA device and its settings") {
  col::group_spec spec;
  spec.name = "g";
  spec.world_size = 3;
  spec.backend = "nccl";
  spec.timeout = 2s;
  spec.ops_from = col::op_source::members;
  CHECK(col::membership_of(spec, 2).cuda_device == 0); // no devices: 0
  spec.cuda_devices = {4, 5};
  auto m = col::membership_of(spec, 2);
  CHECK(m.cuda_device == 4); // rank 2 of 2 devices: wraps around
  CHECK(col::membership_of(spec, 1).cuda_device == 5);
  CHECK(m.group == "g");
  CHECK(m.rank == 2);
  CHECK(m.world_size == 3);
  CHECK(m.backend == "nccl");
  CHECK(m.timeout_ms == 2000);
  CHECK(m.ops_from == col::op_source::members);
}

namespace {

struct shard_plan {
  std::string owner;
  std::vector<int32_t> rows;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_plan& x) {
  return f(caf::meta::type_name("shard_plan"), x.owner, x.rows);
}

} // namespace

TEST_CASE("objects of different sizes per rank move through the driver as "
          "refs: allgather_objects, read_objects, and bytes that do not read "
          "name their rank") {
  fixture f;
  caf::scoped_actor self{f.sys};
  col::group_spec spec;
  spec.name = "objs";
  spec.world_size = 3;
  auto ms = f.group(self, spec);
  std::vector<col::object_ref> refs;
  for (int32_t r = 0; r < 3; ++r) {
    shard_plan p{"rank " + std::to_string(r), std::vector<int32_t>(r * 5, r)};
    refs.push_back(col::put_object(*f.store, p).value());
  }
  CHECK(refs[0].numel() != refs[2].numel()); // sizes differ per rank
  auto res = col::allgather_objects(self, f.typed, "objs", refs);
  REQUIRE(res);
  auto sizes = col::sizes_of(refs);
  for (int32_t reader = 0; reader < 3; ++reader) {
    auto all =
      col::read_objects<shard_plan>(*f.store, res->refs[reader], sizes);
    REQUIRE(all);
    for (int32_t r = 0; r < 3; ++r) {
      CHECK(all->at(r).owner == "rank " + std::to_string(r));
      CHECK(all->at(r).rows == std::vector<int32_t>(r * 5, r));
    }
  }
  CHECK(col::read_object<shard_plan>(*f.store, refs[1]).value().owner ==
        "rank 1");
  // Every rank's bytes read as another type: the read names the first rank
  // it cannot read.
  auto wrong =
    col::read_objects<std::vector<double>>(*f.store, res->refs[0], sizes);
  REQUIRE(!wrong);
  CHECK(col::code_of(wrong.error()) == col::errc::mismatch);
  CHECK(col::render(wrong.error()).find("rank 0") != std::string::npos);
  // Sizes that do not add up are refused before reading.
  auto short_sizes = sizes;
  short_sizes.back() -= 1;
  auto bad = col::read_objects<shard_plan>(*f.store, res->refs[0], short_sizes);
  REQUIRE(!bad);
  CHECK(col::code_of(bad.error()) == col::errc::invalid_argument);
}

namespace {

// Waits up to 10 s for every ref to leave `store`.
bool released_soon(const col::object_store& store,
                   const std::vector<col::object_ref>& refs) {
  for (int i = 0; i < 1000; ++i) {
    if (std::none_of(refs.begin(), refs.end(),
                     [&](const auto& ref) { return store.contains(ref); }))
      return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

} // namespace

TEST_CASE("the client that asked for a driver op owns its outputs: they are "
          "released when it terminates - a running client's stay") {
  fixture f;
  caf::scoped_actor self{f.sys};
  col::group_spec spec;
  spec.name = "owned";
  spec.world_size = 2;
  spec.timeout = 10s;
  auto members = f.group(self, spec);
  auto inputs = f.put_each(2, 1.0f);
  auto held = col::allgather(self, f.typed, "owned", inputs);
  REQUIRE(held);
  // A blocking client that ends.
  std::vector<col::object_ref> brief_outputs;
  {
    caf::scoped_actor brief{f.sys};
    auto res = col::allgather(brief, f.typed, "owned", inputs);
    REQUIRE(res);
    brief_outputs = res->refs;
    for (auto& ref : brief_outputs)
      CHECK(f.store->contains(ref));
  }
  CHECK(released_soon(*f.store, brief_outputs));
  // An event-based client that quits once it has its answer.
  std::promise<caf::expected<col::op_result>> answered;
  f.sys.spawn([&](caf::event_based_actor* client) {
    col::allgather(client, f.typed, "owned", inputs)
      .then(
        [&, client](col::op_result& res) {
          answered.set_value(std::move(res));
          client->quit();
        },
        [&, client](caf::error& err) {
          answered.set_value(std::move(err));
          client->quit();
        });
  });
  auto actor_res = answered.get_future().get();
  REQUIRE(actor_res);
  auto actor_outputs = actor_res->refs;
  REQUIRE(actor_outputs.size() == 2);
  CHECK(released_soon(*f.store, actor_outputs));
  // Outputs outlive the members that made them, and still go with their
  // client when it ends after those members.
  std::vector<col::object_ref> kept;
  {
    caf::scoped_actor keeper{f.sys};
    auto res = col::allgather(keeper, f.typed, "owned", inputs);
    REQUIRE(res);
    kept = res->refs;
    for (auto& m : members)
      self->send_exit(m, caf::exit_reason::user_shutdown);
    for (auto& m : members)
      self->wait_for(m);
    for (auto& ref : kept)
      CHECK(f.store->contains(ref));
  }
  CHECK(released_soon(*f.store, kept));
  // The client still running keeps its outputs and its inputs.
  for (auto& ref : held->refs) {
    CHECK(f.store->contains(ref));
    CHECK(!col::release(self, f.typed, ref));
  }
  for (auto& ref : inputs)
    CHECK(f.store->contains(ref));
}

TEST_CASE("a client hands an output to a longer-lived actor: it stays after "
          "the client ended and goes with that actor") {
  fixture f;
  caf::scoped_actor self{f.sys};
  col::group_spec spec;
  spec.name = "handed";
  spec.world_size = 2;
  spec.timeout = 10s;
  auto members = f.group(self, spec);
  auto inputs = f.put_each(2, 1.0f);
  // Lives until it is told to exit.
  auto keeper = f.sys.spawn([]() -> caf::behavior { return {[](int) {}}; });
  auto to = keeper.address();
  std::vector<col::object_ref> outputs;
  {
    caf::scoped_actor brief{f.sys};
    auto res = col::allgather(brief, f.typed, "handed", inputs);
    REQUIRE(res);
    outputs = res->refs;
    // Through the driver (a ref of its node), and straight to a member.
    CHECK(!col::hand_over(brief, f.typed, outputs[0], to));
    caf::error member_err;
    brief
      ->request(col::typed_member(members[1]), caf::infinite,
                col::hand_atom::value, outputs[1], to)
      .receive([](caf::ok_atom) {},
               [&](caf::error& err) { member_err = std::move(err); });
    CHECK_MESSAGE(!member_err, col::render(member_err));
  }
  // The client is gone; the outputs it handed over are not.
  std::this_thread::sleep_for(300ms);
  for (auto& ref : outputs)
    CHECK(f.store->contains(ref));
  // A later output of the same op, not handed over, goes with its client.
  std::vector<col::object_ref> not_handed;
  {
    caf::scoped_actor brief{f.sys};
    auto res = col::allgather(brief, f.typed, "handed", inputs);
    REQUIRE(res);
    not_handed = res->refs;
  }
  CHECK(released_soon(*f.store, not_handed));
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
  self->wait_for(keeper);
  CHECK(released_soon(*f.store, outputs));
  // Handed to an actor that is gone already: released at once.
  auto res = col::allgather(self, f.typed, "handed", inputs);
  REQUIRE(res);
  CHECK(!col::hand_over(self, f.typed, res->refs[0], to));
  CHECK(!f.store->contains(res->refs[0]));
  CHECK(f.store->contains(res->refs[1]));
  // Refused: a released object, and no actor.
  auto unknown = col::hand_over(self, f.typed, res->refs[0], self->address());
  CHECK(col::code_of(unknown) == col::errc::unknown_object);
  auto nobody = col::hand_over(self, f.typed, res->refs[1], caf::actor_addr{});
  CHECK(col::code_of(nobody) == col::errc::invalid_argument);
  CHECK(col::render(nobody).find("no actor") != std::string::npos);
  for (auto& ref : inputs)
    CHECK(f.store->contains(ref));
}
