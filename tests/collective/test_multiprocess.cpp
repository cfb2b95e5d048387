// Ranks as separate processes, meeting through a file store in a fresh
// temporary directory.
#include <chrono>
#include <string>
#include <vector>

#include "process_support.hpp"

namespace {

using test::temp_dir;

pid_t spawn_rank(int world, int rank, const std::string& dir,
                 std::string timeout_ms = "60000") {
  return test::spawn_process(
    CAF_COLLECTIVE_RANK_PROCESS,
    {std::to_string(world), std::to_string(rank), dir, timeout_ms});
}

int wait_rank(pid_t pid, std::chrono::seconds limit) {
  return test::wait_process(pid, limit);
}

void run_processes(int world) {
  temp_dir dir;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r)
    pids.push_back(spawn_rank(world, r, dir.path.string()));
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " of " << world);
    CHECK(wait_rank(pids[r], std::chrono::seconds{120}) == 0);
  }
  // The ranks really met through the directory.
  CHECK_FALSE(std::filesystem::is_empty(dir.path));
}

} // namespace

TEST_CASE("ranks in separate processes meet through a file store: 1 rank") {
  run_processes(1);
}

TEST_CASE("ranks in separate processes meet through a file store: 2 ranks") {
  run_processes(2);
}

TEST_CASE("ranks in separate processes meet through a file store: 3 ranks") {
  run_processes(3);
}

TEST_CASE("ranks in separate processes meet through a file store: 4 ranks") {
  run_processes(4);
}

TEST_CASE("a rank process fails when its peers never come") {
  temp_dir dir;
  // World size 2 but only rank 0 starts: its init must time out after
  // 1 s naming rank 1 as never joined (exit 4), not hang, not crash.
  auto pid = spawn_rank(2, 0, dir.path.string(), "1000");
  CHECK(wait_rank(pid, std::chrono::seconds{60}) == 4);
}
