// Member-initiated collectives over real groups: members start ops from
// their own handlers (member_ops.hpp) and get the results as responses.
// Groups ask for "auto" (shm here: every member is in this process) unless a
// test names gloo.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <thread>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/group.hpp>
#include <caf_collective/interfaces.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/member_ops.hpp>
#include <caf_collective/rendezvous_actor.hpp>

#include "member_store.hpp"
#include "runtime/cancelable_store.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

using run_atom = caf::atom_constant<caf::atom("t_run")>;
using scale_atom = caf::atom_constant<caf::atom("t_scale")>;
using op_atom = caf::atom_constant<caf::atom("t_op")>;

caf::actor_system_config& prepare(caf::actor_system_config& cfg, int threads) {
  col::add_message_types(cfg);
  if (threads > 0) cfg.set("scheduler.max-threads", threads);
  return cfg;
}

col::membership members_run(std::string name, int rank, int ws,
                            std::string backend = col::default_backend) {
  col::membership m;
  m.group = std::move(name);
  m.rank = rank;
  m.world_size = ws;
  m.backend = std::move(backend);
  m.timeout_ms = 10000;
  m.ops_from = col::op_source::members;
  return m;
}

col::object_ref put_floats(caf::actor_system& sys, std::vector<float> xs) {
  auto ref = col::local_store(sys)->put(col::tensor::from_vector(xs));
  REQUIRE(ref);
  return *ref;
}

std::vector<float> floats_of(caf::actor_system& sys,
                             const col::object_ref& ref) {
  auto view = col::local_store(sys)->get(ref);
  if (!view) return {};
  auto p = static_cast<const float*>(view->data());
  return {p, p + view->numel()};
}

// Answers the scale of each step: members ask it between their ops, so the
// test fails if a member's op kept other actors from running.
caf::behavior scaler(caf::event_based_actor*) {
  return {
    [](scale_atom, int32_t step) { return static_cast<float>(step % 5); }};
}

// A member that, on (run, steps), allreduces a fresh tensor per step:
// rank r contributes (r + 1) * scale(step) in each of 16 elements, so every
// element of the result is scale(step) * ws * (ws + 1) / 2. Answers the
// number of steps whose result was right. Pings are answered meanwhile.
caf::behavior looping_member(caf::event_based_actor* self, int32_t rank,
                             int32_t ws, caf::actor scale_source) {
  return {
    [](caf::ping_atom) { return caf::pong_atom::value; },
    [=](run_atom, int32_t steps) -> caf::result<int32_t> {
      auto rp = self->make_response_promise<int32_t>();
      auto good = std::make_shared<int32_t>(0);
      auto step = std::make_shared<std::function<void(int32_t)>>();
      *step = [=](int32_t i) mutable {
        if (i == steps) {
          rp.deliver(*good);
          *step = nullptr; // breaks the cycle through the captured step
          return;
        }
        self->request(scale_source, 10s, scale_atom::value, i)
          .then([=](float scale) mutable {
            auto ref = put_floats(self->system(),
                                  std::vector<float>(16, (rank + 1) * scale));
            col::collectives(self, "loop")
              .allreduce(ref)
              .then(
                [=](col::object_ref& out) mutable {
                  auto want = scale * ws * (ws + 1) / 2.0f;
                  auto got = floats_of(self->system(), out);
                  if (got.size() == 16 &&
                      std::all_of(got.begin(), got.end(),
                                  [&](float x) { return x == want; }))
                    ++*good;
                  col::local_store(self->system())->release(out);
                  (*step)(i + 1);
                },
                [=](caf::error& err) mutable {
                  rp.deliver(std::move(err));
                  *step = nullptr;
                });
          });
      };
      (*step)(0);
      return rp;
    },
  };
}

struct fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  col::driver_actor driver;
  std::vector<caf::actor> actors;

  explicit fixture(int threads = 0)
    : sys(prepare(cfg, threads)), driver(col::spawn_driver(sys)) {
    // nop
  }

  ~fixture() {
    for (auto& a : actors)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
  }

  template<class Fun, class... Ts>
  caf::actor member(col::membership m, Fun fun, Ts... xs) {
    auto x = col::spawn_member(sys, driver, {std::move(m)}, fun, xs...);
    actors.push_back(x);
    return x;
  }

  // The formed members-run group `name` of `ws` members on `backend`,
  // member r running fun(self, r, xs...).
  template<class Fun, class... Ts>
  std::vector<caf::actor> formed(const std::string& name, int ws,
                                 const std::string& backend, Fun fun,
                                 Ts... xs) {
    std::vector<caf::actor> result;
    for (int r = 0; r < ws; ++r)
      result.push_back(
        member(members_run(name, r, ws, backend), fun, int32_t{r}, xs...));
    caf::scoped_actor self{sys};
    REQUIRE(!col::await_group(self, driver, name, 15s));
    return result;
  }
};

std::string text(const caf::error& err) {
  return col::render(err);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void run_loop(int threads) {
  fixture f{threads};
  caf::scoped_actor self{f.sys};
  auto scale = f.sys.spawn(scaler);
  f.actors.push_back(scale);
  constexpr int ws = 4;
  constexpr int32_t steps = 200;
  std::vector<caf::actor> ms;
  for (int r = 0; r < ws; ++r)
    ms.push_back(
      f.member(members_run("loop", r, ws), looping_member, r, ws, scale));
  REQUIRE(!col::await_group(self, f.driver, "loop", 15s));
  // Ranks 0-2 start and wait inside their first op for rank 3: they must
  // still answer a ping (no scheduler thread is blocked by a waiting op).
  for (int r = 0; r < ws - 1; ++r)
    self->send(ms[r], run_atom::value, steps);
  for (int r = 0; r < ws - 1; ++r)
    self->request(ms[r], 10s, caf::ping_atom::value)
      .receive([](caf::pong_atom) {},
               [&](caf::error& err) { FAIL("no pong: " << text(err)); });
  self->send(ms[ws - 1], run_atom::value, steps);
  int finished = 0;
  self->receive_for(finished, ws)(
    [&](int32_t good) { CHECK(good == steps); },
    [&](caf::error& err) { FAIL("run failed: " << text(err)); },
    caf::after(60s) >> [&] { FAIL("runs did not finish within 60 s"); });
}

} // namespace

TEST_CASE("4 members run 200 allreduce steps from their handlers while "
          "other actors answer, on 1 scheduler thread") {
  run_loop(1);
}

TEST_CASE("4 members run 200 allreduce steps from their handlers while "
          "other actors answer, on 2 scheduler threads") {
  run_loop(2);
}

namespace {

// A member that runs one op on (op, kind, input values, root/peer) and
// answers the output's values (empty for ops without output here).
caf::behavior one_op_member(caf::event_based_actor* self, int32_t rank,
                            std::string group) {
  return {
    [=](op_atom, col::op_kind kind, std::vector<float> xs,
        int32_t root) -> caf::result<std::vector<float>> {
      auto rp = self->make_response_promise<std::vector<float>>();
      auto grp = col::collectives(self, group);
      col::object_ref ref;
      if (!xs.empty()) ref = put_floats(self->system(), xs);
      auto deliver = [=](col::object_ref& out) mutable {
        rp.deliver(out.valid() ? floats_of(self->system(), out)
                               : std::vector<float>{});
      };
      auto fail = [=](caf::error& err) mutable { rp.deliver(std::move(err)); };
      auto n = static_cast<int64_t>(xs.size());
      switch (kind) {
        case col::op_kind::allreduce:
          grp.allreduce(ref).then(deliver, fail);
          break;
        case col::op_kind::broadcast: {
          col::broadcast_options o;
          o.root = root;
          grp.broadcast(ref, o).then(deliver, fail);
          break;
        }
        case col::op_kind::reduce: {
          col::reduce_options o;
          o.root = root;
          o.op = col::reduce_op::max;
          grp.reduce(ref, o).then(deliver, fail);
          break;
        }
        case col::op_kind::allgather:
          grp.allgather(ref).then(deliver, fail);
          break;
        case col::op_kind::gather: {
          col::gather_options o;
          o.root = root;
          grp.gather(ref, o).then(deliver, fail);
          break;
        }
        case col::op_kind::scatter: {
          col::scatter_options o;
          o.root = root;
          // Every rank is told the slice layout: 2 elements.
          grp
            .scatter(rank == root ? ref : col::object_ref{},
                     {col::dtype::float32, {2}}, o)
            .then(deliver, fail);
          break;
        }
        case col::op_kind::reduce_scatter:
          grp.reduce_scatter(ref).then(deliver, fail);
          break;
        case col::op_kind::alltoall:
          grp.alltoall(ref).then(deliver, fail);
          break;
        case col::op_kind::barrier: grp.barrier().then(deliver, fail); break;
        case col::op_kind::send: {
          col::send_options o;
          o.peer = root;
          o.tag = 7;
          grp.send(ref, o).then(deliver, fail);
          break;
        }
        case col::op_kind::recv: {
          col::recv_options o;
          o.peer = root;
          o.tag = 7;
          grp.recv({col::dtype::float32, {n}}, o).then(deliver, fail);
          break;
        }
        default:
          rp.deliver(col::make_error(col::errc::unsupported, "not in test"));
      }
      return rp;
    },
  };
}

// Runs `kind` on every member at once; member r gets inputs[r] and `root`;
// returns each rank's answer (values or the error text).
struct outcome {
  std::vector<float> values;
  std::string error;
};

std::vector<outcome> run_everywhere(caf::scoped_actor& self,
                                    const std::vector<caf::actor>& ms,
                                    col::op_kind kind,
                                    std::vector<std::vector<float>> inputs,
                                    std::vector<int32_t> roots) {
  for (size_t r = 0; r < ms.size(); ++r)
    self->send(ms[r], op_atom::value, kind, inputs[r], roots[r]);
  // Plain sends: each answer comes back as a message from its member.
  std::vector<outcome> result(ms.size());
  size_t answered = 0;
  auto rank_of = [&](const caf::strong_actor_ptr& who) {
    for (size_t r = 0; r < ms.size(); ++r)
      if (caf::actor_cast<caf::strong_actor_ptr>(ms[r]) == who) return r;
    FAIL("answer from a stranger");
    return size_t{0};
  };
  self->receive_for(answered, ms.size())(
    [&](std::vector<float>& xs) {
      result[rank_of(self->current_sender())].values = std::move(xs);
    },
    [&](caf::error& err) {
      result[rank_of(self->current_sender())].error = text(err);
    },
    caf::after(30s) >> [&] { FAIL("no answer within 30 s"); });
  return result;
}

} // namespace

TEST_CASE("every op started by members gives the expected values") {
  fixture f;
  caf::scoped_actor self{f.sys};
  constexpr int ws = 3;
  auto ms = f.formed("ops", ws, col::default_backend, one_op_member,
                     std::string{"ops"});
  // Rank r's input: {6r, 6r + 1, ..., 6r + 5}.
  std::vector<std::vector<float>> in(ws);
  for (int r = 0; r < ws; ++r)
    for (int i = 0; i < 6; ++i)
      in[r].push_back(static_cast<float>(6 * r + i));
  std::vector<int32_t> root1(ws, 1);
  using k = col::op_kind;
  auto check_no_errors = [](const std::vector<outcome>& xs) {
    for (auto& x : xs)
      CHECK_MESSAGE(x.error.empty(), x.error);
  };
  SUBCASE("allreduce") {
    auto out = run_everywhere(self, ms, k::allreduce, in, root1);
    check_no_errors(out);
    for (auto& x : out)
      CHECK(x.values == std::vector<float>{18, 21, 24, 27, 30, 33});
  }
  SUBCASE("broadcast from rank 1") {
    auto out = run_everywhere(self, ms, k::broadcast, in, root1);
    check_no_errors(out);
    for (auto& x : out)
      CHECK(x.values == in[1]);
  }
  SUBCASE("reduce (max) to rank 1") {
    auto out = run_everywhere(self, ms, k::reduce, in, root1);
    check_no_errors(out);
    CHECK(out[1].values == in[2]);
  }
  SUBCASE("allgather") {
    auto out = run_everywhere(self, ms, k::allgather, in, root1);
    check_no_errors(out);
    std::vector<float> all(18);
    std::iota(all.begin(), all.end(), 0.0f);
    for (auto& x : out)
      CHECK(x.values == all);
  }
  SUBCASE("gather to rank 1: only the root gets an output") {
    auto out = run_everywhere(self, ms, k::gather, in, root1);
    check_no_errors(out);
    CHECK(out[0].values.empty());
    CHECK(out[1].values.size() == 18);
    CHECK(out[2].values.empty());
  }
  SUBCASE("scatter from rank 1") {
    auto out = run_everywhere(self, ms, k::scatter, in, root1);
    check_no_errors(out);
    for (int r = 0; r < ws; ++r)
      CHECK(out[r].values ==
            std::vector<float>{in[1][2 * r], in[1][2 * r + 1]});
  }
  SUBCASE("reduce_scatter") {
    auto out = run_everywhere(self, ms, k::reduce_scatter, in, root1);
    check_no_errors(out);
    CHECK(out[0].values == std::vector<float>{18, 21});
    CHECK(out[2].values == std::vector<float>{30, 33});
  }
  SUBCASE("alltoall") {
    auto out = run_everywhere(self, ms, k::alltoall, in, root1);
    check_no_errors(out);
    // Rank 2 receives block 2 of every rank: elements 4 and 5.
    CHECK(out[2].values == std::vector<float>{4, 5, 10, 11, 16, 17});
  }
  SUBCASE("barrier") {
    auto out = run_everywhere(self, ms, k::barrier, {{}, {}, {}}, root1);
    check_no_errors(out);
  }
  SUBCASE("send from rank 0 to rank 2 with a tag, rank 1 idle") {
    self->send(ms[0], op_atom::value, k::send, in[0], int32_t{2});
    self->send(ms[2], op_atom::value, k::recv, std::vector<float>(6),
               int32_t{0});
    int answered = 0;
    self->receive_for(answered, 2)(
      [&](std::vector<float>& xs) {
        if (!xs.empty()) CHECK(xs == in[0]);
      },
      [&](caf::error& err) { FAIL(text(err)); },
      caf::after(30s) >> [&] { FAIL("no answer within 30 s"); });
  }
}

TEST_CASE("a bad member-initiated op fails with an error naming the group, "
          "op and rank, and the group stays usable") {
  fixture f;
  caf::scoped_actor self{f.sys};
  constexpr int ws = 2;
  auto ms = f.formed("bad", ws, col::default_backend, one_op_member,
                     std::string{"bad"});
  using k = col::op_kind;
  std::vector<std::vector<float>> in{{1, 2}, {3, 4}};
  // Root 5 is out of range on both ranks: refused before data moves.
  auto out = run_everywhere(self, ms, k::broadcast, in, {5, 5});
  for (auto& x : out) {
    CHECK(contains(x.error, "invalid_argument"));
    CHECK(contains(x.error, "'bad'"));
    CHECK(contains(x.error, "broadcast"));
  }
  // No input where one is needed.
  out = run_everywhere(self, ms, k::allreduce, {{}, {}}, {0, 0});
  for (auto& x : out)
    CHECK(contains(x.error, "names no object"));
  // Then a good op on the same group works.
  out = run_everywhere(self, ms, k::allreduce, in, {0, 0});
  for (auto& x : out) {
    CHECK_MESSAGE(x.error.empty(), x.error);
    CHECK(x.values == std::vector<float>{4, 6});
  }
}

TEST_CASE("a group takes ops from one source: the driver refuses requests "
          "on a members-run group, members refuse their own ops on a "
          "driver-run group, and both groups stay usable") {
  fixture f;
  caf::scoped_actor self{f.sys};
  std::vector<caf::actor> by_members, by_driver;
  for (int r = 0; r < 2; ++r) {
    by_members.push_back(
      f.member(members_run("m", r, 2), one_op_member, r, std::string{"m"}));
    auto d = members_run("d", r, 2);
    d.ops_from = col::op_source::driver;
    by_driver.push_back(f.member(d, one_op_member, r, std::string{"d"}));
  }
  REQUIRE(!col::await_group(self, f.driver, "m", 15s));
  REQUIRE(!col::await_group(self, f.driver, "d", 15s));
  auto ref0 = put_floats(f.sys, {1, 2});
  auto ref1 = put_floats(f.sys, {3, 4});
  // The driver on the members-run group.
  col::op_request req{"m", col::op_kind::allreduce, {ref0, ref1}, {}};
  auto res = col::run_op(self, f.driver, req, 10s);
  REQUIRE(!res);
  CHECK(contains(text(res.error()), "unsupported"));
  CHECK(contains(text(res.error()), "ops_from = members"));
  // Members on the driver-run group.
  std::vector<std::vector<float>> in{{1, 2}, {3, 4}};
  auto out =
    run_everywhere(self, by_driver, col::op_kind::allreduce, in, {0, 0});
  for (auto& x : out) {
    CHECK(contains(x.error, "unsupported"));
    CHECK(contains(x.error, "ops_from = driver"));
  }
  // Each group still runs ops from its own source.
  out = run_everywhere(self, by_members, col::op_kind::allreduce, in, {0, 0});
  for (auto& x : out)
    CHECK(x.values == std::vector<float>{4, 6});
  req.group = "d";
  res = col::run_op(self, f.driver, req, 10s);
  REQUIRE(res);
  CHECK(floats_of(f.sys, ref0) == std::vector<float>{4, 6});
}

TEST_CASE("a member that dies while its peer waits in a member-initiated "
          "op: the peer's op fails naming the dead rank") {
  fixture f;
  caf::scoped_actor self{f.sys};
  auto ms = f.formed("die", 2, "gloo", one_op_member, std::string{"die"});
  self->send(ms[0], op_atom::value, col::op_kind::allreduce,
             std::vector<float>{1, 2}, int32_t{0});
  // Rank 1 never starts: it dies.
  caf::anon_send_exit(ms[1], caf::exit_reason::kill);
  self->receive(
    [&](std::vector<float>&) { FAIL("the op succeeded without its peer"); },
    [&](caf::error& err) {
      auto s = text(err);
      CHECK(col::code_of(err) == col::errc::peer_lost);
      CHECK(contains(s, "'die'"));
      CHECK(contains(s, "rank 1 died"));
    },
    caf::after(30s) >> [&] { FAIL("no answer within 30 s"); });
}

TEST_CASE("an actor that asked a member for an op through member_api hears "
          "when the member terminates mid-op - no silent hang") {
  // The driver monitors its members and the member's own ops die with it,
  // but an outside requester learns nothing from CAF 0.17 when the member
  // that took its request terminates. Before: no answer at all (a request
  // with caf::infinite waited for ever).
  fixture f;
  caf::scoped_actor self{f.sys};
  auto ms = f.formed("asked", 2, "shm", one_op_member, std::string{"asked"});
  col::member_op op;
  op.group = "asked";
  op.op = col::op_kind::allreduce;
  op.in = put_floats(f.sys, {1, 2});
  auto start = std::chrono::steady_clock::now();
  auto pending = self->request(col::typed_member(ms[0]), 20s, op);
  // Rank 1 never joins the op; rank 0 waits in it, then terminates.
  std::this_thread::sleep_for(300ms);
  caf::anon_send_exit(ms[0], caf::exit_reason::user_shutdown);
  caf::error err;
  pending.receive([](col::object_ref&) { FAIL("the op succeeded alone"); },
                  [&](caf::error& e) { err = std::move(e); });
  auto s = text(err);
  INFO(s);
  CHECK(col::code_of(err) == col::errc::aborted);
  CHECK(contains(s, "'asked'"));
  CHECK(contains(s, "allreduce"));
  CHECK(contains(s, "terminated before the op finished"));
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("an output a member made for an actor that asked through "
          "member_api belongs to that actor - it goes when the actor ends") {
  // As a driver op's output belongs to its client. Before: the member
  // owned it, so it outlived the requester until the member ended.
  fixture f;
  caf::scoped_actor self{f.sys};
  auto ms = f.formed("owned", 1, "auto", one_op_member, std::string{"owned"});
  auto store = col::local_store(f.sys);
  col::member_op op;
  op.group = "owned";
  op.op = col::op_kind::allgather;
  op.in = put_floats(f.sys, {1, 2});
  col::object_ref out;
  {
    caf::scoped_actor brief{f.sys};
    brief->request(col::typed_member(ms[0]), 10s, op)
      .receive([&](col::object_ref& ref) { out = std::move(ref); },
               [](caf::error& err) { FAIL(text(err)); });
    REQUIRE(out.valid());
    CHECK(store->contains(out));
  }
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (store->contains(out) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  CHECK_FALSE(store->contains(out));
  CHECK(store->contains(op.in)); // the input stays its owner's
}

TEST_CASE("a member with a healthy idle group exits without blocking its "
          "scheduler thread") {
  // One scheduler thread: if the exiting member tore its Gloo group down on
  // it (a barrier of up to 5 s with its peer), the ping below would wait.
  fixture f{1};
  caf::scoped_actor self{f.sys};
  auto ms = f.formed("idle", 2, "gloo", one_op_member, std::string{"idle"});
  auto pinger = f.sys.spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](caf::ping_atom) { return caf::pong_atom::value; }};
  });
  f.actors.push_back(pinger);
  self->monitor(ms[0]);
  caf::anon_send_exit(ms[0], caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
  // Not a speed assertion: a blocked thread would hold the ping for the
  // teardown's barrier with rank 1 (5 s), beyond this request's 3 s.
  self->request(pinger, 3s, caf::ping_atom::value)
    .receive([](caf::pong_atom) {}, [&](caf::error& err) { FAIL(text(err)); });
}

namespace {

using put_atom = caf::atom_constant<caf::atom("t_put")>;

// Puts a tensor it owns on request and answers its ref (spawned as a
// member or as a plain actor).
caf::behavior putter(caf::event_based_actor* self) {
  return {
    [=](put_atom, float x) -> caf::result<col::object_ref> {
      auto ref =
        col::put(self, col::tensor::from_vector(std::vector<float>{x, x}));
      if (!ref) return std::move(ref.error());
      return *ref;
    },
  };
}

// An owner's death releases its objects as it terminates, which the down
// message may overtake: waits for the release, bounded.
bool released_soon(const col::object_store_ptr& store,
                   const col::object_ref& ref) {
  auto until = std::chrono::steady_clock::now() + 10s;
  while (store->contains(ref) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  return !store->contains(ref);
}

} // namespace

TEST_CASE("refs a member owns are released when it terminates, and any "
          "actor can release a ref through the member of its node") {
  fixture f;
  caf::scoped_actor self{f.sys};
  auto store = col::local_store(f.sys);
  auto m = f.member(members_run("owner", 0, 1), putter);
  auto put = [&](float x) {
    col::object_ref result;
    self->request(m, 5s, put_atom::value, x)
      .receive([&](col::object_ref& r) { result = std::move(r); },
               [&](caf::error& err) { FAIL(text(err)); });
    return result;
  };
  auto a = put(1);
  auto b = put(2);
  auto before = store->objects();
  // Released through the member's typed view.
  self->request(col::typed_member(m), 5s, col::release_atom::value, a)
    .receive([](caf::ok_atom) {}, [&](caf::error& err) { FAIL(text(err)); });
  CHECK(!store->contains(a));
  CHECK(store->objects() == before - 1);
  // Releasing twice names the object.
  self->request(col::typed_member(m), 5s, col::release_atom::value, a)
    .receive([](caf::ok_atom) { FAIL("released twice"); },
             [&](caf::error& err) {
               CHECK(col::code_of(err) == col::errc::unknown_object);
             });
  // The owner's death releases what it still owns.
  REQUIRE(store->contains(b));
  self->monitor(m);
  caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
  CHECK(released_soon(store, b));
}

TEST_CASE("refs an actor that is no member stored with col::put are released "
          "when it terminates") {
  // Only members released what they stored; a client preparing an op's
  // inputs with col::put leaked them for the life of the process.
  fixture f;
  caf::scoped_actor self{f.sys};
  auto store = col::local_store(f.sys);
  auto client = f.sys.spawn(putter);
  col::object_ref ref;
  self->request(client, 5s, put_atom::value, 3.0f)
    .receive([&](col::object_ref& r) { ref = std::move(r); },
             [&](caf::error& err) { FAIL(text(err)); });
  REQUIRE(store->contains(ref));
  self->monitor(client);
  caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
  CHECK(released_soon(store, ref));
}

namespace {

using objects_atom = caf::atom_constant<caf::atom("t_objs")>;

// A member that, on objects, runs a fixed sequence of object ops mixed with
// a tensor op, each started when the previous one answered, and answers a
// summary of what it saw ("" on success, else what went wrong).
caf::behavior object_member(caf::event_based_actor* self, int32_t rank,
                            int32_t ws) {
  return {
    [=](objects_atom) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      auto grp = col::collectives(self, "objs");
      auto fail = [=](caf::error& err) mutable {
        rp.deliver("error: " + text(err));
      };
      // Rank r's name has r + 1 letters: sizes differ per rank.
      std::string name(static_cast<size_t>(rank) + 1, 'a' + rank);
      auto cfg = rank == 1 ? std::map<std::string, int>{{"lr", 3}, {"bs", 64}}
                           : std::map<std::string, int>{};
      grp.broadcast_object(cfg, 1).then(
        [=](std::map<std::string, int>& got) mutable {
          if (got != std::map<std::string, int>{{"lr", 3}, {"bs", 64}}) {
            rp.deliver(std::string{"broadcast_object gave a wrong map"});
            return;
          }
          grp.allgather_object(name).then(
            [=](std::vector<std::string>& names) mutable {
              for (int32_t r = 0; r < ws; ++r)
                if (names.at(static_cast<size_t>(r)) !=
                    std::string(static_cast<size_t>(r) + 1, 'a' + r)) {
                  rp.deliver(std::string{"allgather_object: wrong name"});
                  return;
                }
              // A tensor op right after the object ops: same order on
              // every rank, so its result is right.
              auto ref = put_floats(self->system(), {1.0f});
              grp.allreduce(ref).then(
                [=](col::object_ref& out) mutable {
                  auto xs = floats_of(self->system(), out);
                  if (xs != std::vector<float>{static_cast<float>(ws)}) {
                    rp.deliver(std::string{"allreduce after objects wrong"});
                    return;
                  }
                  std::vector<std::vector<int>> parts;
                  for (int32_t r = 0; r < ws; ++r)
                    parts.push_back(std::vector<int>(r + 1, r));
                  grp.scatter_object(rank == 0 ? parts : decltype(parts){}, 0)
                    .then(
                      [=](std::vector<int>& mine) mutable {
                        rp.deliver(mine == std::vector<int>(rank + 1, rank)
                                     ? std::string{}
                                     : std::string{"scatter_object wrong"});
                      },
                      fail);
                },
                fail);
            },
            fail);
        },
        fail);
      return rp;
    },
  };
}

} // namespace

TEST_CASE("members run object collectives from their handlers, in order with "
          "their tensor ops") {
  fixture f;
  caf::scoped_actor self{f.sys};
  constexpr int ws = 3;
  auto ms =
    f.formed("objs", ws, col::default_backend, object_member, int32_t{ws});
  for (auto& m : ms)
    self->send(m, objects_atom::value);
  int answered = 0;
  self->receive_for(answered, ws)(
    [&](std::string& problem) { CHECK_MESSAGE(problem.empty(), problem); },
    [&](caf::error& err) { FAIL(text(err)); },
    caf::after(30s) >> [&] { FAIL("no answer within 30 s"); });
}

namespace {

using both_atom = caf::atom_constant<caf::atom("t_both")>;
using later_atom = caf::atom_constant<caf::atom("t_later")>;

// A member that starts an object op and then an allreduce without waiting
// for the first: rank 0 in one handler, rank 1 in a later one. Both ranks
// start them in the same order, so both give the right values only if a
// member runs its ops of both kinds in the order it started them. Answers
// "" on success, else what went wrong.
caf::behavior unawaited_member(caf::event_based_actor* self, int32_t rank) {
  struct outcome {
    int left = 2;
    std::string problems;
    caf::response_promise rp;
    void done(const std::string& problem) {
      problems += problem;
      if (--left == 0) rp.deliver(problems);
    }
  };
  auto seen = std::make_shared<outcome>();
  auto on_error = [seen](caf::error& err) { seen->done(text(err) + "; "); };
  auto start_allreduce = [=] {
    auto ref = put_floats(self->system(), {1.0f + static_cast<float>(rank)});
    col::collectives(self, "mixed")
      .allreduce(ref)
      .then(
        [=](col::object_ref& out) {
          seen->done(floats_of(self->system(), out) == std::vector<float>{3.0f}
                       ? ""
                       : "allreduce wrong; ");
        },
        on_error);
  };
  return {
    [=](both_atom) -> caf::result<std::string> {
      seen->rp = self->make_response_promise<std::string>();
      col::collectives(self, "mixed")
        .allgather_object(std::string(1, static_cast<char>('a' + rank)))
        .then(
          [=](std::vector<std::string>& names) {
            seen->done(names == std::vector<std::string>{"a", "b"}
                         ? ""
                         : "allgather_object wrong; ");
          },
          on_error);
      if (rank == 0)
        start_allreduce();
      else
        self->send(self, later_atom::value);
      return seen->rp;
    },
    [=](later_atom) { start_allreduce(); },
  };
}

} // namespace

TEST_CASE("a member's object op and tensor op started without waiting run "
          "in the order it started them") {
  fixture f;
  caf::scoped_actor self{f.sys};
  auto ms = f.formed("mixed", 2, col::default_backend, unawaited_member);
  for (auto& m : ms)
    self->send(m, both_atom::value);
  int answered = 0;
  self->receive_for(answered, 2)(
    [&](std::string& problem) { CHECK_MESSAGE(problem.empty(), problem); },
    [&](caf::error& err) { FAIL(text(err)); },
    caf::after(30s) >> [&] { FAIL("no answer within 30 s"); });
}

namespace {

using sendobj_atom = caf::atom_constant<caf::atom("t_sendobj")>;

caf::behavior object_pair(caf::event_based_actor* self, int32_t rank,
                          std::string group) {
  return {
    [=](sendobj_atom) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      auto grp = col::collectives(self, group);
      auto fail = [=](caf::error& err) mutable { rp.deliver(text(err)); };
      if (rank == 0)
        grp.send_object(std::vector<std::string>{"x", "yy"}, 1)
          .then([=](caf::ok_atom) mutable { rp.deliver(std::string{"sent"}); },
                fail);
      else
        grp.recv_object<std::vector<std::string>>(0).then(
          [=](std::vector<std::string>& xs) mutable {
            auto want = std::vector<std::string>{"x", "yy"};
            rp.deliver(xs == want ? xs[1] : std::string{"?"});
          },
          fail);
      return rp;
    },
  };
}

} // namespace

TEST_CASE("members send and receive objects, and an object op on a "
          "driver-run group is refused naming the op") {
  fixture f;
  caf::scoped_actor self{f.sys};
  std::vector<caf::actor> ms, driven;
  for (int r = 0; r < 2; ++r) {
    ms.push_back(
      f.member(members_run("pair", r, 2), object_pair, r, std::string{"pair"}));
    auto d = members_run("dpair", r, 2);
    d.ops_from = col::op_source::driver;
    driven.push_back(f.member(d, object_pair, r, std::string{"dpair"}));
  }
  REQUIRE(!col::await_group(self, f.driver, "pair", 15s));
  REQUIRE(!col::await_group(self, f.driver, "dpair", 15s));
  for (auto& m : ms)
    self->send(m, sendobj_atom::value);
  std::vector<std::string> got;
  int answered = 0;
  self->receive_for(answered, 2)(
    [&](std::string& x) { got.push_back(std::move(x)); },
    caf::after(30s) >> [&] { FAIL("no answer within 30 s"); });
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::string>{"sent", "yy"});
  self->send(driven[0], sendobj_atom::value);
  self->receive(
    [&](std::string& x) {
      CHECK(contains(x, "unsupported"));
      CHECK(contains(x, "send_object"));
      CHECK(contains(x, "'dpair'"));
    },
    caf::after(30s) >> [&] { FAIL("no answer within 30 s"); });
}

TEST_CASE("an actor system that shuts down while its members' groups still "
          "form waits for their teardown, briefly, and does not crash") {
  // The members terminate with the fixture while their groups' formation
  // may still run on the groups' lanes, talking to the rendezvous store
  // through the actor system: the system must outlive that work (it used to
  // be destroyed under it: a crash in caf::actor_system::clock()), and a
  // group still forming is aborted rather than waited for. The delay before
  // the shutdown sweeps across formation (Gloo, 2 ranks: TCP connections).
  auto idle = [](caf::event_based_actor*) { return caf::behavior{}; };
  for (int round = 0; round < 40; ++round) {
    std::chrono::steady_clock::time_point start;
    {
      fixture f;
      for (int r = 0; r < 2; ++r) {
        auto m = members_run("early-" + std::to_string(round), r, 2, "gloo");
        m.timeout_ms = 2000;
        f.member(m, idle);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{round % 20});
      start = std::chrono::steady_clock::now();
    }
    // A group still forming is aborted, which ends its store waits within
    // 100 ms, but Gloo's own connect to a peer that left cannot be
    // interrupted: the wait is bounded by the formation timeout (2 s).
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took < 6s);
  }
}

TEST_CASE("a member's rendezvous store holds the actor system up until it is "
          "released, and aborting a group forming over it ends the wait "
          "within a poll") {
  // A member's group keeps its store until the group is destroyed on its
  // lane, after the member terminated, and its store actor may be gone by
  // then (the driver's, which ends with the driver): the system's
  // destructor must still wait, or the store's next call would use a
  // destroyed system (a crash in caf::actor_system::clock()).
  col::rendezvous_store_ptr store;
  std::atomic<bool> released{false};
  caf::error set_result;
  std::thread user;
  {
    caf::actor_system_config cfg;
    caf::actor_system sys{prepare(cfg, 0)};
    auto store_actor = col::spawn_store_actor(sys);
    store = col::make_member_store(sys, store_actor, "held");
    caf::anon_send_exit(store_actor, caf::exit_reason::user_shutdown);
    user = std::thread([&] {
      std::this_thread::sleep_for(300ms);
      // By now the system's destructor runs, waiting for this store.
      set_result = store->set("k", {'x'});
      released = true;
      store.reset();
    });
  }
  CHECK(released.load());
  user.join();
  // The store actor is gone: the call fails cleanly, naming why.
  CHECK(col::code_of(set_result) == col::errc::peer_lost);
  CHECK(contains(col::render(set_result), "rendezvous store actor is gone"));
  // A member aborts a group still forming when it terminates (let_go):
  // the group's waits on the store end within a poll, not at the group's
  // 30 s formation deadline (rank 1 never comes).
  caf::actor_system_config cfg;
  caf::actor_system sys{prepare(cfg, 0)};
  col::group_config gc;
  gc.name = "forming";
  gc.backend = "gloo";
  gc.world_size = 2;
  gc.rank = 0;
  gc.timeout = 30s;
  gc.store = col::make_member_store(sys, col::spawn_store_actor(sys), "held");
  col::work formed;
  auto made = col::group::make(gc, &formed);
  REQUIRE(made);
  std::this_thread::sleep_for(200ms);
  auto start = std::chrono::steady_clock::now();
  (*made)->abort("member of group 'forming' terminated");
  auto err = formed.wait();
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(col::code_of(err) == col::errc::aborted);
  CHECK(contains(col::render(err), "stopped waiting for rendezvous key"));
  // Both hold the system up: released before it.
  made->reset();
  gc.store.reset();
}

TEST_CASE("a store actor's view keeps its limits: a set within its timeout, "
          "a get for ever, and a gone store ends waits at once without "
          "spinning") {
  caf::actor_system_config cfg;
  caf::actor_system sys{prepare(cfg, 0)};
  // A store that never answers: a set within 200 ms fails in about that
  // long (before: 30 s, whatever the caller asked).
  auto silent = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {[=](caf::put_atom, const std::string&, std::vector<char>&) {
      return self->make_response_promise<caf::ok_atom>();
    }};
  });
  auto to_silent = col::make_actor_store(sys, silent, "p");
  auto start = std::chrono::steady_clock::now();
  auto set = to_silent->set_within("k", {'x'}, 200ms);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(col::code_of(set) == col::errc::timeout);
  // A get "for ever" waits (before: milliseconds::max() overflowed and it
  // failed at once with request_timeout).
  auto live = col::spawn_store_actor(sys);
  auto to_live = col::make_actor_store(sys, live, "p");
  caf::expected<std::vector<char>> got{std::vector<char>{}};
  std::thread reader{
    [&] { got = to_live->get("later", std::chrono::milliseconds::max()); }};
  std::this_thread::sleep_for(300ms);
  REQUIRE_FALSE(to_live->set("later", {'v'}));
  reader.join();
  REQUIRE(got);
  CHECK(*got == std::vector<char>{'v'});
  // A store actor that is gone: peer_lost at once, also through the view a
  // forming group waits on (before: timeout, which that view took for "ask
  // again" and did, spinning a core until the deadline).
  caf::anon_send_exit(live, caf::exit_reason::kill);
  std::this_thread::sleep_for(100ms);
  std::atomic<bool> cancel{false};
  auto waiting =
    col::detail::make_cancelable_store(to_live, &cancel, "unused", 2000ms);
  start = std::chrono::steady_clock::now();
  auto cpu_start = std::clock();
  auto gone = waiting->get("k", 2000ms);
  auto cpu = std::clock() - cpu_start;
  CHECK(std::chrono::steady_clock::now() - start < 1500ms);
  CHECK(cpu < CLOCKS_PER_SEC / 2);
  REQUIRE_FALSE(gone);
  CHECK(col::code_of(gone.error()) == col::errc::peer_lost);
  CHECK(contains(col::render(gone.error()), "rendezvous store actor is gone"));
  caf::anon_send_exit(silent, caf::exit_reason::kill);
}
