// group::abort while the group forms: every backend stops waiting for its
// peers at once (the store's waits, shm's wait for ranks to attach) instead
// of at the formation deadline, and a rank that gives up this way tells the
// shm peers that already attached.
#include <chrono>
#include <thread>

#include "backends/shm/shm_backend.hpp"
#include "backends/shm/shm_segment.hpp"
#include "fake_member.hpp"
#include "process_support.hpp"
#include "runtime/cancelable_store.hpp"
#include "test_support.hpp"
#include "unused_port.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::expect_usable;
using test::rank_log;

namespace {

using clock_type = std::chrono::steady_clock;

// Far beyond what the tests allow: reaching it means abort was not seen.
constexpr auto formation_deadline = 60s;

col::group_config config_of(const std::string& name, const std::string& backend,
                            int world, int rank,
                            col::rendezvous_store_ptr store) {
  col::group_config cfg;
  cfg.name = name;
  cfg.backend = backend;
  cfg.world_size = world;
  cfg.rank = rank;
  cfg.store = std::move(store);
  cfg.timeout = formation_deadline;
  return cfg;
}

col::rendezvous_store_ptr store_nobody_serves(const refusing_port& where) {
  col::tcp_store_options opts;
  opts.port = where.port();
  opts.secret = "s3cret";
  opts.run_id = "formation-abort";
  opts.connect_timeout = 30s; // the default, named: what a set may wait alone
  return col::make_tcp_store(opts);
}

// Publishes rank `rank`'s host identity for shm as a member on this host
// would, once the formation admitted it, without ever forming: the others
// wait for it later on. Returns the formation's store.
col::rendezvous_store_ptr
pretend_to_join(std::future<col::rendezvous_store_ptr> joining,
                const std::string& prefix, int rank) {
  auto formation = joining.get();
  auto me = col::detail::shm::host_identity();
  REQUIRE(!col::make_prefix_store(prefix, formation)
             ->set("host/" + std::to_string(rank), {me.begin(), me.end()}));
  return formation;
}

} // namespace

TEST_CASE("a group aborted while it waits for a missing rank to join the "
          "formation stops at once, whatever its backend") {
  // Rank 1 never joins: the abort lands in the formation round, before any
  // backend's own wait (those are the cases below).
  for (std::string backend : {"gloo", "shm", "auto"}) {
    CAPTURE(backend);
    const auto name = "abort-forming-" + backend;
    auto store = col::make_in_process_store();
    col::work formed;
    auto made =
      col::group::make(config_of(name, backend, 2, 0, store), &formed);
    REQUIRE(made);
    auto g = *made;
    std::this_thread::sleep_for(200ms); // it waits for rank 1 in the store
    auto start = clock_type::now();
    g->abort("the test gives up on rank 1");
    auto err = formed.wait();
    auto took = clock_type::now() - start;
    CHECK(col::code_of(err) == col::errc::aborted);
    CHECK(col::render(err).find(name) != std::string::npos);
    CHECK(col::render(err).find("stopped waiting for rendezvous key") !=
          std::string::npos);
    CHECK(took < 20s); // the deadline is 60 s; the store looks every 100 ms
    start = clock_type::now();
    g.reset(); // tears down on the caller: nothing left to wait for
    CHECK(clock_type::now() - start < 20s);
    CHECK(test::shm_leftovers(name).empty());
    // The process stays usable: the same name forms among two real ranks.
    test::run_group(2, name, [&](int rank, rank_log& log) {
      expect_usable(log, name, 2, rank);
    });
  }
}

TEST_CASE("gloo: a group aborted while Gloo waits for a peer's address stops "
          "at once") {
  const std::string name = "abort-gloo-connect";
  auto store = col::make_in_process_store();
  // Rank 1 joins the formation round and goes no further: rank 0 then
  // waits in Gloo's own rendezvous for rank 1's address.
  auto joining = test::join_as_fake(store, name, 1, 2, "gloo");
  col::work formed;
  auto made = col::group::make(config_of(name, "gloo", 2, 0, store), &formed);
  REQUIRE(made);
  auto g = *made;
  auto formation = joining.get(); // the round is over: Gloo's turn
  std::this_thread::sleep_for(300ms);
  auto start = clock_type::now();
  g->abort("the test gives up on rank 1");
  auto err = formed.wait();
  auto took = clock_type::now() - start;
  CHECK(col::code_of(err) == col::errc::aborted);
  // One of Gloo's own keys, not the formation round's.
  CHECK(col::render(err).find("/gloo/" + name + "/") != std::string::npos);
  CHECK(took < 20s); // the deadline is 60 s
  g.reset();
  test::run_group(2, name, [&](int rank, rank_log& log) {
    expect_usable(log, name, 2, rank);
  });
}

TEST_CASE("shm: a rank aborted while waiting for peers to attach tells the "
          "ranks that attached, and leaves no segment") {
  const std::string name = "abort-attach";
  auto store = col::make_in_process_store();
  // World 3: ranks 0 and 1 are real; rank 2 joins the formation and
  // publishes its host but never attaches, so both wait in the segment for
  // it.
  auto joining = test::join_as_fake(store, name, 2, 3, "shm");
  col::work formed[2];
  std::shared_ptr<col::group> groups[2];
  for (int rank = 0; rank < 2; ++rank) {
    auto made =
      col::group::make(config_of(name, "shm", 3, rank, store), &formed[rank]);
    REQUIRE(made);
    groups[rank] = *made;
  }
  auto formation = pretend_to_join(std::move(joining), "shm/" + name, 2);
  // Wait until both attached: the segment's count says so.
  auto published =
    col::make_prefix_store("shm/" + name, formation)->get("segment", 30s);
  REQUIRE(published);
  auto seg = col::detail::shm::segment::attach(
    std::string{published->begin(), published->end()});
  REQUIRE(seg);
  auto give_up = clock_type::now() + 30s;
  while (seg->header().attached.load() < 2 && clock_type::now() < give_up)
    std::this_thread::sleep_for(5ms);
  REQUIRE(seg->header().attached.load() == 2);
  auto start = clock_type::now();
  groups[1]->abort("the test gives up on rank 2");
  auto aborted = formed[1].wait();
  auto told = formed[0].wait();
  auto took = clock_type::now() - start;
  CHECK(col::code_of(aborted) == col::errc::aborted);
  CHECK(col::render(aborted).find("aborted while forming") !=
        std::string::npos);
  // Rank 0 learns from the segment that rank 1 left: no wait for 60 s.
  CHECK(col::code_of(told) == col::errc::peer_lost);
  CHECK(col::render(told).find("rank 1 left the group") != std::string::npos);
  // Group and rank named once, before what failed.
  CHECK(col::render(told).find("abort-attach' rank 0/3: forming the shm group "
                               "failed: rank 1 left the group") !=
        std::string::npos);
  CHECK(took < 20s);
  groups[0].reset();
  groups[1].reset();
  seg = col::detail::shm::segment{};
  CHECK(test::shm_leftovers(name).empty());
}

TEST_CASE("destroy_collective_group from another thread ends a formation "
          "under way - its init throws aborted and the name is free") {
  // Before: destroy said the group was not initialized, and the init waited
  // for its whole timeout.
  for (std::string backend : {"gloo", "shm", "auto"}) {
    CAPTURE(backend);
    auto name = "destroyed-forming-" + backend;
    auto store = col::make_in_process_store();
    caf::error init_err;
    auto start = clock_type::now();
    std::thread init{[&] {
      try {
        // Rank 1 never comes.
        col::init_collective_group(2, 0, backend, name,
                                   test::group_options(store, 20s));
      } catch (const col::collective_error& e) {
        init_err = e.error();
      }
    }};
    std::this_thread::sleep_for(300ms);
    bool destroyed = false;
    try {
      col::destroy_collective_group(name);
      destroyed = true;
    } catch (const col::collective_error& e) {
      FAIL_CHECK("destroy: " << col::render(e.error()));
    }
    init.join();
    auto took = clock_type::now() - start;
    CHECK(destroyed);
    CHECK(col::code_of(init_err) == col::errc::aborted);
    CHECK(col::render(init_err).find("destroyed while it formed") !=
          std::string::npos);
    CHECK(took < 10s);
    CHECK_FALSE(col::is_group_initialized(name));
    // The name is free again.
    col::init_collective_group(1, 0, backend, name);
    CHECK(col::is_group_initialized(name));
    col::destroy_collective_group(name);
    CHECK(test::shm_leftovers(name).empty());
  }
}

TEST_CASE("a destroy that comes while init is still making the group ends "
          "that init too - and a second init of the name says it is being "
          "initialized") {
  // Between reserving the name and making the group (its lanes start
  // there) init had nothing a destroy could abort: the destroy said
  // unknown_group and the init waited for its whole timeout.
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    auto name = "destroyed-early-" + std::to_string(round);
    auto store = col::make_in_process_store();
    caf::error init_err;
    auto start = clock_type::now();
    std::thread init{[&] {
      try {
        // Rank 1 never comes.
        col::init_collective_group(2, 0, "gloo", name,
                                   test::group_options(store, 20s));
      } catch (const col::collective_error& e) {
        init_err = e.error();
      }
    }};
    // A probe that cannot form (world size 0) learns when the name is
    // reserved: from then on a second init is told it is being initialized.
    std::string probe;
    bool reserved = false;
    while (!reserved && clock_type::now() - start < 10s) {
      try {
        col::init_collective_group(0, 0, "gloo", name,
                                   test::group_options(store, 1s));
      } catch (const col::collective_error& e) {
        probe = col::render(e.error());
        reserved = col::code_of(e.error()) == col::errc::duplicate_group;
      }
    }
    if (col::code_of(init_err) == col::errc::duplicate_group) {
      init.join(); // the probe reserved first; this round proves nothing
      continue;
    }
    INFO(probe);
    CHECK(probe.find("group '" + name +
                     "' is being initialized by another thread") !=
          std::string::npos);
    caf::error destroy_err;
    try {
      col::destroy_collective_group(name);
    } catch (const col::collective_error& e) {
      destroy_err = e.error();
    }
    init.join();
    auto took = clock_type::now() - start;
    CHECK_MESSAGE(!destroy_err, col::render(destroy_err));
    CHECK(col::code_of(init_err) == col::errc::aborted);
    CHECK(col::render(init_err).find("destroyed while it formed") !=
          std::string::npos);
    CHECK(took < 10s);
    CHECK_FALSE(col::is_group_initialized(name));
    if (destroy_err || took >= 10s) break; // one failed round tells it all
  }
}

TEST_CASE("a store wait that is not aborted still times out at its deadline, "
          "with the store's own words") {
  auto store = col::make_in_process_store();
  col::work formed;
  auto cfg = config_of("late-rank", "shm", 2, 0, store);
  cfg.timeout = 700ms; // several of the store's 100 ms looks
  auto start = clock_type::now();
  auto made = col::group::make(cfg, &formed);
  REQUIRE(made);
  auto err = formed.wait();
  auto took = clock_type::now() - start;
  CHECK(col::code_of(err) == col::errc::timeout);
  auto text = col::render(err);
  CHECK(text.find("rank 1 never joined within 700 ms") != std::string::npos);
  CHECK(text.find("did not appear within") != std::string::npos);
  CHECK(text.find("in-process store") != std::string::npos);
  CHECK(took >= 600ms);
}

TEST_CASE("a TCP store nobody serves fails formation at the group's deadline, "
          "not the store's connect timeout, and abort ends it sooner") {
  refusing_port nobody;
  SUBCASE("deadline") {
    auto cfg =
      config_of("no-server", "gloo", 2, 0, store_nobody_serves(nobody));
    cfg.timeout = 1s;
    col::work formed;
    auto start = clock_type::now();
    REQUIRE(col::group::make(cfg, &formed));
    auto err = formed.wait();
    auto took = clock_type::now() - start;
    CHECK(col::code_of(err) == col::errc::timeout);
    auto text = col::render(err);
    CHECK(text.find("within 1000 ms") != std::string::npos);
    CHECK(text.find("no rendezvous store answered at tcp://127.0.0.1:" +
                    std::to_string(nobody.port())) != std::string::npos);
    CHECK(took < 15s); // the store alone would retry for 30 s
  }
  SUBCASE("abort") {
    col::work formed;
    auto made = col::group::make(
      config_of("no-server", "gloo", 2, 0, store_nobody_serves(nobody)),
      &formed);
    REQUIRE(made);
    std::this_thread::sleep_for(300ms); // it retries the first set
    auto start = clock_type::now();
    (*made)->abort("the test gives up on the store");
    auto err = formed.wait();
    CHECK(col::code_of(err) == col::errc::aborted);
    CHECK(col::render(err).find("stopped waiting for rendezvous key") !=
          std::string::npos);
    CHECK(clock_type::now() - start < 15s);
  }
}

namespace {

// A store whose first `refusals` sets fail as an unreachable TCP store's do
// (timeout, after trying for up to 10 ms), then work; it counts the sets.
class flaky_set_store : public col::rendezvous_store {
 public:
  explicit flaky_set_store(int refusals) : refusals_(refusals) {
    // nop
  }

  caf::error set(const std::string& key,
                 const std::vector<char>& value) override {
    return set_within(key, value, 30s);
  }

  caf::error set_within(const std::string& key, const std::vector<char>& value,
                        col::milliseconds timeout) override {
    if (++attempts <= refusals_) {
      std::this_thread::sleep_for(std::min<col::milliseconds>(timeout, 10ms));
      return col::make_error(col::errc::timeout, "no server yet");
    }
    return inner_->set(key, value);
  }

  caf::expected<std::vector<char>> get(const std::string& key,
                                       col::milliseconds timeout) override {
    return inner_->get(key, timeout);
  }

  std::atomic<int> attempts = 0;

 private:
  int refusals_;
  col::rendezvous_store_ptr inner_ = col::make_in_process_store();
};

} // namespace

TEST_CASE("the cancelable store retries a set that must wait, for the whole "
          "budget of each set, and stops it on abort") {
  std::atomic<bool> cancel{false};
  SUBCASE("a set long after the view was made still gets its budget") {
    // Backends keep the store and set keys after formation (NCCL's pair
    // communicators): the budget counts from each set, not from the view.
    auto flaky = std::make_shared<flaky_set_store>(2);
    auto view =
      col::detail::make_cancelable_store(flaky, &cancel, "test", 200ms);
    std::this_thread::sleep_for(300ms);
    CHECK_FALSE(view->set("k", {'v'}));
    CHECK(flaky->attempts == 3);
    auto got = flaky->get("k", 0ms);
    REQUIRE(got);
    CHECK(*got == std::vector<char>{'v'});
  }
  SUBCASE("a set that never gets through fails at its budget") {
    auto flaky = std::make_shared<flaky_set_store>(1000000);
    auto view =
      col::detail::make_cancelable_store(flaky, &cancel, "test", 300ms);
    auto start = clock_type::now();
    auto err = view->set("k", {'v'});
    CHECK(col::code_of(err) == col::errc::timeout);
    CHECK(col::render(err).find("could not set rendezvous key 'k' within 300 "
                                "ms (the store's last answer: no server "
                                "yet)") != std::string::npos);
    CHECK(clock_type::now() - start >= 250ms);
    CHECK(flaky->attempts > 2); // retried, in slices
  }
  SUBCASE("abort stops the retries") {
    auto flaky = std::make_shared<flaky_set_store>(1000000);
    auto view = col::detail::make_cancelable_store(
      flaky, &cancel, "group 'g' was aborted", 60000ms);
    std::thread aborter{[&] {
      std::this_thread::sleep_for(200ms);
      cancel = true;
    }};
    auto err = view->set("k", {'v'});
    aborter.join();
    CHECK(col::code_of(err) == col::errc::aborted);
    CHECK(col::render(err).find("group 'g' was aborted") != std::string::npos);
  }
}
