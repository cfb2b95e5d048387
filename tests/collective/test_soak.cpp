// A long-running process forms and destroys groups again and again: a
// training job that builds subgroups per phase, a server that serves many
// jobs. Every cycle, healthy or failed (formation timeout, mismatch, abort),
// must give back what it took: file descriptors (sockets, memfds, pidfds,
// eventfds), threads (lanes, transport loops, watchdogs), memory mappings
// (segments) and /dev/shm names. Each case counts them after one warm-up
// cycle, which may create what the process keeps for good, and after many
// more; a leak of one item per cycle shows as a dozen or more.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <latch>
#include <sstream>
#include <string>
#include <thread>

#include "process_support.hpp"
#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::expect_error;
using test::expect_usable;
using test::rank_log;

namespace {

/// What a process holds that a group may take.
struct holdings {
  size_t fds = 0;
  size_t threads = 0;
  size_t mappings = 0;

  bool within(const holdings& base) const {
    return fds <= base.fds && threads <= base.threads &&
           mappings <= base.mappings;
  }
};

std::ostream& operator<<(std::ostream& out, const holdings& h) {
  return out << h.fds << " fds, " << h.threads << " threads, " << h.mappings
             << " shared mappings";
}

size_t entries_in(const char* dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

holdings now_held() {
  holdings h;
  h.fds = entries_in("/proc/self/fd");
  h.threads = entries_in("/proc/self/task");
  // Shared segments only: the allocator's own mappings (an arena per
  // thread, heaps that grow) come and go with the threads' allocations.
  std::ifstream maps{"/proc/self/maps"};
  std::string line;
  while (std::getline(maps, line))
    if (line.find("memfd:") != std::string::npos ||
        line.find("/dev/shm/") != std::string::npos)
      ++h.mappings;
  return h;
}

/// Runs `cycle` once to warm up, counts, runs it `rounds` times more and
/// checks that the process holds no more than after the warm-up. Threads
/// that end after their owner returned may take a moment to go: the count
/// is read again for up to 5 s before a difference counts as a leak.
template<class Cycle>
void check_no_growth(const std::string& what, int rounds, Cycle cycle) {
  INFO(what);
  cycle(0);
  auto base = now_held();
  for (int i = 1; i <= rounds; ++i)
    cycle(i);
  auto after = now_held();
  auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!after.within(base) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(20ms);
    after = now_held();
  }
  INFO("after the warm-up: " << base << "; after " << rounds
                             << " more cycles: " << after);
  CHECK(after.within(base));
}

/// One healthy cycle: `world` ranks as threads form `name` on `backend`,
/// run an allreduce whose sum is checked, and destroy the group.
void healthy_cycle(const std::string& backend, const std::string& name,
                   int world) {
  auto store = col::make_in_process_store();
  auto results = test::run_threads(world, [&](int rank, rank_log& log) {
    col::init_collective_group(world, rank, backend, name,
                               test::group_options(store, 30s));
    expect_usable(log, name, world, rank);
    col::destroy_collective_group(name);
  });
  test::check_ranks(results);
}

const char* const backends[] = {"gloo", "shm"};

} // namespace

TEST_CASE("groups formed and destroyed 60 times give back every fd thread "
          "and mapping") {
  for (const std::string backend : {"gloo", "shm", "auto"}) {
    auto name = "soak-healthy-" + backend;
    check_no_growth(backend, 60, [&](int) { healthy_cycle(backend, name, 3); });
    CHECK(test::shm_leftovers(name).empty());
  }
}

TEST_CASE("a formation that times out gives back what it took") {
  for (const std::string backend : backends) {
    auto name = "soak-formation-" + backend;
    check_no_growth(backend, 12, [&](int) {
      // World size 3: rank 2 never comes.
      auto store = col::make_in_process_store();
      auto results = test::run_threads(2, [&](int rank, rank_log& log) {
        expect_error(log, "init", col::errc::timeout, {name}, [&] {
          col::init_collective_group(3, rank, backend, name,
                                     test::group_options(store, 200ms));
        });
      });
      test::check_ranks(results);
    });
    CHECK(test::shm_leftovers(name).empty());
  }
}

TEST_CASE("ranks that disagree and then destroy the group give back what "
          "they took") {
  for (const std::string backend : backends) {
    auto name = "soak-mismatch-" + backend;
    check_no_growth(backend, 12, [&](int) {
      auto store = col::make_in_process_store();
      std::latch done{2};
      auto results = test::run_threads(2, [&](int rank, rank_log& log) {
        col::init_collective_group(2, rank, backend, name,
                                   test::group_options(store, 500ms));
        auto x = test::make_tensor(col::dtype::float32, rank == 0 ? 10 : 30);
        try {
          col::allreduce(x, name);
          log.fail("an allreduce of 10 against 30 elements succeeded");
        } catch (const col::collective_error&) {
          // Which error depends on the backend (see the hardening suite);
          // here only what the failure leaves behind counts.
        }
        done.arrive_and_wait();
        col::destroy_collective_group(name);
      });
      test::check_ranks(results);
    });
    CHECK(test::shm_leftovers(name).empty());
  }
}

TEST_CASE("a group aborted during an op and destroyed gives back what it "
          "took") {
  for (const std::string backend : backends) {
    auto name = "soak-abort-" + backend;
    check_no_growth(backend, 12, [&](int) {
      auto store = col::make_in_process_store();
      std::latch done{2};
      auto results = test::run_threads(2, [&](int rank, rank_log& log) {
        // Gloo ends an aborted op only at its deadline; shm at once.
        auto timeout = backend == "gloo" ? col::milliseconds{300} : 10s;
        col::init_collective_group(2, rank, backend, name,
                                   test::group_options(store, timeout));
        if (rank == 0) { // rank 1 never calls: the op waits until the abort
          auto group = col::get_group(name);
          auto x = col::tensor::from_vector(std::vector<float>(100, 1.0f));
          auto running = col::allreduce_async(x, name);
          std::thread aborter{[group] {
            std::this_thread::sleep_for(20ms);
            group->abort("soak test abort");
          }};
          log.expect(static_cast<bool>(running.wait()),
                     "the aborted allreduce succeeded");
          aborter.join();
        }
        done.arrive_and_wait();
        col::destroy_collective_group(name);
      });
      test::check_ranks(results);
    });
    CHECK(test::shm_leftovers(name).empty());
  }
}
