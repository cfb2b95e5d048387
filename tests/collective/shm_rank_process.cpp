// One rank of the shm multi-process tests (test_shm.cpp).
//
// Usage: collective_shm_rank_process <mode> <world> <rank> <store dir> <group>
//   ops       every op across processes, with sizes larger than one staging
//             area (several rounds); exit 0 when every result is right
//   sleeper   joins the group, then sleeps until killed (the victim)
//   survivor  joins, runs an allreduce that must fail because of the
//             sleeper (argument 6: the expected errc, "peer_lost" or
//             "timeout", argument 7: the op timeout in ms), then destroys the
//             group and forms a new one with the other survivors (world - 1
//             ranks, the sleeper is the last rank) and runs an allreduce on
//             it. Exit 0 when all of that happened as expected.
//   arriver   joins, enters an allreduce and waits there to be killed or
//             stopped
//   leaver    joins, receives from the last rank, which must fail with
//             peer_lost (or argument 6, e.g. "timeout"; argument 7: the
//             recv's timeout in ms); destroys the group (which marks it
//             aborted) and exits
//   unformed  its formation must fail within argument 6 (ms), with a message
//             that holds argument 7 if given
//   witness   joins, runs an allreduce that must fail with peer_lost naming
//             the last rank as the one rank that died (argument 6: the op
//             timeout in ms; argument 7: the text expected instead), then
//             destroys the group
//   auto      forms the group with backend "auto", which must resolve to
//             argument 6, runs a barrier and an allreduce, and destroys it
//   stop-reading joins, enters a 4 MiB allgather and stops itself
//             (SIGSTOP) as soon as it has marked that it reads its peers'
//             buffers in place, after creating the file "stopped-reading"
//             in the store dir; the test kills it
// Errors go to stderr; exit 1 on anything unexpected.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <caf_collective/all.hpp>

#include "backends/shm/shm_backend.hpp"

namespace col = caf_collective;

namespace {

int failures = 0;
int my_rank = -1;

void expect(bool cond, const std::string& what) {
  if (!cond) {
    std::fprintf(stderr, "rank %d: %s\n", my_rank, what.c_str());
    ++failures;
  }
}

col::init_options options(const std::string& dir, int timeout_ms) {
  col::init_options opts;
  opts.store = col::make_file_store(dir);
  opts.timeout = std::chrono::milliseconds{timeout_ms};
  return opts;
}

void run_ops(int world, int rank, const std::string& g) {
  // 3 Mi doubles = 24 MiB per rank: several rounds through a 4 MiB area.
  constexpr size_t n = 3 << 20;
  std::vector<double> xs(n);
  for (size_t i = 0; i < n; ++i)
    xs[i] = double(rank + 1) * double(i % 1000 + 1);
  col::allreduce(col::view_of(xs), g);
  double ranks = world * (world + 1) / 2.0;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    bad += xs[i] != ranks * double(i % 1000 + 1);
  expect(bad == 0, "allreduce: " + std::to_string(bad) + " wrong");
  // int64 avg of values whose sum does not fit in int64.
  std::vector<int64_t> big(1000, INT64_MAX - rank);
  col::allreduce_options avg;
  avg.op = col::reduce_op::avg;
  col::allreduce(col::view_of(big), g, avg);
  __int128 sum = 0;
  for (int r = 0; r < world; ++r)
    sum += INT64_MAX - r;
  auto want = static_cast<int64_t>(sum / world);
  expect(big[0] == want && big[999] == want, "int64 avg");
  // allgather of 1 Mi int32 per rank.
  constexpr size_t m = 1 << 20;
  std::vector<int32_t> mine(m);
  std::iota(mine.begin(), mine.end(), rank * 7);
  std::vector<int32_t> all(m * size_t(world));
  col::allgather(col::view_of(mine), col::view_of(all), g);
  for (int r = 0; r < world; ++r)
    expect(all[size_t(r) * m] == r * 7 &&
             all[size_t(r) * m + m - 1] == r * 7 + int32_t(m) - 1,
           "allgather block " + std::to_string(r));
  // alltoall: block j of rank r holds r * 1000 + j.
  constexpr size_t b = 300000;
  std::vector<int64_t> send(b * size_t(world));
  for (int j = 0; j < world; ++j)
    std::fill_n(send.begin() + ptrdiff_t(size_t(j) * b), b, rank * 1000 + j);
  std::vector<int64_t> recv(send.size());
  col::alltoall(col::view_of(send), col::view_of(recv), g);
  for (int r = 0; r < world; ++r)
    expect(recv[size_t(r) * b] == r * 1000 + rank &&
             recv[size_t(r) * b + b - 1] == r * 1000 + rank,
           "alltoall block " + std::to_string(r));
  // reduce_scatter of world blocks of 700001 floats.
  constexpr size_t k = 700001;
  std::vector<float> blocks(k * size_t(world), 1.0f);
  std::vector<float> out(k);
  col::reduce_scatter(col::view_of(blocks), col::view_of(out), g);
  expect(out[0] == float(world) && out[k - 1] == float(world),
         "reduce_scatter");
  // broadcast from the last rank, 5 MiB.
  std::vector<uint8_t> bc(5 << 20, rank == world - 1 ? 42 : 0);
  col::broadcast(col::view_of(bc), world - 1, g);
  expect(bc[0] == 42 && bc.back() == 42, "broadcast");
  // allgatherv with counts r + 1.
  std::vector<size_t> counts(static_cast<size_t>(world));
  std::iota(counts.begin(), counts.end(), size_t{1});
  std::vector<int64_t> vin(counts[size_t(rank)], rank);
  std::vector<int64_t> vout(
    std::accumulate(counts.begin(), counts.end(), size_t{0}));
  col::allgatherv_options vopts;
  vopts.counts = counts;
  col::allgatherv(col::view_of(vin), col::view_of(vout), g, vopts);
  size_t at = 0;
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < counts[size_t(r)]; ++i)
      expect(vout[at++] == r, "allgatherv");
  // send/recv ring of 1 MiB messages (several mailbox chunks).
  std::vector<int32_t> ring_out(1 << 18, rank);
  std::vector<int32_t> ring_in(1 << 18, -1);
  auto s = col::send_async(col::view_of(ring_out), (rank + 1) % world, g);
  col::recv(col::view_of(ring_in), (rank + world - 1) % world, g);
  expect(!s.wait(), "ring send");
  expect(ring_in[0] == (rank + world - 1) % world &&
           ring_in.back() == (rank + world - 1) % world,
         "ring recv");
  col::barrier(g);
  expect(col::get_group(g)->backend_in_use() == "shm", "backend in use");
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: %s <mode> <world> <rank> <store dir> <group> "
                 "[expected errc] [op timeout ms]\n",
                 argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  int world = std::atoi(argv[2]);
  my_rank = std::atoi(argv[3]);
  std::string dir = argv[4];
  std::string g = argv[5];
  try {
    if (mode == "unformed" && (argc == 7 || argc == 8)) {
      // Its formation must fail (a peer never comes, another dies) within
      // the given timeout, saying argument 7 if given.
      try {
        col::init_collective_group(world, my_rank, "shm", g,
                                   options(dir + "/" + g, std::atoi(argv[6])));
      } catch (const col::collective_error& ex) {
        if (argc == 8 &&
            std::string{ex.what()}.find(argv[7]) == std::string::npos) {
          std::fprintf(stderr, "rank %d: formation failed without '%s': %s\n",
                       my_rank, argv[7], ex.what());
          return 1;
        }
        std::printf("rank %d: formation failed as expected: %s\n", my_rank,
                    ex.what());
        return 0;
      }
      std::fprintf(stderr, "rank %d: formed a group that cannot form\n",
                   my_rank);
      return 1;
    }
    if (mode == "auto" && argc == 7) {
      col::init_collective_group(world, my_rank, "auto", g,
                                 options(dir + "/" + g, 30000));
      auto used = col::get_group(g)->backend_in_use();
      expect(used == argv[6], "auto resolved to " + used);
      std::vector<float> x(1000, 1.0f);
      col::allreduce(col::view_of(x), g);
      expect(x[0] == float(world) && x[999] == float(world), "allreduce");
      col::destroy_collective_group(g);
      return failures == 0 ? 0 : 1;
    }
    col::init_collective_group(world, my_rank, "shm", g,
                               options(dir + "/" + g, 30000));
    if (mode == "stop-reading") {
      static std::string marker;
      marker = dir + "/stopped-reading";
      col::detail::shm::reading_test_hook = [](col::detail::shm::shm_backend&) {
        std::fclose(std::fopen(marker.c_str(), "w"));
        std::raise(SIGSTOP);
      };
      std::vector<float> mine(size_t{1} << 20, 1.0f); // 4 MiB: single copy
      std::vector<float> all(mine.size() * size_t(world));
      col::allgather(col::view_of(mine), col::view_of(all), g);
      return 0;
    }
    if (mode == "ops") {
      run_ops(world, my_rank, g);
      col::destroy_collective_group(g);
      return failures == 0 ? 0 : 1;
    }
    if (mode == "sleeper") {
      col::barrier(g);
      for (;;)
        std::this_thread::sleep_for(std::chrono::seconds{1});
    }
    if (mode == "arriver") {
      // Reaches the allreduce's first step and waits there to be killed.
      col::barrier(g);
      std::vector<float> x(1000, 1.0f);
      col::allreduce(col::view_of(x), g);
      return 1; // the test kills this rank before its peers could finish
    }
    if (mode == "survivor" && argc == 8) {
      std::string expected = argv[6];
      col::barrier(g);
      std::vector<float> x(1000, 1.0f);
      col::allreduce_options opts;
      opts.timeout = std::chrono::milliseconds{std::atoi(argv[7])};
      auto start = std::chrono::steady_clock::now();
      try {
        col::allreduce(col::view_of(x), g, opts);
        expect(false, "allreduce without the sleeper succeeded");
      } catch (const col::collective_error& e) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count();
        std::string text = e.what();
        std::printf("rank %d: %s after %lld ms\n", my_rank, text.c_str(),
                    static_cast<long long>(ms));
        expect(std::string{col::to_string(e.code())} == expected,
               "expected " + expected + ", got " + text);
        auto sleeper = std::to_string(world - 1);
        expect(text.find("rank " + sleeper) != std::string::npos ||
                 text.find("[" + sleeper + "]") != std::string::npos,
               "error does not name rank " + sleeper + ": " + text);
      }
      col::destroy_collective_group(g);
      // The survivors form a group of their own and carry on.
      auto again = g + "-again";
      col::init_collective_group(world - 1, my_rank, "shm", again,
                                 options(dir + "/" + again, 30000));
      col::allreduce(col::view_of(x), again);
      expect(x[0] == float(world - 1), "allreduce among the survivors");
      col::destroy_collective_group(again);
      return failures == 0 ? 0 : 1;
    }
    if (mode == "leaver") {
      std::string expected = argc > 6 ? argv[6] : "peer_lost";
      col::recv_options opts;
      if (argc > 7)
        opts.timeout = std::chrono::milliseconds{std::atoi(argv[7])};
      col::barrier(g);
      std::vector<float> x(4);
      try {
        col::recv(col::view_of(x), world - 1, g, opts);
        expect(false, "a recv from the last rank succeeded");
      } catch (const col::collective_error& e) {
        std::printf("rank %d: %s\n", my_rank, e.what());
        expect(std::string{col::to_string(e.code())} == expected,
               "expected " + expected + ", got " + e.what());
      }
      col::destroy_collective_group(g);
      return failures == 0 ? 0 : 1;
    }
    if (mode == "witness" && (argc == 7 || argc == 8)) {
      auto sleeper = std::to_string(world - 1);
      std::string expected =
        argc == 8 ? argv[7] : "the process of rank " + sleeper + " died";
      col::barrier(g);
      std::vector<float> x(1000, 1.0f);
      col::allreduce_options opts;
      opts.timeout = std::chrono::milliseconds{std::atoi(argv[6])};
      try {
        col::allreduce(col::view_of(x), g, opts);
        expect(false, "allreduce without the sleeper succeeded");
      } catch (const col::collective_error& e) {
        std::string text = e.what();
        std::printf("rank %d: %s\n", my_rank, text.c_str());
        expect(e.code() == col::errc::peer_lost &&
                 text.find(expected) != std::string::npos,
               "expected peer_lost saying '" + expected + "', got " + text);
      }
      col::destroy_collective_group(g);
      return failures == 0 ? 0 : 1;
    }
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", my_rank, e.what());
    return 1;
  }
}
