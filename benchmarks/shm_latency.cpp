// caf_collective_shm_latency: where the time of a small shm allreduce goes.
//
// Times every single allreduce of a few bytes on ranks that are threads of
// this process or forked processes, either through the public API (group,
// lane, validation, history: what users call) or straight through the shm
// backend (make_shm_backend, no group around it), and prints rank 0's
// median, 10th and 90th percentile. The difference of the two is the cost
// of the layers above the backend. --pin puts rank r on CPU r % cores, to
// tell the cost of ranks sharing one CPU from the backend's own.
//
// --on-lane submits through the asynchronous API and waits on the handle, so
// an op that cannot start without blocking runs on the group's lane thread,
// as the large ops of actor members do: the difference to the API row is
// the cost of handing the op to the lane and back.
//
// --persistent prepares the allreduce once (group::prepare_allreduce) and
// runs it each iteration: the API without the per-call lookup, checks and
// allocations.
//
// usage: caf_collective_shm_latency [--ranks N] [--procs] [--backend-only]
//                                   [--on-lane] [--persistent] [--bytes B]
//                                   [--iters N] [--pin]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>

#include "backends/shm/shm_backend.hpp"
#include "vocabulary/cpu_relax.hpp"

#include "strict_number.hpp"

namespace col = caf_collective;
using clock_type = std::chrono::steady_clock;

namespace {

// Each rank is a thread or process of this machine.
constexpr int max_ranks = 1024;

struct options {
  int ranks = 2;
  bool procs = false;
  bool backend_only = false;
  bool on_lane = false;
  bool persistent = false;
  size_t bytes = 8;
  int iters = 20000;
  bool pin = false;
};

options parse(int argc, char** argv) {
  options opts;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
      return std::string{argv[++i]};
    };
    if (flag == "--ranks")
      opts.ranks = col::bench::parse_int(flag, value(), 1, max_ranks);
    else if (flag == "--procs")
      opts.procs = true;
    else if (flag == "--backend-only")
      opts.backend_only = true;
    else if (flag == "--on-lane")
      opts.on_lane = true;
    else if (flag == "--persistent")
      opts.persistent = true;
    else if (flag == "--bytes")
      opts.bytes = col::bench::parse_byte_count(flag, value());
    else if (flag == "--iters")
      opts.iters = col::bench::parse_int(flag, value(), 1, INT_MAX);
    else if (flag == "--pin")
      opts.pin = true;
    else
      throw std::invalid_argument("unknown flag " + flag);
  }
  if (opts.bytes < 4) throw std::invalid_argument("need --bytes >= 4");
  return opts;
}

/// A timed loop whose ops went wrong would time nothing worth printing:
/// every element of the last sum of ones must be the rank count.
void check_sums(const options& opts, const std::vector<float>& out) {
  for (float x : out)
    if (x != float(opts.ranks))
      throw std::runtime_error("wrong allreduce result " + std::to_string(x) +
                               ", expected " + std::to_string(opts.ranks));
}

/// Times opts.iters allreduces of opts.bytes / 4 float32 on this rank.
std::vector<double> time_rank(const options& opts, int rank,
                              col::rendezvous_store_ptr store) {
  if (opts.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank % int(std::thread::hardware_concurrency()), &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
  std::vector<float> in(opts.bytes / 4, 1.0f);
  std::vector<float> out(in.size());
  std::vector<double> samples(size_t(opts.iters));
  auto timed = [&](auto&& call) {
    for (auto& sample : samples) {
      auto start = clock_type::now();
      call();
      sample =
        std::chrono::duration<double, std::micro>(clock_type::now() - start)
          .count();
    }
  };
  if (opts.backend_only) {
    col::group_config cfg;
    cfg.name = "latency";
    cfg.world_size = opts.ranks;
    cfg.rank = rank;
    cfg.backend = "shm";
    cfg.store = std::move(store);
    auto be = col::detail::shm::make_shm_backend(cfg);
    if (!be) throw std::runtime_error(col::render(be.error()));
    col::op_call call{0, std::chrono::seconds{30}};
    col::allreduce_options aopts;
    timed([&] {
      ++call.seq;
      if (auto err =
            (*be)->allreduce(call, col::view_of(in), col::view_of(out), aopts))
        throw std::runtime_error(col::render(err));
    });
    check_sums(opts, out);
    return samples;
  }
  col::member_scope scope; // threads of one process are separate members
  col::init_options init;
  init.store = std::move(store);
  col::init_collective_group(opts.ranks, rank, "shm", "latency", init);
  if (opts.persistent) {
    auto op = col::get_group("latency")->prepare_allreduce(col::view_of(in),
                                                           col::view_of(out));
    if (!op) throw std::runtime_error(col::render(op.error()));
    timed([&] {
      if (auto err = op->run()) throw std::runtime_error(col::render(err));
    });
  } else if (opts.on_lane)
    timed([&] {
      auto done =
        col::allreduce_async(col::view_of(in), col::view_of(out), "latency");
      if (auto err = done.wait()) throw std::runtime_error(col::render(err));
    });
  else
    timed(
      [&] { col::allreduce(col::view_of(in), col::view_of(out), "latency"); });
  col::destroy_collective_group("latency");
  check_sums(opts, out);
  return samples;
}

void report(const options& opts, std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[size_t(q * double(samples.size() - 1))];
  };
  auto median = at(0.5);
  auto slow = std::count_if(samples.begin(), samples.end(),
                            [&](double x) { return x > 10 * median; });
  std::printf("%d ranks as %s, %zu B allreduce through %s%s: rank 0 median "
              "%.2f us, p10 %.2f us, p90 %.2f us (%d iterations)\n"
              "  tail: p99 %.2f us, p99.9 %.2f us, max %.2f us, %ld "
              "iterations over 10x the median\n",
              opts.ranks, opts.procs ? "processes" : "threads", opts.bytes,
              opts.backend_only ? "the shm backend only"
              : opts.on_lane    ? "the API, run on the lane"
              : opts.persistent ? "a persistent op"
                                : "the API",
              opts.pin ? ", pinned" : "", median, at(0.1), at(0.9), opts.iters,
              at(0.99), at(0.999), samples.back(), static_cast<long>(slow));
}

// Waits until `ball` holds `value` or `stop`, and returns what it holds.
// Yields now and then: on a loaded machine the peer may wait for this CPU,
// and pure spinning would cost a whole time slice per trip.
int wait_for_ball(const std::atomic<int>& ball, int value, int stop) {
  for (int spins = 1;; ++spins) {
    auto seen = ball.load(std::memory_order_acquire);
    if (seen == value || seen == stop) return seen;
    if (spins % 256 == 0)
      std::this_thread::yield();
    else
      col::detail::cpu_relax();
  }
}

// How long one cache line takes to go to another thread and back, the floor
// of every small op between two ranks. On a VM it depends on where the host
// placed the vCPUs (two hyperthreads of one core, or two cores), which can
// differ between launches and halve or double a small op's time: a launch's
// figures compare with another's only when this line does.
std::string line_round_trip() {
  // With one CPU every trip would wait for a time slice.
  if (std::thread::hardware_concurrency() < 2) return "one CPU only";
  // At most this many trips, for at most this long: on a quiet machine all
  // of them take well under the limit.
  constexpr int max_trips = 200000;
  constexpr auto limit = std::chrono::milliseconds{200};
  constexpr int stop = -1;
  alignas(64) std::atomic<int> ball{0};
  int echo_cpu = -1;
  std::thread echo{[&] {
    echo_cpu = sched_getcpu();
    for (int served = 1; wait_for_ball(ball, served, stop) != stop; served += 2)
      ball.store(served + 1, std::memory_order_release);
  }};
  int serve_cpu = sched_getcpu();
  auto start = clock_type::now();
  int trips = 0;
  while (trips < max_trips) {
    ball.store(2 * trips + 1, std::memory_order_release);
    wait_for_ball(ball, 2 * trips + 2, stop);
    ++trips;
    if (trips % 1024 == 0 && clock_type::now() - start >= limit) break;
  }
  auto elapsed = clock_type::now() - start;
  ball.store(stop, std::memory_order_release);
  echo.join();
  auto ns = std::chrono::duration<double, std::nano>(elapsed).count() / trips;
  char text[160];
  std::snprintf(text, sizeof(text),
                "a cache line's round trip between two threads %.0f ns "
                "(CPUs %d and %d, %d trips)",
                ns, serve_cpu, echo_cpu, trips);
  return text;
}

// What a clock read and a fixed piece of arithmetic cost on this machine:
// every figure above includes two clock reads, and two machines' figures
// compare only when their CPUs and clocks do (a VM may read a slow clock
// source, or run a woken vCPU slowly).
void report_machine() {
  constexpr int reads = 100000;
  auto start = clock_type::now();
  auto sink = start;
  for (int i = 0; i < reads; ++i)
    sink = std::max(sink, clock_type::now());
  auto read_ns =
    std::chrono::duration<double, std::nano>(sink - start).count() / reads;
  constexpr uint64_t steps = 10000000;
  uint64_t x = 1;
  start = clock_type::now();
  for (uint64_t i = 0; i < steps; ++i) // a dependent chain: no overlap
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  auto chain_ns =
    std::chrono::duration<double, std::nano>(clock_type::now() - start)
      .count() /
    (steps / 1000);
  std::string source = "unknown";
  if (auto* f = std::fopen(
        "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        "r")) {
    char name[64] = {};
    if (std::fgets(name, sizeof(name), f)) {
      source = name;
      while (!source.empty() && source.back() == '\n')
        source.pop_back();
    }
    std::fclose(f);
  }
  std::printf("machine: a clock read %.1f ns (clock source %s), 1000 dependent "
              "multiply-adds %.0f ns (checksum %llu), %s\n",
              read_ns, source.c_str(), chain_ns,
              static_cast<unsigned long long>(x % 10),
              line_round_trip().c_str());
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 2 &&
      (std::string{argv[1]} == "--help" || std::string{argv[1]} == "-h")) {
    std::printf(
      "usage: caf_collective_shm_latency [--ranks N] [--procs] "
      "[--backend-only]\n"
      "         [--on-lane] [--persistent] [--bytes B] [--iters N] [--pin]\n"
      "Times small shm allreduces through the API or the backend alone and "
      "prints\nrank 0's median, 10th and 90th percentile.\n");
    return 0;
  }
  try {
    auto opts = parse(argc, argv);
    report_machine();
    if (!opts.procs) {
      auto store = col::make_in_process_store();
      std::vector<double> first;
      // What each rank threw: an exception leaving a std::thread would
      // terminate the process without a word. Reported as the processes
      // mode reports a failed rank.
      std::vector<std::string> failures(size_t(opts.ranks));
      std::vector<std::thread> threads;
      for (int r = 0; r < opts.ranks; ++r)
        threads.emplace_back([&, r] {
          try {
            auto samples = time_rank(opts, r, store);
            if (r == 0) first = std::move(samples);
          } catch (const std::exception& e) {
            failures[size_t(r)] = e.what();
          }
        });
      for (auto& t : threads)
        t.join();
      int failed = 0;
      for (int r = 0; r < opts.ranks; ++r) {
        if (failures[size_t(r)].empty()) continue;
        std::fprintf(stderr, "rank %d: %s\n", r, failures[size_t(r)].c_str());
        ++failed;
      }
      if (failed > 0) return 1;
      report(opts, std::move(first));
      return 0;
    }
    char dir[] = "/tmp/caf_collective_latency_XXXXXX";
    if (mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    std::vector<pid_t> pids;
    for (int r = 0; r < opts.ranks; ++r) {
      pid_t pid = fork();
      if (pid == 0) {
        try {
          auto samples = time_rank(opts, r, col::make_file_store(dir));
          if (r == 0) report(opts, std::move(samples));
          std::fflush(stdout);
          _exit(0);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d: %s\n", r, e.what());
          _exit(1);
        }
      }
      pids.push_back(pid);
    }
    int failed = 0;
    for (auto pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caf_collective_shm_latency: %s\n", e.what());
    return 2;
  }
}
