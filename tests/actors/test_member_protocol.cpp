// The member-initiated path on CAF's deterministic scheduler (the testing
// policy): every actor runs on the test's thread, one message at a time,
// and no time passes unless the test says so. Members here are real
// (member_protocol) but their driver is a stand-in that never forms the
// group: lanes are threads outside CAF, and the testing scheduler must not
// be entered from them. So these tests cover every decision the member
// makes on the actor side (its request to itself, refusals, ops waiting
// for their group, failure by the driver's abort); completion over real
// lanes and a peer dying mid-op are in test_member_ops.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <memory>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <caf_collective/client_ops.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/member_ops.hpp>
#include <caf_collective/read.hpp>

#include "testing_scheduler.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

using go_atom = caf::atom_constant<caf::atom("t_go")>;

// What one member's own op ended in.
struct own_result {
  int answers = 0;
  caf::error err;
};

using result_ptr = std::shared_ptr<own_result>;

// A member that, on (go, group, values), allreduces `values` (no input if
// empty) in `group` from its handler and records the outcome.
caf::behavior starter(caf::event_based_actor* self, result_ptr out) {
  return {
    [=](go_atom, const std::string& group, std::vector<float> values) {
      col::object_ref ref;
      if (!values.empty())
        ref = col::local_store(self->system())
                ->put(col::tensor::from_vector(values))
                .value();
      col::collectives(self, group)
        .allreduce(ref)
        .then([=](col::object_ref&) { ++out->answers; },
              [=](caf::error& err) {
                ++out->answers;
                out->err = std::move(err);
              });
    },
  };
}

// The stand-in driver: logs what members send it, never forms a group.
caf::behavior stand_in_driver(caf::event_based_actor*,
                              std::shared_ptr<std::vector<std::string>> log) {
  return {
    [=](col::reg_atom, const col::membership& m, const std::string&) {
      log->push_back("reg " + m.group + " rank " + std::to_string(m.rank) +
                     " ops from " + col::to_cstr(m.ops_from));
    },
  };
}

struct fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys{testing_scheduler::prepare(cfg)};
  caf::scheduler::test_coordinator& sched =
    dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  std::shared_ptr<std::vector<std::string>> driver_log =
    std::make_shared<std::vector<std::string>>();
  caf::actor driver = sys.spawn(stand_in_driver, driver_log);
  std::vector<caf::actor> spawned;

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

  // Sends `who` (go, group, values) and runs every actor.
  void go(const caf::actor& who, const std::string& group,
          std::vector<float> values) {
    caf::anon_send(who, go_atom::value, group, std::move(values));
    run();
  }

  // Sends `who` (go, group, values), runs every actor and returns the text
  // of the error its op ended in, after checking that it is the first
  // answer and has the code `want`.
  std::string refused(const caf::actor& who, const std::string& group,
                      std::vector<float> values, const result_ptr& out,
                      col::errc want) {
    caf::anon_send(who, go_atom::value, group, std::move(values));
    run();
    REQUIRE(out->answers == 1);
    CHECK(col::code_of(out->err) == want);
    return col::render(out->err);
  }

  // Rank 0's membership of the 2-rank group `name` (timeout 5 s) whose ops
  // come from `from`.
  static col::membership rank0_of(const std::string& name,
                                  col::op_source from) {
    col::group_spec spec;
    spec.name = name;
    spec.world_size = 2;
    spec.timeout = 5s;
    spec.ops_from = from;
    return col::membership_of(spec, 0);
  }

  // A member of the 2-rank group `name` (rank 0) whose ops come from `from`,
  // registered with `to` (default: the stand-in driver).
  caf::actor member(const std::string& name, col::op_source from,
                    result_ptr out, caf::actor to = nullptr) {
    auto a = col::spawn_member(sys, to ? to : driver, {rank0_of(name, from)},
                               starter, out);
    spawned.push_back(a);
    run();
    return a;
  }
};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

} // namespace

TEST_CASE("member path: the op starts in the member's own handler - no "
          "message to itself - waits while the group does not exist yet, and "
          "the driver's abort fails it with the driver's reason") {
  fixture f;
  auto out = std::make_shared<own_result>();
  auto m = f.member("early", col::op_source::members, out);
  REQUIRE(f.driver_log->size() == 1);
  CHECK(f.driver_log->front() == "reg early rank 0 ops from members");
  caf::anon_send(m, go_atom::value, std::string{"early"},
                 std::vector<float>{1, 2});
  f.sched.run_once();  // the member handles go and starts the op in it
  CHECK(f.run() == 0); // no request to itself is left to handle
  f.run();
  CHECK(out->answers == 0); // waiting for its group, nothing answered
  auto why = col::make_error(col::errc::peer_lost,
                             "group 'early': rank 1 died before formation");
  caf::anon_send(m, col::abort_atom::value, std::string{"early"}, uint64_t{0},
                 why);
  f.run();
  REQUIRE(out->answers == 1);
  CHECK(col::code_of(out->err) == col::errc::peer_lost);
  CHECK(contains(col::render(out->err), "rank 1 died"));
  // The group is broken now: the next op is refused at once.
  caf::anon_send(m, go_atom::value, std::string{"early"},
                 std::vector<float>{1});
  f.run();
  CHECK(out->answers == 2);
  CHECK(col::code_of(out->err) == col::errc::peer_lost);
}

TEST_CASE("member path: an op on a group the member is not in is refused "
          "in the handler that starts it") {
  fixture f;
  auto out = std::make_shared<own_result>();
  auto m = f.member("real", col::op_source::members, out);
  caf::anon_send(m, go_atom::value, std::string{"no-such"},
                 std::vector<float>{1});
  f.sched.run_once(); // go: the op is refused in it
  CHECK(out->answers == 0);
  f.sched.run_once(); // the refusal, delivered to the handler
  REQUIRE(out->answers == 1);
  CHECK(f.run() == 0);
  CHECK(col::code_of(out->err) == col::errc::unknown_group);
  CHECK(contains(col::render(out->err), "'no-such'"));
}

TEST_CASE("member path: an actor that runs no member protocol is answered "
          "unknown_group naming the group") {
  fixture f;
  auto out = std::make_shared<own_result>();
  auto plain = f.sys.spawn(starter, out);
  auto text = f.refused(plain, "nowhere", {1}, out, col::errc::unknown_group);
  CHECK(contains(text, "'nowhere'"));
  CHECK(contains(text, "runs no member protocol"));
  caf::anon_send_exit(plain, caf::exit_reason::user_shutdown);
  f.run();
}

TEST_CASE("member path: an op without its input is refused naming the group "
          "and op") {
  fixture f;
  auto out = std::make_shared<own_result>();
  auto m = f.member("empty", col::op_source::members, out);
  auto text = f.refused(m, "empty", {}, out, col::errc::invalid_argument);
  CHECK(contains(text, "'empty'"));
  CHECK(contains(text, "allreduce"));
  CHECK(contains(text, "names no object"));
}

TEST_CASE("member path: the mixed-mode rule, member side: a member refuses "
          "its own op on a driver-run group and a driver's start on a "
          "members-run group") {
  fixture f;
  auto out = std::make_shared<own_result>();
  auto driven = f.member("driven", col::op_source::driver, out);
  CHECK(contains(f.refused(driven, "driven", {1}, out, col::errc::unsupported),
                 "ops_from = driver"));

  auto own = f.member("own", col::op_source::members, out);
  caf::error refused;
  auto starter_of_driver = f.sys.spawn([&, own](caf::event_based_actor* self) {
    col::start_msg msg;
    msg.group = "own";
    msg.op = col::op_kind::barrier;
    self->request(own, caf::infinite, col::start_atom::value, msg)
      .then([](col::object_ref&) {},
            [&](caf::error& err) { refused = std::move(err); });
  });
  f.spawned.push_back(starter_of_driver);
  f.run();
  CHECK(col::code_of(refused) == col::errc::unsupported);
  CHECK(contains(col::render(refused), "ops_from = members"));
}

TEST_CASE("member path: the mixed-mode rule, driver side: the driver refuses "
          "an op request on a members-run group before anything is sent") {
  fixture f;
  auto driver = col::spawn_driver(f.sys);
  f.spawned.push_back(driver);
  // A stand-in member registers (the driver's init to it is ignored, so no
  // group forms and no lane starts).
  std::vector<std::string> member_log;
  auto stand_in = f.sys.spawn([&](caf::event_based_actor* self) {
    col::membership m{"own", 0, 1, "shm", 5000, 0, col::op_source::members};
    self->send(driver, col::reg_atom::value, m, std::string{"here"});
    // Logs every message, whatever its type.
    self->set_default_handler(
      [&](caf::scheduled_actor*,
          caf::message_view& x) -> caf::result<caf::message> {
        member_log.push_back(caf::to_string(x.content()));
        return caf::message{};
      });
    return caf::behavior{[](int32_t) {}};
  });
  f.spawned.push_back(stand_in);
  f.run();
  // The driver's grace on the registration, then init.
  REQUIRE(member_log.size() == 2);
  CHECK(contains(member_log.front(), "col_grace"));
  CHECK(contains(member_log.back(), "col_init"));
  caf::error refused;
  auto client = f.sys.spawn(
    [&, d = col::typed_driver(driver)](caf::event_based_actor* self) {
      col::barrier(self, d, "own")
        .then([](col::op_result&) {},
              [&](caf::error& err) { refused = std::move(err); });
    });
  f.spawned.push_back(client);
  f.run();
  CHECK(col::code_of(refused) == col::errc::unsupported);
  CHECK(contains(col::render(refused), "ops_from = members"));
  CHECK(member_log.size() == 2); // nothing but grace and init reached it
}

TEST_CASE("member path: an op queued before init fails when the driver's "
          "formation deadline fails the group, naming the rank that never "
          "registered") {
  fixture f;
  auto driver = col::spawn_driver(f.sys);
  f.spawned.push_back(driver);
  auto out = std::make_shared<own_result>();
  // Rank 1 never comes: the driver never sends init, and its abort names
  // the group's generation while the member still holds none.
  auto m = f.member("half", col::op_source::members, out, driver);
  f.go(m, "half", {1, 2});
  CHECK(out->answers == 0);
  f.advance(5s + 200ms); // the timeout and the driver's grace
  REQUIRE(out->answers == 1);
  CHECK(col::code_of(out->err) == col::errc::timeout);
  CHECK(contains(col::render(out->err), "ranks [1] never registered"));
  // The member knows its group failed: the next op is refused at once.
  f.go(m, "half", {1});
  CHECK(out->answers == 2);
  CHECK(contains(col::render(out->err), "ranks [1] never registered"));
}

TEST_CASE("member path: an op queued before init waits out the driver's "
          "grace however long it is - the driver's error naming the missing "
          "rank comes first") {
  // Before: the member gave up at the group's timeout plus a fixed 1 s and
  // said the driver never started the formation, while a driver with a
  // longer grace was still waiting for rank 1.
  fixture f;
  col::driver_config dc;
  dc.grace = 3s;
  auto driver = col::spawn_driver(f.sys, dc);
  f.spawned.push_back(driver);
  auto out = std::make_shared<own_result>();
  auto m = f.member("long-grace", col::op_source::members, out, driver);
  f.go(m, "long-grace", {1, 2});
  f.advance(5s + 2999ms);
  CHECK(out->answers == 0);
  f.advance(1ms); // the driver's formation deadline
  REQUIRE(out->answers == 1);
  CHECK(col::code_of(out->err) == col::errc::timeout);
  CHECK(contains(col::render(out->err), "ranks [1] never registered"));
  CHECK_FALSE(contains(col::render(out->err), "never started"));
}

TEST_CASE("member path: an op waiting for an init that never comes fails "
          "with timeout once the group's timeout and a margin passed") {
  fixture f;
  auto out = std::make_shared<own_result>();
  // The stand-in driver neither forms nor fails the group, as a driver on
  // a lost node would.
  auto m = f.member("orphan", col::op_source::members, out);
  f.go(m, "orphan", {1, 2});
  f.advance(5s + 999ms);
  CHECK(out->answers == 0);
  f.advance(1ms);
  REQUIRE(out->answers == 1);
  CHECK(col::code_of(out->err) == col::errc::timeout);
  CHECK(contains(col::render(out->err), "group 'orphan' allreduce"));
  CHECK(contains(col::render(out->err), "never started its formation"));
}

TEST_CASE("member path: the driver's loss fails the ops waiting for the "
          "group's init at once and refuses later ones naming it") {
  // Before: nothing watched the driver; the op waited for the group's
  // timeout and a margin, and the group kept reading "registered".
  fixture f;
  auto out = std::make_shared<own_result>();
  auto m = f.member("lost-driver", col::op_source::members, out);
  f.go(m, "lost-driver", {1, 2});
  CHECK(out->answers == 0);
  caf::anon_send_exit(f.driver, caf::exit_reason::kill);
  f.run();
  REQUIRE(out->answers == 1);
  CHECK(col::code_of(out->err) == col::errc::peer_lost);
  CHECK(contains(col::render(out->err), "its driver is gone"));
  // It names the op that waited and this member's rank.
  CHECK(contains(col::render(out->err), "group 'lost-driver' allreduce"));
  CHECK(contains(col::render(out->err), "rank 0/2"));
  f.go(m, "lost-driver", {1});
  REQUIRE(out->answers == 2);
  CHECK(contains(col::render(out->err), "its driver is gone"));
}

TEST_CASE("member path: a join that replaces a membership answers the ops "
          "that waited for its init with aborted") {
  fixture f;
  auto out = std::make_shared<own_result>();
  auto m = f.member("rejoin", col::op_source::members, out);
  f.go(m, "rejoin", {1});
  f.run();
  CHECK(out->answers == 0); // waits for the group's init
  caf::anon_send(m, col::join_atom::value,
                 fixture::rank0_of("rejoin", col::op_source::members));
  f.run();
  // Answered at once, not dropped with the old membership's entry (its
  // init timer then found the new, empty entry and answered nobody).
  REQUIRE(out->answers == 1);
  CHECK(col::code_of(out->err) == col::errc::aborted);
  CHECK(col::render(out->err).find("new join") != std::string::npos);
  f.advance(7s);
  CHECK(out->answers == 1);
}

TEST_CASE("member path: the init wait of an op of an earlier membership "
          "does not end an op of a later membership of the same group") {
  fixture f;
  auto out = std::make_shared<own_result>();
  auto m = f.member("again", col::op_source::members, out);
  f.go(m, "again", {1});
  f.advance(3s);
  // Leaving fails the first op; joining again queues the second.
  caf::anon_send(m, col::leave_atom::value, std::string{"again"});
  f.run();
  REQUIRE(out->answers == 1);
  caf::anon_send(m, col::join_atom::value,
                 fixture::rank0_of("again", col::op_source::members));
  f.go(m, "again", {1});
  // The first op's timer fires now, 6 s after it started.
  f.advance(3s);
  CHECK(out->answers == 1);
  // The second op's, 6 s after it started.
  f.advance(3s);
  REQUIRE(out->answers == 2);
  CHECK(col::code_of(out->err) == col::errc::timeout);
}
