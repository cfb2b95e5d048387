// Helpers of the tests that run ranks as separate processes: a temporary
// directory for their file store, spawning, and waiting with a bound.
#pragma once

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

namespace test {

/// Names in /dev/shm that belong to shm groups called `group` (segments are
/// named after their group): none may outlive a test, killed ranks included.
inline std::vector<std::string> shm_leftovers(const std::string& group) {
  std::vector<std::string> result;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec))
    if (entry.path().filename().string().find("caf_collective_" + group) == 0)
      result.push_back(entry.path().string());
  return result;
}

/// A fresh directory under the system's temporary directory, removed with
/// everything in it at the end of the scope.
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

/// Starts `exe` with `args` (argv[1...]) and the test's environment.
inline pid_t spawn_process(const std::string& exe,
                           std::vector<std::string> args) {
  args.insert(args.begin(), exe);
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
inline int wait_process(pid_t pid, std::chrono::seconds limit) {
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

} // namespace test
