// An actor program that declares, uses and destroys groups again and again
// (a service that runs one job after another in one actor system): each
// cycle spawns members, runs driver ops on refs (or lets the members run
// their own ops), releases its refs, destroys the group and stops its
// members. Afterwards the node's store is empty, and the process holds no
// more file descriptors, threads or shared segments than after the first
// cycle.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <functional>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/client_ops.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/interfaces.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/member_ops.hpp>
#include <caf_collective/read.hpp>

#include "../support/process_holdings.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

caf::behavior idle_member(caf::event_based_actor*, int32_t) {
  return {[](int32_t x) { return x; }};
}

using go_atom = caf::atom_constant<caf::atom("soak_go")>;

/// `left` allreduces of this member's own tensor (every element its rank),
/// one after another from its handlers; delivers the last sum's first
/// element, or the first error.
void allreduce_in_turn(caf::event_based_actor* self, std::string group,
                       int32_t rank, int32_t left, caf::response_promise rp) {
  auto store = col::local_store(self->system());
  auto ref =
    store->put(col::tensor::from_vector(std::vector<float>(64, float(rank))));
  if (!ref) {
    rp.deliver(ref.error());
    return;
  }
  col::collectives(self, group)
    .allreduce(*ref)
    .then(
      [=](col::object_ref& out) mutable {
        auto xs = col::read_vector<float>(*store, out);
        // In place: the input's ref.
        if (auto err = store->release(out))
          rp.deliver(std::move(err));
        else if (!xs)
          rp.deliver(xs.error());
        else if (left == 1)
          rp.deliver(xs->front());
        else
          allreduce_in_turn(self, group, rank, left - 1, rp);
      },
      [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
}

caf::behavior allreducing_member(caf::event_based_actor* self, int32_t rank) {
  return {
    [self, rank](go_atom, const std::string& group, int32_t ops) {
      auto rp = self->make_response_promise();
      allreduce_in_turn(self, group, rank, ops, rp);
      return rp;
    },
  };
}

struct fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  col::driver_actor driver;
  col::driver_api typed;
  col::object_store_ptr store;

  fixture()
    : sys((col::add_message_types(cfg), cfg)), driver(col::spawn_driver(sys)),
      typed(col::typed_driver(driver)), store(col::local_store(sys)) {
    // nop
  }

  ~fixture() { caf::anon_send_exit(driver, caf::exit_reason::user_shutdown); }

  /// Spawns `name`'s members on `backend` with behavior `fun` and waits
  /// until the group formed.
  template<class Fun>
  std::vector<col::member_actor> start(caf::scoped_actor& self,
                                       const std::string& name,
                                       const std::string& backend, int world,
                                       col::op_source ops_from, Fun fun) {
    col::group_spec spec;
    spec.name = name;
    spec.world_size = world;
    spec.backend = backend;
    spec.timeout = 10s;
    spec.ops_from = ops_from;
    auto members = col::spawn_group(sys, driver, spec, fun);
    REQUIRE(!col::await_group(self, driver, name, 15s));
    return members;
  }

  /// After round i of a job's ops, with the group still up.
  using round_end = std::function<void(size_t)>;

  /// One job: `world` members of `name` on `backend` run rounds of
  /// allreduces through the driver (each result checked, every ref
  /// released), then the group is destroyed and its members stopped.
  void job(const std::string& name, const std::string& backend, int world,
           std::vector<int> rounds, round_end after_round = nullptr) {
    caf::scoped_actor self{sys};
    auto members =
      start(self, name, backend, world, col::op_source::driver, idle_member);
    for (size_t round = 0; round < rounds.size(); ++round) {
      for (int op = 0; op < rounds[round]; ++op)
        allreduce_refs(self, name, world, op);
      if (after_round) after_round(round);
    }
    finish(self, name, members);
  }

  /// One driver allreduce of a ref per rank (rank r's elements r + op),
  /// its results checked and its refs released.
  void allreduce_refs(caf::scoped_actor& self, const std::string& name,
                      int world, int op) {
    std::vector<col::object_ref> refs;
    for (int r = 0; r < world; ++r) {
      auto ref = store->put(
        col::tensor::from_vector(std::vector<float>(256, float(r + op))));
      REQUIRE(ref);
      refs.push_back(*ref);
    }
    auto res = col::allreduce(self, typed, name, refs, {});
    REQUIRE(res);
    // sum over r of (r + op)
    auto expected = float(world * (world - 1) / 2 + world * op);
    for (auto& ref : res->refs) {
      auto xs = col::read_vector<float>(*store, ref);
      REQUIRE(xs);
      CHECK(xs->front() == expected);
      CHECK(xs->back() == expected);
    }
    // In place: the results are the inputs' refs.
    for (auto& ref : refs)
      CHECK(!store->release(ref));
  }

  /// The same with the members as the source of the group's ops: in each
  /// round every member runs that many allreduces from its own handlers.
  void member_job(const std::string& name, const std::string& backend,
                  int world, std::vector<int> rounds,
                  round_end after_round = nullptr) {
    caf::scoped_actor self{sys};
    auto members = start(self, name, backend, world, col::op_source::members,
                         allreducing_member);
    for (size_t round = 0; round < rounds.size(); ++round) {
      for (auto& m : members)
        self->send(m, go_atom::value, name, int32_t{rounds[round]});
      for (size_t i = 0; i < members.size(); ++i)
        self->receive(
          [&](float first) { CHECK(first == float(world * (world - 1) / 2)); },
          [&](caf::error& err) { FAIL(col::render(err)); },
          caf::after(std::chrono::seconds{60}) >>
            [&] { FAIL("a member's allreduces did not end within 60 s"); });
      if (after_round) after_round(round);
    }
    finish(self, name, members);
  }

  void finish(caf::scoped_actor& self, const std::string& name,
              const std::vector<col::member_actor>& members) {
    REQUIRE(!col::destroy_group(self, driver, name, 15s));
    for (auto& m : members)
      self->send_exit(m, caf::exit_reason::user_shutdown);
    self->wait_for(members);
  }
};

/// Jobs of `job_of(fixture, name, backend)` one after another, 15 after a
/// warm-up per backend: the store empty after each, nothing growing.
template<class Job>
void soak_jobs(const std::string& prefix, Job job_of) {
  fixture f;
  for (const std::string backend : {"shm", "gloo"}) {
    soak::check_no_growth(backend, 15, [&](int) {
      job_of(f, prefix + backend, backend);
      CHECK(f.store->objects() == 0);
      CHECK(f.store->bytes() == 0);
    });
  }
}

} // namespace

TEST_CASE("jobs run one after another in one actor system give back every "
          "ref fd thread and segment") {
  soak_jobs("soak-",
            [](fixture& f, const std::string& name,
               const std::string& backend) { f.job(name, backend, 3, {4}); });
}

TEST_CASE("jobs whose members start their own ops give back every ref fd "
          "thread and segment") {
  soak_jobs("soak-members-", [](fixture& f, const std::string& name,
                                const std::string& backend) {
    f.member_job(name, backend, 3, {4});
  });
}

// A long job makes many ops through the driver or from its members: none
// may keep memory. In one group, 3000 allreduces of each kind after a
// warm-up of 300: the heap must not grow by 128 KiB (a leak of 43 B per op
// would show). (Between jobs the heap varies by about 100 KiB as actors
// end: the counts are taken with the group up.)
TEST_CASE("3000 driver ops and 3000 member-initiated ops leave the heap as "
          "they found it") {
  constexpr size_t allowed = 128 * 1024;
  fixture f;
  for (const std::string backend : {"shm", "gloo"}) {
    INFO(backend);
    size_t driver_heap[2] = {0, 0};
    f.job("soak-heap-driver-" + backend, backend, 3, {300, 3000},
          [&](size_t round) { driver_heap[round] = soak::heap_in_use(); });
    size_t member_heap[2] = {0, 0};
    f.member_job(
      "soak-heap-members-" + backend, backend, 3, {300, 3000},
      [&](size_t round) { member_heap[round] = soak::heap_in_use(); });
    for (auto [what, heap] :
         {std::pair{std::string{"driver"}, driver_heap},
          std::pair{std::string{"member-initiated"}, member_heap}}) {
      INFO(what << " ops: heap in use " << heap[0] << " B after the warm-up, "
                << heap[1] << " B after 3000 more");
      CHECK(heap[1] <= heap[0] + allowed);
    }
    CHECK(f.store->objects() == 0);
  }
}

// Elastic jobs lose a member and start again: each cycle kills a member
// of a healthy group, sees the next driver op fail with an error naming the
// group, destroys the broken group and stops the rest. Nothing may pile up
// across cycles.
TEST_CASE("groups broken by a member's death and destroyed give back every "
          "ref fd thread and segment") {
  fixture f;
  for (const std::string backend : {"shm", "gloo"}) {
    auto name = "soak-death-" + backend;
    soak::check_no_growth(backend, 10, [&](int) {
      caf::scoped_actor self{f.sys};
      auto members =
        f.start(self, name, backend, 3, col::op_source::driver, idle_member);
      f.allreduce_refs(self, name, 3, 0);
      self->send_exit(members[2], caf::exit_reason::kill);
      self->wait_for(members[2]);
      std::vector<col::object_ref> refs;
      for (int r = 0; r < 3; ++r)
        refs.push_back(
          f.store->put(col::tensor::from_vector(std::vector<float>(8, 1.0f)))
            .value());
      // The driver may hear of the death just after the request: then the
      // op fails on the survivors' abort. Either way it fails, and the error
      // names the group.
      auto res = col::allreduce(self, f.typed, name, refs, {});
      REQUIRE(!res);
      CHECK(col::render(res.error()).find(name) != std::string::npos);
      for (auto& ref : refs)
        CHECK(!f.store->release(ref));
      f.finish(self, name, members);
      CHECK(f.store->objects() == 0);
    });
  }
}
