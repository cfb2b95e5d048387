// Ranks as separate processes, meeting through a file store in a fresh
// temporary directory.
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

extern char** environ;

namespace {

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("caf_collective_procs_" + std::to_string(rd()) + "_" +
            std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

pid_t spawn_rank(int world, int rank, const std::string& dir,
                 std::string timeout_ms = "60000") {
  std::string exe = CAF_COLLECTIVE_RANK_PROCESS;
  std::vector<std::string> args{exe, std::to_string(world),
                                std::to_string(rank), dir, timeout_ms};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc =
    posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
  REQUIRE(rc == 0);
  return pid;
}

/// Waits for `pid` up to `limit`; kills it after that. Returns the exit
/// status, or -1 if it was killed or died by a signal.
int wait_rank(pid_t pid, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    auto r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(10000);
  }
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
  // 1 s and it must exit with 1 (not hang, not crash).
  auto pid = spawn_rank(2, 0, dir.path.string(), "1000");
  CHECK(wait_rank(pid, std::chrono::seconds{60}) == 1);
}
