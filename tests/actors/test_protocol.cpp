// The driver protocol message by message on CAF's deterministic scheduler
// (caf::scheduler::test_coordinator). Every actor runs on the test's thread
// one message at a time and time only moves when the test advances the
// clock, so each step of registration, formation, dispatch and failure is
// observable and the outcome never depends on timing.
//
// The members are scripted actors: they speak the member side of the
// protocol, log every message the driver sends them and answer starts only
// when the test says so. That lets the test hold an op half-finished, kill a
// member at an exact point, or let a deadline pass. (caf/test/dsl.hpp needs
// CAF's own test runner, so the coordinator is driven directly.)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/messages.hpp>
#include <caf_collective/object_store.hpp>
#include <caf_collective/tensor.hpp>

#include "testing_scheduler.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

// What one scripted member saw and what the test wants it to answer. Only
// touched on the test's thread: the test coordinator runs actors there.
struct script {
  caf::actor_addr self;
  // The node the member claims to live on. Not the driver's: the driver
  // checks refs on its own node in its store, the others by asking.
  std::string node = "scripted-node";
  std::vector<std::string> log; // one line per message, in arrival order
  uint64_t gen = 0;             // from the last init
  caf::actor store;             // from the last init
  // Starts by (group, seq), and the promises of those not answered yet.
  std::map<std::pair<std::string, uint64_t>, col::start_msg> started;
  std::map<std::pair<std::string, uint64_t>, caf::response_promise> unfinished;
  std::map<uint64_t, caf::error> check_errors; // by object id
  // Objects whose check the member never answers (a busy member), and the
  // promises it keeps for them.
  std::set<uint64_t> unanswered_checks;
  std::vector<caf::response_promise> kept_checks;

  col::start_msg& start(uint64_t seq, const std::string& group = "g") {
    return started.at({group, seq});
  }
};

using script_ptr = std::shared_ptr<script>;

/// test -> scripted member: (finish, group, seq, out ref) answers that start.
/// Promises are delivered by their own actor: outside of it the test
/// coordinator has no execution unit to enqueue from.
using finish_atom = caf::atom_constant<caf::atom("t_finish")>;
/// test -> scripted member: (fail, group, seq, error) fails that start.
using fail_atom = caf::atom_constant<caf::atom("t_fail")>;

caf::behavior scripted_member(caf::event_based_actor* self, script_ptr sc,
                              caf::actor driver, col::membership m) {
  self->send(driver, col::reg_atom::value, m, sc->node);
  return {
    [=](col::init_atom, const std::string& group, uint64_t gen,
        const caf::actor& store, const std::string& prefix, int64_t) {
      sc->gen = gen;
      sc->store = store;
      sc->log.push_back("init " + group + " prefix " + prefix +
                        (store ? " store" : " no store"));
    },
    [=](col::check_atom, const std::string& group, uint64_t, uint64_t seq,
        const col::object_ref& ref) -> caf::result<caf::ok_atom> {
      sc->log.push_back("check " + group + " object " + std::to_string(ref.id) +
                        " as seq " + std::to_string(seq));
      if (sc->unanswered_checks.count(ref.id) > 0) {
        sc->kept_checks.push_back(self->make_response_promise());
        return caf::delegated<caf::ok_atom>{};
      }
      auto i = sc->check_errors.find(ref.id);
      if (i != sc->check_errors.end()) return i->second;
      return caf::ok_atom::value;
    },
    [=](col::grace_atom, int64_t) {
      // How long the driver waits past a formation deadline: the members
      // here never wait for an init themselves.
    },
    [=](col::unhold_atom, const std::string& group, uint64_t, uint64_t seq) {
      sc->log.push_back("unhold " + group + " seq " + std::to_string(seq));
    },
    [=](col::start_atom, col::start_msg& msg) -> caf::result<col::object_ref> {
      sc->log.push_back("start " + msg.group + " seq " +
                        std::to_string(msg.seq) + " " +
                        std::string{col::to_string(msg.op)});
      auto key = std::make_pair(msg.group, msg.seq);
      sc->unfinished[key] = self->make_response_promise();
      sc->started[key] = std::move(msg);
      return caf::delegated<col::object_ref>{};
    },
    [=](col::abort_atom, const std::string& group, uint64_t,
        const caf::error& why) {
      sc->log.push_back("abort " + group + ": " + col::render(why));
    },
    [=](col::history_atom, const std::string& group) {
      sc->log.push_back("history " + group);
      return std::string{"seq 0 allreduce 16 B running"};
    },
    [=](col::leave_atom, const std::string& group) {
      sc->log.push_back("leave " + group);
    },
    [=](col::release_atom,
        const col::object_ref& ref) -> caf::result<caf::ok_atom> {
      sc->log.push_back("release object " + std::to_string(ref.id));
      return caf::ok_atom::value;
    },
    [=](finish_atom, const std::string& group, uint64_t seq,
        col::object_ref& out) {
      auto key = std::make_pair(group, seq);
      auto i = sc->unfinished.find(key);
      if (i == sc->unfinished.end()) return;
      auto& msg = sc->started.at(key);
      i->second.deliver(msg.has_out ? std::move(out) : msg.in);
      sc->unfinished.erase(i);
    },
    [=](fail_atom, const std::string& group, uint64_t seq, caf::error& err) {
      auto i = sc->unfinished.find({group, seq});
      if (i == sc->unfinished.end()) return;
      i->second.deliver(std::move(err));
      sc->unfinished.erase(i);
    },
    [=](col::join_atom, col::membership& joined) {
      sc->log.push_back("join " + joined.group);
      self->send(driver, col::reg_atom::value, std::move(joined), sc->node);
    },
  };
}

// The single answer a client got, if any.
struct outcome {
  int answers = 0;
  caf::error err;
  col::op_result result;
  col::group_status status;
};

using outcome_ptr = std::shared_ptr<outcome>;

constexpr int64_t group_timeout_ms = 1000;
constexpr auto grace = 200ms;

struct fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys{testing_scheduler::prepare(cfg)};
  caf::scheduler::test_coordinator& sched =
    dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  col::driver_actor driver;
  std::vector<caf::actor> spawned;
  std::string node = script{}.node;

  fixture() {
    col::driver_config dc;
    dc.grace = grace;
    driver = col::spawn_driver(sys, dc);
    run();
  }

  ~fixture() {
    for (auto& a : spawned)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
    run();
  }

  // Runs every actor until no message is left; moves no time.
  size_t run() { return testing_scheduler::run_all(sched); }

  // Moves the clock by `dt`, delivering what fell due, then runs.
  void advance(caf::timespan dt) {
    sched.advance_time(dt);
    run();
  }

  // The next actor the scheduler would run and the first message in its
  // mailbox, rendered; empty when nothing is queued.
  std::pair<caf::abstract_actor*, std::string> peek_next() {
    if (!sched.has_job()) return {nullptr, ""};
    auto& job = sched.next_job<caf::scheduled_actor>();
    auto* head = job.mailbox().peek();
    return {&job, head ? caf::to_string(head->content()) : ""};
  }

  // Asserts that the next step delivers a message to `who` whose rendering
  // contains `what`, then runs exactly that step.
  void step_expect(const caf::actor& who, const std::string& what) {
    auto [job, text] = peek_next();
    CHECK(job == caf::actor_cast<caf::abstract_actor*>(who));
    INFO("next message: " << text);
    CHECK(text.find(what) != std::string::npos);
    sched.run_once();
  }

  caf::actor member(const script_ptr& sc, col::membership m) {
    auto a = sys.spawn(scripted_member, sc, driver, std::move(m));
    sc->self = a.address();
    spawned.push_back(a);
    return a;
  }

  static col::membership ms(int rank, int ws, std::string name = "g") {
    return {std::move(name), rank, ws, "gloo", group_timeout_ms, 0};
  }

  // A client actor that asks the driver once and records the answer.
  template<class Result, class... Ts>
  outcome_ptr ask(Ts... xs) {
    auto out = std::make_shared<outcome>();
    auto client = sys.spawn([=, this](caf::event_based_actor* self) {
      self->request(driver, caf::infinite, xs...)
        .then(
          [=](Result& x) {
            ++out->answers;
            if constexpr (std::is_same_v<Result, col::op_result>)
              out->result = std::move(x);
            else if constexpr (std::is_same_v<Result, col::group_status>)
              out->status = std::move(x);
          },
          [=](caf::error& err) {
            ++out->answers;
            out->err = std::move(err);
          });
    });
    spawned.push_back(client);
    return out;
  }

  outcome_ptr ask_op(col::op_request req) {
    return ask<col::op_result>(std::move(req));
  }

  /// Asks for an allreduce of refs 1 to 3 on group "g" (3 ranks, formed)
  /// and runs until every rank was started on it.
  outcome_ptr started_allreduce() {
    auto op =
      ask_op({"g", col::op_kind::allreduce, {ref(1), ref(2), ref(3)}, {}});
    run();
    return op;
  }

  outcome_ptr wait_for(const std::string& group) {
    return ask<caf::ok_atom>(col::wait_atom::value, group);
  }

  outcome_ptr declare(const std::string& group, std::vector<caf::actor> members,
                      int64_t timeout_ms = group_timeout_ms,
                      std::string backend = "gloo") {
    return ask<caf::ok_atom>(col::declare_atom::value, group,
                             std::move(members), std::move(backend),
                             timeout_ms);
  }

  // An actor that knows nothing of the member protocol.
  caf::actor stranger() {
    auto a = sys.spawn([]() -> caf::behavior { return {[](int) {}}; });
    spawned.push_back(a);
    return a;
  }

  col::group_status status(const std::string& group) {
    auto out = ask<col::group_status>(col::status_atom::value, group);
    run();
    REQUIRE(out->answers == 1);
    return out->status;
  }

  // Registers `n` scripted members of group `name` living on `on_node`
  // (default: a node other than the driver's).
  std::vector<script_ptr> registered_group(int n,
                                           std::vector<caf::actor>& actors,
                                           const std::string& name = "g",
                                           const std::string& on_node = "") {
    std::vector<script_ptr> scripts;
    for (int r = 0; r < n; ++r) {
      scripts.push_back(std::make_shared<script>());
      if (!on_node.empty()) scripts.back()->node = on_node;
      actors.push_back(member(scripts.back(), ms(r, n, name)));
    }
    run();
    return scripts;
  }

  // registered_group, then every member reports ready.
  std::vector<script_ptr> formed_group(int n, std::vector<caf::actor>& actors,
                                       const std::string& name = "g",
                                       const std::string& on_node = "") {
    auto scripts = registered_group(n, actors, name, on_node);
    for (int r = 0; r < n; ++r)
      ready(actors[r], *scripts[r], name, r);
    run();
    return scripts;
  }

  // Rank `rank` reports that it formed `name` on `backend` (ms() asks for
  // gloo), or that it failed with `err`.
  void ready(const caf::actor& who, const script& sc, const std::string& name,
             int rank, caf::error err = {}, std::string backend = "gloo") {
    if (err) backend.clear();
    caf::send_as(who, driver, col::ready_atom::value, name, sc.gen,
                 int32_t{rank}, std::move(err), std::move(backend));
  }

  // Lets a scripted member fail op `seq` of group "g" with `err`.
  static void fail(script& sc, uint64_t seq, caf::error err) {
    REQUIRE(sc.unfinished.count({"g", seq}) == 1);
    caf::anon_send(caf::actor_cast<caf::actor>(sc.self), fail_atom::value,
                   std::string{"g"}, seq, std::move(err));
  }

  col::object_ref ref(uint64_t id, col::shape_type shape = {4},
                      col::dtype type = col::dtype::float32) {
    return {node, id, type, std::move(shape), col::device::cpu()};
  }

  // Lets a scripted member complete op `seq` of `group` (at the next run):
  // in-place ops answer with their input, others with `out`.
  static void finish(script& sc, uint64_t seq, const std::string& group = "g",
                     col::object_ref out = {}) {
    REQUIRE(sc.unfinished.count({group, seq}) == 1);
    caf::anon_send(caf::actor_cast<caf::actor>(sc.self), finish_atom::value,
                   group, seq, std::move(out));
  }
};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

size_t count_lines(const script& sc, const std::string& needle) {
  return static_cast<size_t>(
    std::count_if(sc.log.begin(), sc.log.end(),
                  [&](const auto& line) { return contains(line, needle); }));
}

bool has_line(const script& sc, const std::string& needle) {
  return count_lines(sc, needle) > 0;
}

} // namespace

TEST_CASE("registration: init goes to every rank only once all registered - "
          "waiters are answered once all reported ready") {
  fixture f;
  auto s0 = std::make_shared<script>();
  auto s1 = std::make_shared<script>();
  auto m0 = f.member(s0, fixture::ms(0, 2));
  f.run();
  // Once a rank registered, await waits for the whole group.
  auto waiter = f.wait_for("g");
  f.run();
  CHECK(waiter->answers == 0);
  CHECK(s0->log.empty());
  CHECK(f.status("g").state == "forming");
  auto m1 = f.member(s1, fixture::ms(1, 2));
  // m1 starts and sends its registration; the driver takes it, tells m1
  // its grace and sends init to both ranks. m1, scheduled by the grace,
  // runs first and stays at the head while its mailbox holds more.
  f.step_expect(m1, "");
  f.step_expect(f.driver, "col_reg");
  f.step_expect(m1, "col_grace");
  f.step_expect(m1, "col_init");
  f.step_expect(m0, "col_init");
  CHECK(s0->gen != 0);
  CHECK(s0->gen == s1->gen);
  REQUIRE(s0->log.size() == 1);
  CHECK(s0->log[0] == "init g prefix " + std::to_string(s0->gen) + "/g store");
  CHECK(s1->log == s0->log);
  // Ready from rank 0 alone answers nobody.
  f.ready(m0, *s0, "g", 0);
  f.run();
  CHECK(waiter->answers == 0);
  f.ready(m1, *s1, "g", 1);
  f.step_expect(f.driver, "col_ready");
  f.run();
  CHECK(waiter->answers == 1);
  CHECK(!waiter->err);
  auto st = f.status("g");
  CHECK(st.state == "ready");
  CHECK(st.world_size == 2);
  CHECK(st.next_seq == 0);
  CHECK(st.backend == "gloo");
}

TEST_CASE("registration: a conflicting world size or a taken rank is "
          "refused with mismatch - the group still forms") {
  fixture f;
  auto s0 = std::make_shared<script>();
  auto s1 = std::make_shared<script>();
  auto intruder = std::make_shared<script>();
  auto other = std::make_shared<script>();
  auto m0 = f.member(s0, fixture::ms(0, 2));
  f.run();
  f.member(intruder, fixture::ms(0, 2)); // rank 0 is taken
  f.member(other, fixture::ms(1, 3));    // world size differs
  f.run();
  REQUIRE(intruder->log.size() == 1);
  CHECK(contains(intruder->log[0], "abort g: collective.mismatch"));
  CHECK(contains(intruder->log[0], "rank 0"));
  REQUIRE(other->log.size() == 1);
  CHECK(contains(other->log[0], "abort g: collective.mismatch"));
  CHECK(contains(other->log[0], "world size 3"));
  CHECK(s0->log.empty()); // nothing reached the rightful rank 0
  auto m1 = f.member(s1, fixture::ms(1, 2));
  f.run();
  CHECK(has_line(*s0, "init g"));
  CHECK(has_line(*s1, "init g"));
  f.ready(m0, *s0, "g", 0);
  f.ready(m1, *s1, "g", 1);
  f.run();
  CHECK(f.status("g").state == "ready");
}

TEST_CASE("registration: a rank that registers again once init went out is "
          "refused - no rank gets a second init") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.registered_group(2, actors);
  auto& s0 = scripts[0];
  auto& s1 = scripts[1];
  REQUIRE(s0->log.size() == 1);
  REQUIRE(s1->log.size() == 1);
  // A repeated join of rank 0 while the group forms.
  caf::anon_send(actors[0], col::join_atom::value, fixture::ms(0, 2));
  f.run();
  CHECK(count_lines(*s0, "init g") == 1);
  CHECK(count_lines(*s1, "init g") == 1);
  REQUIRE(s0->log.size() == 3);
  CHECK(s0->log[1] == "join g");
  CHECK(contains(s0->log[2], "abort g: collective.duplicate_group"));
  CHECK(contains(s0->log[2], "registered again"));
  // The formation fails now, naming the cause, for every rank and waiter
  // (not at its deadline, naming rank 0 as unready).
  CHECK(has_line(*s1, "abort g: collective.duplicate_group"));
  auto st = f.status("g");
  CHECK(st.state == "failed");
  CHECK(contains(col::render(st.reason), "registered again"));
}

TEST_CASE("destroying a group makes the rendezvous store forget its "
          "formation's keys - and no other group's") {
  fixture f;
  std::vector<caf::actor> actors;
  auto s0 = f.formed_group(2, actors)[0];
  REQUIRE(s0->store);
  auto gen = std::to_string(s0->gen);
  auto own = gen + "/g/formation/current/1:g";
  // A generation whose number starts with this one's, and a group whose
  // name starts with "g/" and this generation (a name may hold '/').
  auto later = gen + "0/g/formation/current/1:g";
  auto other =
    std::to_string(s0->gen + 1) + "/g/" + gen + "/formation/current/1:g";
  for (const auto& key : {own, later, other})
    caf::anon_send(s0->store, caf::put_atom::value, key,
                   std::vector<char>{'x'});
  f.run();
  auto destroyed =
    f.ask<caf::ok_atom>(col::destroy_atom::value, std::string{"g"});
  f.run();
  REQUIRE(destroyed->answers == 1);
  // 1: the key is there, 0: the get timed out, -2: another error.
  auto read = [&](const std::string& key) {
    auto found = std::make_shared<int>(-1);
    f.sys.spawn([=, store = s0->store](caf::event_based_actor* self) {
      self
        ->request(store, caf::infinite, caf::get_atom::value, key,
                  int64_t{1000})
        .then([=](std::vector<char>&) { *found = 1; },
              [=](caf::error& err) {
                *found = col::code_of(err) == col::errc::timeout ? 0 : -2;
              });
    });
    return found;
  };
  auto a = read(own);
  auto b = read(later);
  auto c = read(other);
  f.run();
  f.advance(2s);
  CHECK(*a == 0);
  CHECK(*b == 1);
  CHECK(*c == 1);
  // The driver lives on: its store's answer did not reach it as a stray.
  auto status =
    f.ask<col::group_status>(col::status_atom::value, std::string{"g"});
  f.run();
  CHECK(status->answers == 1);
}

TEST_CASE("gang timeout: nothing happens before the deadline - then the "
          "formation fails for every waiter and member, naming the ranks "
          "that never registered") {
  fixture f;
  auto s0 = std::make_shared<script>();
  f.member(s0, fixture::ms(0, 3));
  f.run();
  auto waiter = f.wait_for("g");
  f.run();
  // Just short of the group timeout plus the driver's grace: still forming.
  f.advance(std::chrono::milliseconds{group_timeout_ms} + grace - 1ms);
  CHECK(waiter->answers == 0);
  CHECK(s0->log.empty());
  f.advance(1ms);
  REQUIRE(waiter->answers == 1);
  CHECK(col::code_of(waiter->err) == col::errc::timeout);
  auto text = col::render(waiter->err);
  CHECK(contains(text, "group 'g'"));
  CHECK(contains(text, "ranks [1, 2] never registered"));
  // Rank 0 registered and was never sent init (the driver sends it once
  // every rank registered): it is not to blame.
  CHECK_FALSE(contains(text, "did not report ready"));
  CHECK(contains(text, "ranks [0] registered and waited for them"));
  REQUIRE(s0->log.size() == 1);
  CHECK(contains(s0->log[0], "abort g: collective.timeout"));
  CHECK(f.status("g").state == "failed");
  // Later requests get the same error at once.
  auto late = f.wait_for("g");
  f.run();
  CHECK(col::code_of(late->err) == col::errc::timeout);
}

TEST_CASE("an op asked for before every rank registered waits for the "
          "group instead of being refused for its refs' node") {
  fixture f;
  auto s0 = std::make_shared<script>();
  auto s1 = std::make_shared<script>();
  auto m0 = f.member(s0, fixture::ms(0, 2));
  f.run();
  auto op = f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, {}});
  f.run();
  CHECK(op->answers == 0);
  auto m1 = f.member(s1, fixture::ms(1, 2));
  f.run();
  f.ready(m0, *s0, "g", 0);
  f.ready(m1, *s1, "g", 1);
  f.run();
  CHECK(op->answers == 0);
  CHECK(s0->started.size() == 1);
  CHECK(s1->started.size() == 1);
}

TEST_CASE("an op asked for before a rank registered is refused before any "
          "data moves when that rank's ref lives on the driver's node and "
          "its member elsewhere") {
  fixture f;
  auto s0 = std::make_shared<script>();
  auto s1 = std::make_shared<script>();
  auto m0 = f.member(s0, fixture::ms(0, 2));
  f.run();
  // Rank 1's input in the driver's own store; rank 1 will live on the
  // scripted node.
  auto t = col::tensor::empty(col::dtype::float32, {4});
  REQUIRE(t);
  auto here = col::local_store(f.sys)->put(std::move(*t));
  REQUIRE(here);
  auto op = f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), *here}, {}});
  f.run();
  CHECK(op->answers == 0);
  auto m1 = f.member(s1, fixture::ms(1, 2));
  f.run();
  f.ready(m0, *s0, "g", 0);
  f.ready(m1, *s1, "g", 1);
  f.run();
  REQUIRE(op->answers == 1);
  CHECK(col::code_of(op->err) == col::errc::unknown_object);
  CHECK(
    contains(col::render(op->err), "refused before any data moved: ranks [1]"));
  CHECK(s0->started.empty());
  CHECK(s1->started.empty());
  CHECK(f.status("g").state == "ready");
}

TEST_CASE("gang timeout: registered ranks that never report ready are "
          "named") {
  fixture f;
  auto s0 = std::make_shared<script>();
  auto s1 = std::make_shared<script>();
  auto m0 = f.member(s0, fixture::ms(0, 2));
  f.member(s1, fixture::ms(1, 2));
  f.run();
  auto waiter = f.wait_for("g");
  f.ready(m0, *s0, "g", 0);
  f.run();
  f.advance(std::chrono::milliseconds{group_timeout_ms} + grace);
  REQUIRE(waiter->answers == 1);
  CHECK(col::code_of(waiter->err) == col::errc::timeout);
  CHECK(contains(col::render(waiter->err), "ranks [1] did not report ready"));
  CHECK(has_line(*s0, "abort g"));
  CHECK(has_line(*s1, "abort g"));
}

TEST_CASE("gang formation: a rank that dies before the group is formed "
          "fails it with peer_lost naming the rank") {
  fixture f;
  auto s0 = std::make_shared<script>();
  auto s1 = std::make_shared<script>();
  f.member(s0, fixture::ms(0, 3));
  auto m1 = f.member(s1, fixture::ms(1, 3));
  f.run();
  auto waiter = f.wait_for("g");
  f.run();
  caf::anon_send_exit(m1, caf::exit_reason::kill);
  f.run();
  REQUIRE(waiter->answers == 1);
  CHECK(col::code_of(waiter->err) == col::errc::peer_lost);
  auto text = col::render(waiter->err);
  CHECK(contains(text, "rank 1 died"));
  CHECK(contains(text, "before the group was formed"));
  CHECK(has_line(*s0, "abort g: collective.peer_lost"));
  CHECK(f.status("g").state == "failed");
}

TEST_CASE("gang formation: a rank that cannot build its communicator fails "
          "the group for everyone, naming it") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.registered_group(2, actors);
  auto waiter = f.wait_for("g");
  f.run();
  f.ready(actors[1], *scripts[1], "g", 1,
          col::make_error(col::errc::backend_error, "no route to rank 0"));
  f.run();
  REQUIRE(waiter->answers == 1);
  CHECK(col::code_of(waiter->err) == col::errc::backend_error);
  auto text = col::render(waiter->err);
  CHECK(contains(text, "rank 1 could not form the group"));
  CHECK(contains(text, "no route to rank 0"));
  CHECK(has_line(*scripts[0], "abort g"));
}

TEST_CASE("dispatch: ops are checked, numbered and started in request order - "
          "each client gets one answer with its own sequence number") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  col::op_request first{"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, {}};
  col::op_request second{
    "g", col::op_kind::allgather, {f.ref(3), f.ref(4)}, {}};
  auto a = f.ask_op(first);
  auto b = f.ask_op(second);
  f.run();
  // Each member was asked about its ref of the first op, told to start it,
  // then the same for the second op: never a start before its checks, and
  // the second op waits until the first one was started everywhere.
  CHECK(scripts[0]->log ==
        std::vector<std::string>{
          "init g prefix " + std::to_string(scripts[0]->gen) + "/g store",
          "check g object 1 as seq 0", "start g seq 0 allreduce",
          "check g object 3 as seq 1", "start g seq 1 allgather"});
  CHECK(scripts[1]->log[1] == "check g object 2 as seq 0");
  CHECK(scripts[1]->log[2] == "start g seq 0 allreduce");
  CHECK(scripts[1]->log[4] == "start g seq 1 allgather");
  // What each rank was told to run: its own ref, and for the out-of-place
  // allgather an output of world size x input shape.
  CHECK(scripts[1]->start(0).in.id == 2);
  CHECK(!scripts[1]->start(0).has_out);
  CHECK(scripts[1]->start(1).has_out);
  CHECK(scripts[1]->start(1).out_shape == col::shape_type{2, 4});
  // No answer until every rank finished; answers follow completion.
  fixture::finish(*scripts[0], 1, "g", f.ref(30, {2, 4}));
  fixture::finish(*scripts[1], 1, "g", f.ref(40, {2, 4}));
  f.run();
  CHECK(b->answers == 1);
  CHECK(!b->err);
  CHECK(b->result.seq == 1);
  REQUIRE(b->result.refs.size() == 2);
  CHECK(b->result.refs[0].id == 30); // out-of-place: the members' new refs
  CHECK(b->result.refs[1].id == 40);
  CHECK(a->answers == 0);
  fixture::finish(*scripts[0], 0);
  f.run();
  CHECK(a->answers == 0);
  fixture::finish(*scripts[1], 0);
  f.run();
  REQUIRE(a->answers == 1);
  CHECK(!a->err);
  CHECK(a->result.seq == 0);
  // In-place ops answer with the input refs.
  REQUIRE(a->result.refs.size() == 2);
  CHECK(a->result.refs[1].id == 2);
  CHECK(f.status("g").next_seq == 2);
}

TEST_CASE("dispatch: groups over the same members are numbered "
          "independently") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors, "a");
  // The same two actors also join group "b" (declared over them).
  auto declared =
    f.ask<caf::ok_atom>(col::declare_atom::value, std::string{"b"}, actors,
                        std::string{"gloo"}, int64_t{1000});
  f.run();
  CHECK(has_line(*scripts[0], "join b"));
  for (int r = 0; r < 2; ++r)
    f.ready(actors[r], *scripts[r], "b", r);
  f.run();
  REQUIRE(declared->answers == 1);
  CHECK(!declared->err);
  auto on_a = f.ask_op({"a", col::op_kind::barrier, {}, {}});
  auto on_b = f.ask_op({"b", col::op_kind::barrier, {}, {}});
  f.run();
  for (auto& sc : scripts) {
    CHECK(has_line(*sc, "start a seq 0 barrier"));
    CHECK(has_line(*sc, "start b seq 0 barrier"));
  }
  // Finishing b first answers b without waiting for a.
  for (auto& sc : scripts)
    fixture::finish(*sc, 0, "b");
  f.run();
  REQUIRE(on_b->answers == 1);
  CHECK(!on_b->err);
  CHECK(on_b->result.group == "b");
  CHECK(on_a->answers == 0);
  for (auto& sc : scripts)
    fixture::finish(*sc, 0, "a");
  f.run();
  REQUIRE(on_a->answers == 1);
  CHECK(!on_a->err);
  CHECK(f.status("a").next_seq == 1);
  CHECK(f.status("b").next_seq == 1);
}

TEST_CASE("dispatch: send/recv starts only the pair - the bystander takes no "
          "part and the next op still runs on every rank") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  col::op_params p;
  p.root = 2;
  p.peer = 0;
  auto sent = f.ask_op({"g", col::op_kind::send, {{}, {}, f.ref(7)}, p});
  f.run();
  CHECK(has_line(*scripts[2], "start g seq 0 send"));
  CHECK(has_line(*scripts[0], "start g seq 0 send"));
  CHECK(!has_line(*scripts[1], "start"));
  CHECK(scripts[0]->start(0).has_out);
  CHECK(scripts[0]->start(0).out_shape == col::shape_type{4});
  CHECK(!scripts[2]->start(0).has_out);
  fixture::finish(*scripts[0], 0, "g", f.ref(70));
  fixture::finish(*scripts[2], 0);
  f.run();
  REQUIRE(sent->answers == 1);
  CHECK(!sent->err);
  REQUIRE(sent->result.refs.size() == 3);
  CHECK(sent->result.refs[0].id == 70);
  CHECK(!sent->result.refs[1].valid());
  auto barrier = f.ask_op({"g", col::op_kind::barrier, {}, {}});
  f.run();
  for (auto& sc : scripts)
    CHECK(has_line(*sc, "start g seq 1 barrier"));
}

TEST_CASE("mismatch refused: a dtype or shape disagreement never reaches a "
          "member and takes no sequence number") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  auto before = scripts[0]->log.size();
  auto dtypes =
    f.ask_op({"g",
              col::op_kind::allreduce,
              {f.ref(1), f.ref(2, {4}, col::dtype::int32), f.ref(3)},
              {}});
  auto shapes = f.ask_op(
    {"g", col::op_kind::allreduce, {f.ref(1), f.ref(2), f.ref(3, {5})}, {}});
  col::op_params bad_root;
  bad_root.root = 3;
  auto root = f.ask_op(
    {"g", col::op_kind::broadcast, {f.ref(1), f.ref(2), f.ref(3)}, bad_root});
  f.run();
  REQUIRE(dtypes->answers == 1);
  CHECK(col::code_of(dtypes->err) == col::errc::mismatch);
  CHECK(contains(col::render(dtypes->err), "ranks [1] disagree with rank 0"));
  CHECK(contains(col::render(dtypes->err), "int32[4]"));
  REQUIRE(shapes->answers == 1);
  CHECK(col::code_of(shapes->err) == col::errc::mismatch);
  CHECK(contains(col::render(shapes->err), "2 has float32[5]"));
  REQUIRE(root->answers == 1);
  CHECK(col::code_of(root->err) == col::errc::invalid_argument);
  CHECK(contains(col::render(root->err), "root 3 is out of range [0, 3)"));
  for (auto& sc : scripts)
    CHECK(sc->log.size() == before); // no check, no start
  auto st = f.status("g");
  CHECK(st.state == "ready");
  CHECK(st.next_seq == 0);
}

TEST_CASE("mismatch refused: a ref a member does not hold fails the op at the "
          "check, before any start - the group stays usable") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  scripts[1]->check_errors[2] =
    col::make_error(col::errc::unknown_object, "no object 2 in the store");
  auto refused =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, {}});
  f.run();
  REQUIRE(refused->answers == 1);
  CHECK(col::code_of(refused->err) == col::errc::unknown_object);
  auto text = col::render(refused->err);
  CHECK(contains(text, "refused before any data moved: ranks [1]"));
  CHECK(contains(text, "no object 2 in the store"));
  for (auto& sc : scripts)
    CHECK(!has_line(*sc, "start"));
  // Rank 0's check passed and held its object for seq 0: the refusal lets
  // it go. Rank 1 is told too (a check that failed here by its timeout may
  // have held its object after all).
  CHECK(has_line(*scripts[0], "unhold g seq 0"));
  CHECK(has_line(*scripts[1], "unhold g seq 0"));
  auto next =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(3)}, {}});
  f.run();
  // The refused op took no number: the next one is checked as seq 0 too.
  CHECK(count_lines(*scripts[0], "check g object 1 as seq 0") == 2);
  CHECK(has_line(*scripts[0], "start g seq 0 allreduce"));
  fixture::finish(*scripts[0], 0);
  fixture::finish(*scripts[1], 0);
  f.run();
  REQUIRE(next->answers == 1);
  CHECK(!next->err);
}

TEST_CASE("a member of the driver's node that quits as if its node were "
          "lost takes only its own rank - not its neighbours") {
  // An actor quits with remote_link_unreachable when a link of its to a
  // lost node breaks: before, the driver took every member of its node
  // (the driver's own) for dead, in every group.
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  caf::anon_send_exit(actors[1], caf::exit_reason::remote_link_unreachable);
  f.step_expect(actors[1], "");
  f.step_expect(f.driver, "down_msg");
  f.run();
  auto st = f.status("g");
  CHECK(st.state == "broken");
  auto why = col::render(st.reason);
  INFO(why);
  CHECK(contains(why, "rank 1 died"));
  CHECK(!contains(why, "ranks ["));
  // The survivors were told: the driver still knows them.
  CHECK(has_line(*scripts[0], "abort g: collective.peer_lost"));
  CHECK(has_line(*scripts[2], "abort g: collective.peer_lost"));
}

TEST_CASE("a member dying mid-op: the client and the survivors get peer_lost "
          "naming it - queued and later ops fail - destroy lets the name be "
          "used again") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  auto running = f.started_allreduce();
  REQUIRE(scripts[2]->unfinished.count({"g", 0}) == 1);
  auto queued = f.ask_op({"g", col::op_kind::barrier, {}, {}});
  f.run();
  // Rank 0 finished, rank 1 dies, rank 2 still runs.
  fixture::finish(*scripts[0], 0);
  f.run();
  caf::anon_send_exit(actors[1], caf::exit_reason::kill);
  f.step_expect(actors[1], "");        // the exit message
  f.step_expect(f.driver, "down_msg"); // the driver's monitor fires
  f.run();
  REQUIRE(running->answers == 1);
  CHECK(col::code_of(running->err) == col::errc::peer_lost);
  CHECK(contains(col::render(running->err), "rank 1 died"));
  CHECK(contains(col::render(running->err), "group 'g'"));
  REQUIRE(queued->answers == 1);
  CHECK(col::code_of(queued->err) == col::errc::peer_lost);
  CHECK(has_line(*scripts[0], "abort g: collective.peer_lost"));
  CHECK(has_line(*scripts[2], "abort g: collective.peer_lost"));
  // A survivor's late completion changes nothing.
  fixture::finish(*scripts[2], 0);
  f.run();
  CHECK(running->answers == 1);
  auto st = f.status("g");
  CHECK(st.state == "broken");
  CHECK(col::code_of(st.reason) == col::errc::peer_lost);
  auto later = f.ask_op({"g", col::op_kind::barrier, {}, {}});
  f.run();
  CHECK(col::code_of(later->err) == col::errc::peer_lost);
  // Destroy: survivors leave; the name forms again from new members.
  auto destroyed =
    f.ask<caf::ok_atom>(col::destroy_atom::value, std::string{"g"});
  f.run();
  CHECK(destroyed->answers == 1);
  CHECK(has_line(*scripts[0], "leave g"));
  CHECK(f.status("g").state == "unknown");
  std::vector<caf::actor> fresh;
  f.formed_group(2, fresh);
  CHECK(f.status("g").state == "ready");
  // The driver itself stayed up and answers.
  CHECK(f.status("other").state == "unknown");
}

TEST_CASE("a driver that exits answers its running op with aborted naming "
          "the op and its exit reason - its members break the group") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  auto running = f.started_allreduce();
  fixture::finish(*scripts[0], 0); // rank 0 finished, ranks 1 and 2 run
  f.run();
  REQUIRE(running->answers == 0);
  caf::anon_send_exit(f.driver, caf::exit_reason::user_shutdown);
  f.run();
  REQUIRE(running->answers == 1);
  CHECK(col::code_of(running->err) == col::errc::aborted);
  auto text = col::render(running->err);
  CHECK(contains(text, "group 'g' allreduce seq 0"));
  CHECK(contains(text, "the driver exited (exit.user_shutdown)"));
  for (auto& sc : scripts)
    CHECK(has_line(*sc, "abort g: collective.aborted"));
}

TEST_CASE("an op past its deadline fails with timeout naming the ranks that "
          "had not finished, and breaks the group") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  col::op_params p;
  p.timeout_ms = 500;
  auto slow =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2), f.ref(3)}, p});
  f.run();
  CHECK(scripts[0]->start(0).params.timeout_ms == 500);
  fixture::finish(*scripts[1], 0);
  f.run();
  f.advance(500ms + grace - 1ms);
  CHECK(slow->answers == 0);
  f.advance(1ms);
  REQUIRE(slow->answers == 1);
  CHECK(col::code_of(slow->err) == col::errc::timeout);
  auto text = col::render(slow->err);
  CHECK(contains(text, "ranks [0, 2] had not finished"));
  CHECK(contains(text, "allreduce"));
  // The driver asks every rank for its recent ops (and logs them), then
  // tells every rank the group is broken.
  for (auto& sc : scripts) {
    REQUIRE(sc->log.size() >= 2);
    CHECK(sc->log[sc->log.size() - 2] == "history g");
    CHECK(contains(sc->log.back(), "abort g: collective.timeout"));
  }
  CHECK(f.status("g").state == "broken");
}

// The refs each scripted member was told to release, in order.
std::vector<std::string> releases(const script& sc) {
  std::vector<std::string> result;
  for (auto& line : sc.log)
    if (contains(line, "release object")) result.push_back(line);
  return result;
}

TEST_CASE("an output of another node is released through its member after "
          "the group that made it was destroyed") {
  // (A hand-over takes the same way: holder_of.)
  // Before: the driver looked for a member of that node among its groups
  // only, and the release failed with unknown_object although the member
  // and the object were alive; the object stayed until its client ended.
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors, "g", "nodeB");
  auto in0 = f.ref(1);
  auto in1 = f.ref(2);
  in0.node = in1.node = "nodeB";
  auto op = f.ask_op({"g", col::op_kind::allgather, {in0, in1}, {}});
  f.run();
  col::object_ref out0{
    "nodeB", 30, col::dtype::float32, {2, 4}, col::device::cpu()};
  auto out1 = out0;
  out1.id = 31;
  fixture::finish(*scripts[0], 0, "g", out0);
  fixture::finish(*scripts[1], 0, "g", out1);
  f.run();
  REQUIRE(op->answers == 1);
  REQUIRE(!op->err);
  auto destroyed =
    f.ask<caf::ok_atom>(col::destroy_atom::value, std::string{"g"});
  f.run();
  REQUIRE(destroyed->answers == 1);
  auto released = f.ask<caf::ok_atom>(col::release_atom::value, out1);
  f.run();
  REQUIRE(released->answers == 1);
  CHECK(!released->err);
  size_t asked = 0;
  for (auto& sc : scripts)
    asked += releases(*sc).size();
  CHECK(asked == 1);
}

TEST_CASE("an op answered with an error releases the outputs of the ranks "
          "that finished it - nobody else holds their refs") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  auto op = f.ask_op(
    {"g", col::op_kind::allgather, {f.ref(1), f.ref(2), f.ref(3)}, {}});
  f.run();
  fixture::finish(*scripts[0], 0, "g", f.ref(30, {3, 4}));
  fixture::fail(*scripts[1], 0,
                col::make_error(col::errc::backend_error, "rank 1 failed"));
  f.run();
  CHECK(op->answers == 0);
  fixture::finish(*scripts[2], 0, "g", f.ref(50, {3, 4}));
  f.run();
  REQUIRE(op->answers == 1);
  CHECK(col::code_of(op->err) == col::errc::backend_error);
  CHECK(releases(*scripts[0]) == std::vector<std::string>{"release object 30"});
  CHECK(releases(*scripts[1]).empty());
  CHECK(releases(*scripts[2]) == std::vector<std::string>{"release object 50"});
}

TEST_CASE("an in-place op answered with an error releases nothing - the "
          "refs its ranks report are the client's inputs") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  auto op = f.started_allreduce();
  fixture::finish(*scripts[0], 0); // answers with its input, ref 1
  fixture::fail(*scripts[1], 0,
                col::make_error(col::errc::backend_error, "rank 1 failed"));
  fixture::finish(*scripts[2], 0);
  f.run();
  REQUIRE(op->answers == 1);
  CHECK(op->err);
  for (auto& sc : scripts)
    CHECK(releases(*sc).empty());
}

TEST_CASE("an op past its deadline releases the outputs reported before it "
          "- and a rank's output that comes after the answer") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  col::op_params p;
  p.timeout_ms = 500;
  auto slow =
    f.ask_op({"g", col::op_kind::allgather, {f.ref(1), f.ref(2), f.ref(3)}, p});
  f.run();
  fixture::finish(*scripts[1], 0, "g", f.ref(31, {3, 4}));
  f.run();
  CHECK(releases(*scripts[1]).empty());
  f.advance(500ms + grace);
  REQUIRE(slow->answers == 1);
  CHECK(col::code_of(slow->err) == col::errc::timeout);
  CHECK(releases(*scripts[1]) == std::vector<std::string>{"release object 31"});
  // Rank 0 finishes after the answer: its output is released at once.
  fixture::finish(*scripts[0], 0, "g", f.ref(30, {3, 4}));
  f.run();
  CHECK(releases(*scripts[0]) == std::vector<std::string>{"release object 30"});
  CHECK(slow->answers == 1);
}

TEST_CASE("a driver that exits mid-op releases the outputs its running op "
          "collected - a destroyed group's late output too") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  std::vector<caf::actor> others;
  auto other = f.formed_group(2, others, "h");
  auto running =
    f.ask_op({"g", col::op_kind::allgather, {f.ref(1), f.ref(2)}, {}});
  auto destroyed_mid_op =
    f.ask_op({"h", col::op_kind::allgather, {f.ref(3), f.ref(4)}, {}});
  f.run();
  fixture::finish(*scripts[0], 0, "g", f.ref(30, {2, 4}));
  f.run();
  // Group h is destroyed while its op runs; its rank 1 finishes after.
  auto destroyed =
    f.ask<caf::ok_atom>(col::destroy_atom::value, std::string{"h"});
  f.run();
  REQUIRE(destroyed_mid_op->answers == 1);
  CHECK(col::code_of(destroyed_mid_op->err) == col::errc::aborted);
  fixture::finish(*other[1], 0, "h", f.ref(41, {2, 4}));
  f.run();
  CHECK(releases(*other[1]) == std::vector<std::string>{"release object 41"});
  CHECK(releases(*scripts[0]).empty());
  caf::anon_send_exit(f.driver, caf::exit_reason::user_shutdown);
  f.run();
  REQUIRE(running->answers == 1);
  CHECK(col::code_of(running->err) == col::errc::aborted);
  CHECK(releases(*scripts[0]) == std::vector<std::string>{"release object 30"});
  CHECK(releases(*scripts[1]).empty());
}

TEST_CASE("outputs on the driver's own node are dropped from its store "
          "when their op fails - the inputs stay") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors, "g", col::node_name(f.sys));
  auto store = col::local_store(f.sys);
  auto stored = [&](col::shape_type shape) {
    auto t = col::tensor::empty(col::dtype::float32, std::move(shape));
    REQUIRE(t);
    auto ref = store->put(std::move(*t));
    REQUIRE(ref);
    return *ref;
  };
  std::vector<col::object_ref> inputs{stored({4}), stored({4})};
  auto output = stored({2, 4}); // what rank 0's member made
  auto op = f.ask_op({"g", col::op_kind::allgather, inputs, {}});
  f.run();
  fixture::finish(*scripts[0], 0, "g", output);
  fixture::fail(*scripts[1], 0,
                col::make_error(col::errc::backend_error, "rank 1 failed"));
  f.run();
  REQUIRE(op->answers == 1);
  CHECK(op->err);
  CHECK(!store->contains(output));
  CHECK(store->contains(inputs[0]));
  CHECK(store->contains(inputs[1]));
  for (auto& sc : scripts)
    CHECK(releases(*sc).empty()); // no message for a ref of its own node
  for (auto& in : inputs)
    store->release(in);
}

TEST_CASE("requests for unknown groups are refused at once") {
  fixture f;
  auto op = f.ask_op({"nowhere", col::op_kind::barrier, {}, {}});
  f.run();
  REQUIRE(op->answers == 1);
  CHECK(col::code_of(op->err) == col::errc::unknown_group);
  CHECK(contains(col::render(op->err), "nowhere"));
}

TEST_CASE("refs on the driver's own node are checked in its store, without "
          "a message to the member") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors, "g", col::node_name(f.sys));
  auto store = col::local_store(f.sys);
  std::vector<col::object_ref> refs;
  for (int r = 0; r < 2; ++r) {
    auto t = col::tensor::empty(col::dtype::float32, {4});
    REQUIRE(t);
    auto ref = store->put(std::move(*t));
    REQUIRE(ref);
    refs.push_back(*ref);
  }
  auto before = scripts[0]->log.size();
  auto ok = f.ask_op({"g", col::op_kind::allreduce, refs, {}});
  f.run();
  for (auto& sc : scripts) {
    CHECK(sc->log.size() == before + 1);
    CHECK(sc->log.back() == "start g seq 0 allreduce");
  }
  for (auto& sc : scripts)
    fixture::finish(*sc, 0);
  f.run();
  REQUIRE(ok->answers == 1);
  CHECK(!ok->err);
  // A released object is refused before anything is sent.
  store->release(refs[1]);
  auto gone = f.ask_op({"g", col::op_kind::allreduce, refs, {}});
  f.run();
  REQUIRE(gone->answers == 1);
  CHECK(col::code_of(gone->err) == col::errc::unknown_object);
  CHECK(contains(col::render(gone->err),
                 "refused before any data moved: ranks [1]"));
  for (auto& sc : scripts)
    CHECK(sc->log.size() == before + 1);
  store->release(refs[0]);
  CHECK(f.status("g").next_seq == 1);
}

TEST_CASE("survivors that report a lost connection wait for the driver's "
          "down message, whose error names the dead rank") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  auto op = f.started_allreduce();
  // Ranks 0 and 1 see rank 2's connections close before the driver learns
  // that rank 2 is gone.
  for (int r = 0; r < 2; ++r)
    fixture::fail(
      *scripts[r], 0,
      col::make_error(col::errc::peer_lost, "connection to a peer lost"));
  f.run();
  CHECK(op->answers == 0);
  caf::anon_send_exit(actors[2], caf::exit_reason::kill);
  f.run();
  REQUIRE(op->answers == 1);
  CHECK(col::code_of(op->err) == col::errc::peer_lost);
  CHECK(contains(col::render(op->err), "rank 2 died"));
  // The deferred answer falls due later and changes nothing.
  f.advance(grace);
  CHECK(op->answers == 1);
}

TEST_CASE("a lost connection with no member dying is answered after the "
          "grace period, naming the ranks that reported it") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  auto op = f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, {}});
  f.run();
  fixture::fail(*scripts[0], 0,
                col::make_error(col::errc::peer_lost, "connection reset"));
  fixture::finish(*scripts[1], 0);
  f.run();
  f.advance(grace - 1ms);
  CHECK(op->answers == 0);
  f.advance(1ms);
  REQUIRE(op->answers == 1);
  CHECK(col::code_of(op->err) == col::errc::peer_lost);
  CHECK(contains(col::render(op->err), "failed on ranks [0]"));
  CHECK(f.status("g").state == "broken");
}

TEST_CASE("declaring a group over an actor that is no member fails the "
          "declaration with invalid_argument naming its position - the "
          "driver stays up") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  auto declared = f.declare("d", {actors[0], f.stranger()});
  f.run();
  REQUIRE(declared->answers == 1);
  CHECK(col::code_of(declared->err) == col::errc::invalid_argument);
  auto text = col::render(declared->err);
  INFO(text);
  CHECK(contains(text, "group 'd'"));
  CHECK(contains(text, "position 1"));
  CHECK(contains(text, "unexpected_message"));
  // The member that did join is told; the name is free after destroy.
  CHECK(has_line(*scripts[0], "abort d: collective.invalid_argument"));
  CHECK(f.status("d").state == "failed");
  // The driver survived: its other group still runs ops.
  CHECK(f.status("g").state == "ready");
  auto op = f.ask_op({"g", col::op_kind::barrier, {}, {}});
  f.run();
  for (auto& sc : scripts)
    fixture::finish(*sc, 0);
  f.run();
  REQUIRE(op->answers == 1);
  CHECK(!op->err);
  auto destroyed =
    f.ask<caf::ok_atom>(col::destroy_atom::value, std::string{"d"});
  f.run();
  CHECK(!destroyed->err);
  auto again = f.declare("d", {actors[1], actors[0]});
  f.run();
  for (int r = 0; r < 2; ++r)
    f.ready(actors[1 - r], *scripts[1 - r], "d", r);
  f.run();
  REQUIRE(again->answers == 1);
  CHECK(!again->err);
}

TEST_CASE("declaring with a null actor, the same actor twice or a dead actor "
          "is answered at once with invalid_argument naming the position") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  auto dead = f.stranger();
  caf::anon_send_exit(dead, caf::exit_reason::kill);
  f.run();
  auto null = f.declare("d", {actors[0], caf::actor{}});
  auto twice = f.declare("e", {actors[0], actors[1], actors[0]});
  f.run();
  REQUIRE(null->answers == 1);
  CHECK(col::code_of(null->err) == col::errc::invalid_argument);
  CHECK(contains(col::render(null->err), "group 'd'"));
  CHECK(contains(col::render(null->err), "position 1 is a null actor"));
  REQUIRE(twice->answers == 1);
  CHECK(col::code_of(twice->err) == col::errc::invalid_argument);
  CHECK(contains(col::render(twice->err), "group 'e'"));
  CHECK(contains(col::render(twice->err), "positions 0 and 2"));
  // Refused before any member heard of them.
  for (auto& sc : scripts) {
    CHECK(!has_line(*sc, "join d"));
    CHECK(!has_line(*sc, "join e"));
  }
  CHECK(f.status("d").state == "unknown");
  CHECK(f.status("e").state == "unknown");
  auto gone = f.declare("x", {actors[0], dead});
  f.run();
  REQUIRE(gone->answers == 1);
  CHECK(col::code_of(gone->err) == col::errc::invalid_argument);
  auto text = col::render(gone->err);
  INFO(text);
  CHECK(contains(text, "group 'x'"));
  CHECK(contains(text, "position 1"));
  CHECK(contains(text, "is dead"));
  CHECK(has_line(*scripts[0], "abort x"));
}

TEST_CASE("an op kind, dtype, reduce op or algorithm outside its enum is "
          "refused with invalid_argument before a sequence number is taken - "
          "the group stays usable") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  auto before = scripts[0]->log.size();
  auto kind =
    f.ask_op({"g", static_cast<col::op_kind>(99), {f.ref(1), f.ref(2)}, {}});
  auto bad_type = static_cast<col::dtype>(77);
  auto type = f.ask_op({"g",
                        col::op_kind::allgather,
                        {f.ref(1, {4}, bad_type), f.ref(2, {4}, bad_type)},
                        {}});
  col::op_params bad_op;
  bad_op.op = static_cast<col::reduce_op>(42);
  auto unused_op =
    f.ask_op({"g", col::op_kind::broadcast, {f.ref(1), f.ref(2)}, bad_op});
  col::op_params bad_algo;
  bad_algo.algorithm = static_cast<col::allreduce_algorithm>(200);
  auto algo =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, bad_algo});
  f.run();
  for (auto* o : {&kind, &type, &unused_op, &algo}) {
    REQUIRE((*o)->answers == 1);
    INFO(col::render((*o)->err));
    CHECK(col::code_of((*o)->err) == col::errc::invalid_argument);
  }
  CHECK(contains(col::render(kind->err), "op kind 99"));
  CHECK(contains(col::render(type->err), "dtype 77"));
  CHECK(contains(col::render(unused_op->err), "reduce op 42"));
  CHECK(contains(col::render(algo->err), "algorithm 200"));
  for (auto& sc : scripts)
    CHECK(sc->log.size() == before); // no check, no start
  auto st = f.status("g");
  CHECK(st.state == "ready");
  CHECK(st.next_seq == 0);
  auto ok = f.ask_op({"g", col::op_kind::barrier, {}, {}});
  f.run();
  CHECK(has_line(*scripts[0], "start g seq 0 barrier"));
}

TEST_CASE("negative and absurdly large timeouts are refused with "
          "invalid_argument - the group stays usable") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  auto before = scripts[0]->log.size();
  col::op_params negative;
  negative.timeout_ms = -5;
  col::op_params huge;
  huge.timeout_ms = std::numeric_limits<int64_t>::max();
  auto neg = f.ask_op({"g", col::op_kind::barrier, {}, negative});
  auto big = f.ask_op({"g", col::op_kind::barrier, {}, huge});
  f.run();
  REQUIRE(neg->answers == 1);
  CHECK(col::code_of(neg->err) == col::errc::invalid_argument);
  CHECK(contains(col::render(neg->err), "timeout_ms -5"));
  REQUIRE(big->answers == 1);
  CHECK(col::code_of(big->err) == col::errc::invalid_argument);
  CHECK(contains(col::render(big->err), "exceeds the maximum"));
  for (auto& sc : scripts)
    CHECK(sc->log.size() == before);
  CHECK(f.status("g").state == "ready");
  CHECK(f.status("g").next_seq == 0);
  // The same bounds hold for a declaration's group timeout.
  auto zero = f.declare("d", {actors[0]}, 0);
  auto forever =
    f.declare("e", {actors[0]}, std::numeric_limits<int64_t>::max());
  f.run();
  REQUIRE(zero->answers == 1);
  CHECK(col::code_of(zero->err) == col::errc::invalid_argument);
  REQUIRE(forever->answers == 1);
  CHECK(col::code_of(forever->err) == col::errc::invalid_argument);
  CHECK(!has_line(*scripts[0], "join"));
}

TEST_CASE("destroying a group the driver does not know answers "
          "unknown_group naming it") {
  fixture f;
  auto destroyed =
    f.ask<caf::ok_atom>(col::destroy_atom::value, std::string{"nowhere"});
  f.run();
  REQUIRE(destroyed->answers == 1);
  CHECK(col::code_of(destroyed->err) == col::errc::unknown_group);
  CHECK(contains(col::render(destroyed->err), "'nowhere'"));
}

TEST_CASE("awaiting a group that no member registered for and nobody "
          "declared answers unknown_group at once - after a registration it "
          "waits") {
  fixture f;
  auto unknown = f.wait_for("nowhere");
  f.run();
  REQUIRE(unknown->answers == 1);
  CHECK(col::code_of(unknown->err) == col::errc::unknown_group);
  CHECK(contains(col::render(unknown->err), "'nowhere'"));
  // Asking left no trace of the name behind.
  CHECK(f.status("nowhere").state == "unknown");
  std::vector<caf::actor> actors;
  auto scripts = f.registered_group(2, actors);
  auto waiter = f.wait_for("g");
  f.run();
  CHECK(waiter->answers == 0);
  for (int r = 0; r < 2; ++r)
    f.ready(actors[r], *scripts[r], "g", r);
  f.run();
  REQUIRE(waiter->answers == 1);
  CHECK(!waiter->err);
}

TEST_CASE("a member dying mid-op: every pending op's error names that op, "
          "not a barrier") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  auto running = f.started_allreduce();
  auto queued = f.ask_op(
    {"g", col::op_kind::allgather, {f.ref(4), f.ref(5), f.ref(6)}, {}});
  f.run();
  caf::anon_send_exit(actors[1], caf::exit_reason::kill);
  f.run();
  REQUIRE(running->answers == 1);
  auto text = col::render(running->err);
  INFO(text);
  CHECK(col::code_of(running->err) == col::errc::peer_lost);
  CHECK(contains(text, "group 'g' allreduce seq 0"));
  CHECK(contains(text, "rank 1 died"));
  CHECK(!contains(text, "barrier"));
  REQUIRE(queued->answers == 1);
  CHECK(contains(col::render(queued->err), "allgather"));
  CHECK(!contains(col::render(queued->err), "barrier"));
  auto reason = col::render(f.status("g").reason);
  CHECK(contains(reason, "rank 1 died"));
  CHECK(!contains(reason, "barrier"));
}

TEST_CASE("an actor system without a middleman has a node name of its own: "
          "unknown-object errors from the driver's store name it") {
  fixture f;
  auto here = col::node_name(f.sys);
  CHECK(here != "invalid-node");
  CHECK(col::node_name(f.sys) == here); // stable
  {
    caf::actor_system_config cfg;
    caf::actor_system other{cfg};
    CHECK(col::node_name(other) != here);
    CHECK(col::local_store(other) != col::local_store(f.sys));
  }
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors, "g", here);
  auto store = col::local_store(f.sys);
  std::vector<col::object_ref> refs;
  for (int r = 0; r < 2; ++r) {
    auto ref = store->put(col::tensor::from_vector(std::vector<float>(4)));
    REQUIRE(ref);
    refs.push_back(*ref);
  }
  store->release(refs[1]);
  auto gone = f.ask_op({"g", col::op_kind::allreduce, refs, {}});
  f.run();
  REQUIRE(gone->answers == 1);
  auto text = col::render(gone->err);
  INFO(text);
  CHECK(col::code_of(gone->err) == col::errc::unknown_object);
  CHECK(contains(text, "on node " + here));
  CHECK(!contains(text, "invalid-node"));
  store->release(refs[0]);
}

TEST_CASE("send/recv: only the sender's ref is checked - the bystanders' and "
          "the receiver's are ignored") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  // Rank 1 would refuse its ref, but it takes no part; the receiver (rank
  // 2) receives into an output of its own and reads no input.
  scripts[1]->check_errors[8] =
    col::make_error(col::errc::unknown_object, "no object 8");
  scripts[2]->check_errors[9] =
    col::make_error(col::errc::unknown_object, "no object 9");
  col::op_params p;
  p.root = 0;
  p.peer = 2;
  auto sent =
    f.ask_op({"g", col::op_kind::send, {f.ref(7), f.ref(8), f.ref(9)}, p});
  f.run();
  CHECK(has_line(*scripts[0], "check g object 7"));
  CHECK(!has_line(*scripts[2], "check"));
  CHECK(!has_line(*scripts[1], "check"));
  CHECK(has_line(*scripts[0], "start g seq 0 send"));
  CHECK(has_line(*scripts[2], "start g seq 0 send"));
  CHECK(sent->answers == 0);
}

TEST_CASE("an in-place op naming one object for two ranks is refused "
          "before any check - each rank needs its own object") {
  // Before: accepted; two Gloo lanes reduced into one buffer at once and
  // the sums came out wrong (helper-55: 174764 of 262144 elements).
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(3, actors);
  for (auto op : {col::op_kind::allreduce, col::op_kind::broadcast,
                  col::op_kind::reduce}) {
    CAPTURE(col::to_string(op));
    auto refused = f.ask_op({"g", op, {f.ref(1), f.ref(2), f.ref(1)}, {}});
    f.run();
    REQUIRE(refused->answers == 1);
    CHECK(col::code_of(refused->err) == col::errc::invalid_argument);
    auto text = col::render(refused->err);
    CHECK(contains(text, "ranks [0, 2] name the same object"));
    CHECK(contains(text, "obj#1"));
  }
  for (auto& sc : scripts)
    CHECK(!has_line(*sc, "check"));
  // Reading one object from two ranks is fine where each writes an output
  // of its own; the refusals took no number.
  auto gathered = f.ask_op(
    {"g", col::op_kind::allgather, {f.ref(1), f.ref(2), f.ref(1)}, {}});
  f.run();
  CHECK(has_line(*scripts[2], "start g seq 0 allgather"));
  CHECK(gathered->answers == 0);
}

TEST_CASE("a barrier ignores the refs a client names - a released one does "
          "not refuse it") {
  // Before: the refs were checked, and a stale one refused the barrier
  // with unknown_object although a barrier reads no object.
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  scripts[1]->check_errors[5] =
    col::make_error(col::errc::unknown_object, "no object 5");
  auto op = f.ask_op({"g", col::op_kind::barrier, {f.ref(4), f.ref(5)}, {}});
  f.run();
  CHECK(!has_line(*scripts[1], "check"));
  CHECK(has_line(*scripts[0], "start g seq 0 barrier"));
  CHECK(has_line(*scripts[1], "start g seq 0 barrier"));
  CHECK(!scripts[1]->start(0).in.valid());
  CHECK(op->answers == 0);
}

TEST_CASE("counts of allgatherv and alltoallv that add up beyond 64 bits are "
          "refused before a sequence number - the group stays usable") {
  // Before: the sums wrapped around, the driver numbered the op and every
  // member failed it, which broke the group.
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  constexpr uint64_t half = uint64_t{1} << 63;
  col::op_params v;
  v.counts = {half, half + 1, half, half + 1};
  auto a2a =
    f.ask_op({"g", col::op_kind::alltoallv, {f.ref(1, {4}), f.ref(2, {4})}, v});
  col::op_params g;
  constexpr int64_t quarter = int64_t{1} << 62;
  g.counts = {uint64_t{quarter}, uint64_t{quarter}}; // 2^63: above int64
  auto agv = f.ask_op({"g",
                       col::op_kind::allgatherv,
                       {f.ref(3, {quarter}), f.ref(4, {quarter})},
                       g});
  f.run();
  for (auto& refused : {a2a, agv}) {
    REQUIRE(refused->answers == 1);
    CHECK(col::code_of(refused->err) == col::errc::invalid_argument);
    CHECK(contains(col::render(refused->err), "add up to more than"));
  }
  CHECK(contains(col::render(a2a->err), "counts of rank 0"));
  for (auto& sc : scripts)
    CHECK(!has_line(*sc, "start"));
  auto next = f.ask_op({"g", col::op_kind::barrier, {}, {}});
  f.run();
  CHECK(has_line(*scripts[0], "start g seq 0 barrier"));
  CHECK(f.status("g").state == "ready");
}

TEST_CASE("a member that does not answer the driver's check in time gets "
          "the op refused with timeout - not peer_lost") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  scripts[1]->unanswered_checks.insert(2);
  auto refused =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, {}});
  f.run();
  CHECK(has_line(*scripts[1], "check g object 2"));
  CHECK(refused->answers == 0);
  f.advance(std::chrono::milliseconds{group_timeout_ms});
  REQUIRE(refused->answers == 1);
  CHECK(col::code_of(refused->err) == col::errc::timeout);
  CHECK(contains(col::render(refused->err),
                 "refused before any data moved: ranks [1]"));
  CHECK(!has_line(*scripts[0], "start"));
}

TEST_CASE("backend: a group declared with auto takes the backend its ranks "
          "report, and says so in its status only once formed") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  auto declared = f.declare("d", actors, group_timeout_ms, "auto");
  f.run();
  CHECK(has_line(*scripts[0], "join d"));
  f.ready(actors[0], *scripts[0], "d", 0, {}, "shm");
  f.run();
  auto forming = f.status("d");
  CHECK(forming.state == "forming");
  CHECK(forming.backend.empty());
  f.ready(actors[1], *scripts[1], "d", 1, {}, "shm");
  f.run();
  REQUIRE(declared->answers == 1);
  CHECK(!declared->err);
  auto st = f.status("d");
  CHECK(st.state == "ready");
  CHECK(st.backend == "shm");
  CHECK(f.status("g").backend == "gloo");
  CHECK(f.status("nowhere").backend.empty());
}

TEST_CASE("backend: ranks reporting different backends fail the formation "
          "with mismatch naming each backend's ranks") {
  fixture f;
  std::vector<caf::actor> actors;
  std::vector<script_ptr> scripts;
  for (int r = 0; r < 3; ++r) {
    scripts.push_back(std::make_shared<script>());
    auto m = fixture::ms(r, 3);
    m.backend = "auto";
    actors.push_back(f.member(scripts.back(), m));
  }
  f.run();
  auto waiter = f.wait_for("g");
  f.run();
  f.ready(actors[0], *scripts[0], "g", 0, {}, "shm");
  f.ready(actors[2], *scripts[2], "g", 2, {}, "shm");
  f.run();
  CHECK(waiter->answers == 0);
  f.ready(actors[1], *scripts[1], "g", 1, {}, "gloo");
  f.run();
  REQUIRE(waiter->answers == 1);
  CHECK(col::code_of(waiter->err) == col::errc::mismatch);
  auto text = col::render(waiter->err);
  INFO(text);
  CHECK(contains(text, "group 'g'"));
  CHECK(contains(text, "different backends (asked for auto)"));
  CHECK(contains(text, "ranks [0, 2] on shm"));
  CHECK(contains(text, "rank 1 on gloo"));
  for (auto& sc : scripts)
    CHECK(has_line(*sc, "abort g: collective.mismatch"));
  auto st = f.status("g");
  CHECK(st.state == "failed");
  CHECK(st.backend.empty());
  CHECK(col::code_of(st.reason) == col::errc::mismatch);
  // Ops are refused with the formation's error.
  auto op = f.ask_op({"g", col::op_kind::barrier, {}, {}});
  f.run();
  REQUIRE(op->answers == 1);
  CHECK(col::code_of(op->err) == col::errc::mismatch);
}

TEST_CASE("backend: a rank that formed on another backend than the one "
          "named fails the formation with mismatch") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.registered_group(2, actors); // asks for gloo
  auto waiter = f.wait_for("g");
  f.run();
  f.ready(actors[0], *scripts[0], "g", 0, {}, "shm");
  f.run();
  REQUIRE(waiter->answers == 1);
  CHECK(col::code_of(waiter->err) == col::errc::mismatch);
  auto text = col::render(waiter->err);
  INFO(text);
  CHECK(contains(text, "another backend than asked (gloo)"));
  CHECK(contains(text, "rank 0 on shm"));
}

TEST_CASE("backend: gloo, shm, nccl and auto are accepted by name - an "
          "unknown name is refused with invalid_argument naming it, before "
          "any member hears of the group") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  for (std::string name : {"gloo", "shm", "nccl", "auto"}) {
    CAPTURE(name);
    auto declared = f.declare("d-" + name, actors, group_timeout_ms, name);
    f.run();
    CHECK(declared->answers == 0); // joining, not refused
    CHECK(has_line(*scripts[0], "join d-" + name));
    CHECK(f.status("d-" + name).state == "forming");
  }
  auto bad = f.declare("bad", actors, group_timeout_ms, "tcp");
  f.run();
  REQUIRE(bad->answers == 1);
  CHECK(col::code_of(bad->err) == col::errc::invalid_argument);
  auto text = col::render(bad->err);
  INFO(text);
  CHECK(contains(text, "group 'bad'"));
  CHECK(contains(text, "unknown backend 'tcp'"));
  CHECK(contains(text, "gloo, shm, nccl or auto"));
  CHECK(!has_line(*scripts[0], "join bad"));
  CHECK(f.status("bad").state == "unknown");
  // A registration naming an unknown backend is refused and leaves no
  // entry behind.
  auto sc = std::make_shared<script>();
  auto m = fixture::ms(0, 1, "reg");
  m.backend = "infiniband";
  f.member(sc, m);
  f.run();
  REQUIRE(sc->log.size() == 1);
  CHECK(contains(sc->log[0], "abort reg: collective.invalid_argument"));
  CHECK(contains(sc->log[0], "unknown backend 'infiniband'"));
  CHECK(f.status("reg").state == "unknown");
}

TEST_CASE("registration: a negative CUDA device or an ops_from outside its "
          "enum is refused and leaves no entry behind") {
  fixture f;
  auto sc = std::make_shared<script>();
  auto m = fixture::ms(0, 1, "dev");
  m.cuda_device = -1;
  f.member(sc, m);
  auto sc2 = std::make_shared<script>();
  auto m2 = fixture::ms(0, 1, "src");
  m2.ops_from = static_cast<col::op_source>(9);
  f.member(sc2, m2);
  f.run();
  REQUIRE(sc->log.size() == 1);
  CHECK(contains(sc->log[0], "abort dev: collective.invalid_argument"));
  CHECK(contains(sc->log[0], "cuda device -1 is negative"));
  REQUIRE(sc2->log.size() == 1);
  CHECK(contains(sc2->log[0], "ops_from 9 is neither driver nor members"));
  CHECK(f.status("dev").state == "unknown");
  CHECK(f.status("src").state == "unknown");
}

// The driver keeps one deadline timer per group (not one per op): when it
// fires for an op that finished, it is armed again for the next running
// op, and an op with a closer deadline than the armed one gets its own.
TEST_CASE("op deadlines with one timer per group: a finished op never times "
          "out, a later op fails at its own deadline") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  col::op_params p;
  p.timeout_ms = 500;
  auto first =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, p});
  f.run();
  for (auto& sc : scripts)
    fixture::finish(*sc, 0);
  f.run();
  REQUIRE(first->answers == 1);
  CHECK(!first->err);
  f.advance(300ms);
  auto second =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, p});
  f.run();
  fixture::finish(*scripts[0], 1);
  f.run();
  // The timer armed for the first op fires at its deadline and finds
  // nothing due: the second op runs on.
  f.advance(200ms + grace);
  CHECK(second->answers == 0);
  CHECK(f.status("g").state == "ready");
  f.advance(300ms - 1ms);
  CHECK(second->answers == 0);
  f.advance(1ms);
  REQUIRE(second->answers == 1);
  CHECK(col::code_of(second->err) == col::errc::timeout);
  auto text = col::render(second->err);
  CHECK(contains(text, "seq 1"));
  CHECK(contains(text, "ranks [1] had not finished"));
  CHECK(first->answers == 1);
}

TEST_CASE("op deadlines with one timer per group: an op with a shorter "
          "timeout started after a longer one fails at its own deadline") {
  fixture f;
  std::vector<caf::actor> actors;
  auto scripts = f.formed_group(2, actors);
  auto slow =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, {}});
  col::op_params p;
  p.timeout_ms = 200;
  auto quick =
    f.ask_op({"g", col::op_kind::allreduce, {f.ref(1), f.ref(2)}, p});
  f.run();
  REQUIRE(scripts[0]->started.size() == 2);
  f.advance(200ms + grace - 1ms);
  CHECK(quick->answers == 0);
  f.advance(1ms);
  REQUIRE(quick->answers == 1);
  CHECK(col::code_of(quick->err) == col::errc::timeout);
  CHECK(contains(col::render(quick->err), "seq 1"));
  // The group broke: the op with the longer deadline fails with it, its
  // error naming itself (seq 0, not past its deadline) and the cause.
  REQUIRE(slow->answers == 1);
  CHECK(col::code_of(slow->err) == col::errc::aborted);
  CHECK(contains(col::render(slow->err), "allreduce seq 0"));
  CHECK(contains(col::render(slow->err),
                 "the group broke before this op finished"));
  CHECK(contains(col::render(slow->err), "seq 1: deadline passed"));
  CHECK(f.status("g").state == "broken");
}
