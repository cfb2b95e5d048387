// A group's life against ops in flight: closing it while another thread
// submits, aborting it while a callback closes it, callbacks that submit or
// block, and the end of a member_scope. Each case is a race or a re-entry
// that used to crash, hang or run an op out of order.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/lane.hpp"
#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::rank_log;

namespace {

/// Rank `rank` of group `name` over `store`, forming (`formed` completes
/// once every rank joined).
std::shared_ptr<col::group> member_of(const std::string& name, int world,
                                      int rank, const std::string& backend,
                                      const col::rendezvous_store_ptr& store,
                                      col::work& formed,
                                      std::chrono::milliseconds timeout = 10s) {
  col::group_config cfg;
  cfg.name = name;
  cfg.world_size = world;
  cfg.rank = rank;
  cfg.backend = backend;
  cfg.store = store;
  cfg.timeout = timeout;
  auto g = col::group::make(cfg, &formed);
  REQUIRE_MESSAGE(g, col::render(g.error()));
  return *g;
}

/// Both ends of a formed 2-rank group `name`, as threads of this process.
std::pair<std::shared_ptr<col::group>, std::shared_ptr<col::group>>
formed_pair(const std::string& name, const std::string& backend,
            std::chrono::milliseconds timeout = 10s) {
  auto store = col::make_in_process_store();
  col::work formed0;
  col::work formed1;
  auto g0 = member_of(name, 2, 0, backend, store, formed0, timeout);
  auto g1 = member_of(name, 2, 1, backend, store, formed1, timeout);
  REQUIRE_FALSE(formed0.wait());
  REQUIRE_FALSE(formed1.wait());
  return {g0, g1};
}

/// Fails the test and ends the process when `outcome` is not ready within
/// 30 s: the thread it waits for hangs, and nothing could join it.
template<class T>
T within_30s(std::future<T>& outcome, const char* what) {
  if (outcome.wait_for(30s) != std::future_status::ready) {
    std::string text = std::string{what} + " did not return within 30 s";
    FAIL_CHECK(text);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(EXIT_FAILURE);
  }
  return outcome.get();
}

} // namespace

TEST_CASE("ops submitted from another thread while the group closes run or "
          "are refused - never after the backend is gone") {
  // Gloo never starts an op on the submitter's thread: each async op
  // claims the lane, declines to start and is queued. A close() in between
  // used to queue its drain markers ahead of that op, shut the backend
  // down, and let the op run on no backend (a crash).
  for (const char* backend : {"gloo", "shm"}) {
    INFO("backend " << backend);
    int ran = 0;
    int refused = 0;
    for (int round = 0; round < 200; ++round) {
      col::work formed;
      auto g = member_of("close_race", 1, 0, backend,
                         col::make_in_process_store(), formed);
      REQUIRE_FALSE(formed.wait());
      std::atomic<bool> go{false};
      std::vector<col::work> handles;
      std::thread submitter{[&] {
        std::vector<float> x(16, 1.0f);
        go = true;
        for (int i = 0; i < 100000; ++i) {
          handles.push_back(g->allreduce(col::view_of(x), col::view_of(x)));
          if (handles.back().ready() && handles.back().wait()) break;
        }
        for (auto& w : handles)
          w.wait(); // x lives until every op is over
      }};
      while (!go)
        std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::microseconds{round % 50});
      g->close();
      submitter.join();
      for (auto& w : handles) {
        auto err = w.wait();
        if (!err) {
          ++ran;
          continue;
        }
        ++refused;
        CHECK(col::code_of(err) == col::errc::aborted);
        CHECK(col::render(err).find("destroyed") != std::string::npos);
      }
    }
    CHECK(ran > 0);
    CHECK(refused > 0);
  }
}

TEST_CASE("a completion callback that closes its group while an abort ends "
          "the op does not hang the aborting thread") {
  // shm starts a small op on the submitter's thread and leaves it waiting
  // for the absent peer; the abort ends it and runs its callbacks right
  // there. One that closes the group used to wait for the lock the abort
  // held.
  auto [g0, g1] = formed_pair("abort_close", "shm");
  std::vector<float> x(16, 1.0f);
  auto w = g0->allreduce(col::view_of(x), col::view_of(x));
  std::promise<std::string> closed_in_callback;
  auto closed = closed_in_callback.get_future();
  w.on_complete([&](const caf::error& err) {
    g0->close();
    closed_in_callback.set_value(err ? col::render(err) : "ok");
  });
  std::promise<void> aborted;
  auto abort_done = aborted.get_future();
  std::thread aborter{[&] {
    g0->abort("the test stops rank 0");
    aborted.set_value();
  }};
  within_30s(abort_done, "abort() whose callback closes the group");
  aborter.join();
  auto text = within_30s(closed, "the callback");
  CHECK(text.find("the test stops rank 0") != std::string::npos);
  CHECK(g0->closed());
  g1->abort("the test is over");
  g1->close();
}

TEST_CASE("an async op submitted from a callback that runs inside another "
          "rank's blocking op does not run inline") {
  // Rank 0 arrives last through a blocking allreduce and, in shm, finishes
  // rank 1's started op on its own thread, running rank 1's callback there.
  // That callback's async submit used to inherit the blocking caller's
  // license to run inline: it ran rank 1's next op on rank 0's thread,
  // waiting for rank 0's next op, which that very thread was to submit.
  auto [g0, g1] = formed_pair("inline_leak", "shm", 5s);
  std::vector<float> first1(16, 2.0f);
  std::vector<float> second1(16, 20.0f);
  std::promise<col::work> chained;
  auto next = chained.get_future();
  auto w1 = g1->allreduce(col::view_of(first1), col::view_of(first1));
  w1.on_complete([&](const caf::error&) {
    chained.set_value(
      g1->allreduce(col::view_of(second1), col::view_of(second1)));
  });
  std::vector<float> first0(16, 1.0f);
  std::vector<float> second0(16, 10.0f);
  caf::error err0a;
  caf::error err0b;
  {
    col::detail::run_inline_scope blocking; // what the blocking API does
    err0a = g0->allreduce(col::view_of(first0), col::view_of(first0)).wait();
    err0b = g0->allreduce(col::view_of(second0), col::view_of(second0)).wait();
  }
  CHECK_MESSAGE(!err0a, col::render(err0a));
  CHECK_MESSAGE(!err0b, col::render(err0b));
  CHECK_FALSE(w1.wait());
  auto w2 = within_30s(next, "the chained submit");
  auto err1b = w2.wait();
  CHECK_MESSAGE(!err1b, col::render(err1b));
  CHECK(first0[0] == 3.0f);
  CHECK(first1[15] == 3.0f);
  CHECK(second0[0] == 30.0f);
  CHECK(second1[15] == 30.0f);
  g0->close();
  g1->close();
}

TEST_CASE("a blocking op called from a callback on the group's own lane "
          "with ops queued behind is refused instead of waiting for itself") {
  // Gloo runs rank 0's first op on its lane; its callback runs on that lane
  // while the second op waits in the queue. A blocking op there would queue
  // behind the second and wait for the lane thread that runs the callback.
  auto [g0, g1] = formed_pair("own_lane_block", "gloo");
  std::vector<float> a0(8, 1.0f), b0(8, 1.0f), c0(8, 1.0f);
  std::promise<std::string> blocked;
  auto outcome = blocked.get_future();
  auto w0 = g0->allreduce(col::view_of(a0), col::view_of(a0));
  w0.on_complete([&](const caf::error&) {
    col::detail::run_inline_scope blocking; // what the blocking API does
    auto err = g0->allreduce(col::view_of(c0), col::view_of(c0)).wait();
    blocked.set_value(err ? col::render(err) : "ran");
  });
  auto w0b = g0->allreduce(col::view_of(b0), col::view_of(b0));
  // Rank 1 comes late: rank 0's callback and second op are in place first.
  std::this_thread::sleep_for(200ms);
  std::vector<float> a1(8, 2.0f), b1(8, 2.0f);
  auto w1 = g1->allreduce(col::view_of(a1), col::view_of(a1));
  auto w1b = g1->allreduce(col::view_of(b1), col::view_of(b1));
  auto text = within_30s(outcome, "the blocking op in the callback");
  INFO(text);
  CHECK(text.find("invalid_argument") != std::string::npos);
  CHECK(text.find("own lane") != std::string::npos);
  CHECK(text.find("own_lane_block") != std::string::npos);
  CHECK_FALSE(w0.wait());
  CHECK_FALSE(w0b.wait());
  CHECK_FALSE(w1.wait());
  CHECK_FALSE(w1b.wait());
  CHECK(b0[0] == 3.0f);
  // The refused op took no sequence number: the ranks still agree.
  std::vector<float> d0(8, 1.0f), d1(8, 2.0f);
  auto last0 = g0->allreduce(col::view_of(d0), col::view_of(d0));
  auto last1 = g1->allreduce(col::view_of(d1), col::view_of(d1));
  CHECK_FALSE(last0.wait());
  CHECK_FALSE(last1.wait());
  CHECK(d0[0] == 3.0f);
  g0->close();
  g1->close();
}

TEST_CASE("a second close() returns only once the ops submitted before "
          "are over - as the first does") {
  auto [g0, g1] = formed_pair("double_close", "gloo");
  std::vector<std::vector<float>> xs(3, std::vector<float>(8, 1.0f));
  std::vector<col::work> handles;
  for (auto& x : xs) // they wait for rank 1, which comes late
    handles.push_back(g0->allreduce(col::view_of(x), col::view_of(x)));
  std::thread first_close{[&] { g0->close(); }};
  while (!g0->closed())
    std::this_thread::yield();
  std::thread rank1{[&] {
    std::this_thread::sleep_for(300ms);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> y(8, 2.0f);
      g1->allreduce(col::view_of(y), col::view_of(y)).wait();
    }
    g1->close();
  }};
  g0->close(); // the second: returns once the three ops are over
  bool all_over = true;
  for (auto& w : handles)
    all_over = all_over && w.ready();
  CHECK_MESSAGE(all_over, "close() returned while ops of the group still ran "
                          "(their buffers may be freed now)");
  first_close.join();
  rank1.join();
  for (auto& w : handles)
    CHECK_FALSE(w.wait());
  CHECK(xs[2][0] == 3.0f);
}

TEST_CASE("the end of a member_scope closes its groups, also those the "
          "caller still holds") {
  std::shared_ptr<col::group> kept;
  {
    col::member_scope scope;
    col::init_collective_group(1, 0, "gloo", "scoped");
    kept = col::get_group("scoped");
    REQUIRE(kept);
    CHECK_FALSE(kept->closed());
  }
  CHECK(kept->closed());
  std::vector<float> x(4, 1.0f);
  auto err = kept->allreduce(col::view_of(x), col::view_of(x)).wait();
  REQUIRE(err);
  CHECK(col::code_of(err) == col::errc::aborted);
  CHECK(col::render(err).find("destroyed") != std::string::npos);
}

TEST_CASE("member_scopes of one thread may end in any order") {
  // Before: ending the outer scope first made the thread use the process
  // table while the inner one lived, and the inner one's end then made it
  // use the outer scope's freed table.
  auto outer = std::make_unique<col::member_scope>();
  col::init_collective_group(1, 0, "gloo", "scope-outer");
  auto inner = std::make_unique<col::member_scope>();
  col::init_collective_group(1, 0, "gloo", "scope-inner");
  CHECK_FALSE(col::is_group_initialized("scope-outer"));
  outer.reset();
  // The inner scope is still this thread's table.
  CHECK(col::is_group_initialized("scope-inner"));
  CHECK_FALSE(col::is_group_initialized("scope-outer"));
  inner.reset();
  // Now the process table: neither scope's groups, and it works.
  CHECK_FALSE(col::is_group_initialized("scope-inner"));
  CHECK_FALSE(col::is_group_initialized("scope-outer"));
  col::init_collective_group(1, 0, "gloo", "scope-process");
  CHECK(col::is_group_initialized("scope-process"));
  col::destroy_collective_group("scope-process");
}
