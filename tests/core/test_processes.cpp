// Ranks as separate processes, meeting through a file store.
#include <doctest/doctest.h>

#include <filesystem>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

TEST_CASE("ranks in separate processes form a group through a file store") {
  constexpr int world = 3;
  auto dir = std::filesystem::temp_directory_path() /
             ("caf_collective_procs_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<pid_t> children;
  for (int rank = 0; rank < world; ++rank) {
    std::string exe = CAF_COLLECTIVE_RANK_PROCESS;
    std::string w = std::to_string(world);
    std::string r = std::to_string(rank);
    std::string d = dir.string();
    char* argv[] = {exe.data(), w.data(), r.data(), d.data(), nullptr};
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, environ) ==
            0);
    children.push_back(pid);
  }
  for (int rank = 0; rank < world; ++rank) {
    int status = 0;
    REQUIRE(waitpid(children[rank], &status, 0) == children[rank]);
    INFO("rank " << rank);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  std::filesystem::remove_all(dir);
}
