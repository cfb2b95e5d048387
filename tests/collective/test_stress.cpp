// Stress test: 4 processes (stress_process.cpp) in 3 Gloo groups (two over
// all 4 processes under different names, one over processes 1-3) run 2,000
// mixed operations in total, several in flight per group and the groups'
// batches at the same time: allreduce of 8 B-32 KiB (the legacy algorithms)
// and some of 64 KiB-1 MiB, allgather, broadcast, reduce_scatter, alltoall,
// barrier, send/recv rings and pairs. Every process checks every result;
// all must exit 0 within the bound.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "process_support.hpp"

namespace {

constexpr int processes = 4;
constexpr size_t total_ops = 2000;

uint64_t stress_seed() {
  if (const char* env = std::getenv("CAF_COLLECTIVE_STRESS_SEED"); env && *env)
    return std::strtoull(env, nullptr, 0);
  return 20240917;
}

pid_t spawn_stress(int self, const std::string& dir, uint64_t seed,
                   std::chrono::milliseconds deadline) {
  return test::spawn_process(CAF_COLLECTIVE_STRESS_PROCESS,
                             {std::to_string(self), dir, std::to_string(seed),
                              std::to_string(total_ops),
                              std::to_string(deadline.count())});
}

/// Waits for every process until `limit` passed, then kills the rest.
/// Returns each one's exit status (-1: killed, or died by a signal).
std::vector<int> wait_all(const std::vector<pid_t>& pids,
                          std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<int> codes(pids.size(), -2); // -2: still running
  size_t running = pids.size();
  while (running > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -2) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        --running;
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (codes[i] == -2) {
          kill(pids[i], SIGKILL);
          int status = 0;
          waitpid(pids[i], &status, 0);
          codes[i] = -1;
        }
      break;
    }
    usleep(10000);
  }
  return codes;
}

} // namespace

TEST_CASE("stress: 4 processes in 3 groups run 2000 mixed ops, several in "
          "flight per group, with every result right") {
  test::temp_dir dir;
  auto seed = stress_seed();
  INFO("seed " << seed << " (CAF_COLLECTIVE_STRESS_SEED)");
  auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  // The processes give up on their own after 100 s; the test kills them
  // after 120 s.
  for (int p = 0; p < processes; ++p)
    pids.push_back(
      spawn_stress(p, dir.path.string(), seed, std::chrono::seconds{100}));
  auto codes = wait_all(pids, std::chrono::seconds{120});
  auto secs =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
  MESSAGE("4 processes, 3 groups, " << total_ops << " ops: " << secs << " s");
  for (int p = 0; p < processes; ++p) {
    INFO("process " << p
                    << " (exit 1: error or wrong value, 3: its own "
                       "deadline, -1: killed or crashed)");
    CHECK(codes[p] == 0);
  }
  // The processes really met through the directory.
  CHECK_FALSE(std::filesystem::is_empty(dir.path));
}
