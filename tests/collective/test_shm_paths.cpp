// The shm backend's paths across processes: single copy (process_vm_readv)
// where the kernel allows it, the staged copy where a rank turns it off,
// both with the same bits; a process killed while its peers read its
// memory; every dtype and reduce op on both paths, against the reference.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/uio.h>

#include "process_support.hpp"

using namespace std::chrono_literals;

namespace {

/// Whether this kernel lets a process read a child's memory with
/// process_vm_readv (Yama, seccomp and credentials may forbid it): what
/// the backend's own probe at formation must find too.
bool kernel_allows_single_copy() {
  static volatile uint64_t word = 0x5eed;
  pid_t child = fork();
  if (child == 0) {
    usleep(500000);
    _exit(0);
  }
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{const_cast<uint64_t*>(&word), sizeof(got)};
  auto n = process_vm_readv(child, &local, 1, &remote, 1, 0);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  return n == sizeof(got) && got == 0x5eed;
}

pid_t spawn_rank(int world, int rank, const test::temp_dir& dir,
                 const std::string& mode, const std::string& group,
                 std::vector<std::string> extra = {}) {
  std::vector<std::string> args{mode, std::to_string(world),
                                std::to_string(rank), dir.path.string(), group};
  args.insert(args.end(), extra.begin(), extra.end());
  return test::spawn_process(CAF_COLLECTIVE_SHM_PATHS_PROCESS, std::move(args));
}

std::vector<pid_t> spawn_ranks(int world, const test::temp_dir& dir,
                               const std::string& mode,
                               const std::string& group,
                               std::vector<std::string> extra = {}) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r)
    pids.push_back(spawn_rank(world, r, dir, mode, group, extra));
  return pids;
}

} // namespace

TEST_CASE("shm: across processes, large messages move by single copy where "
          "the kernel allows it and by staged copy when one rank turns it "
          "off, with bit-identical results") {
  auto expected = kernel_allows_single_copy() ? "single" : "staged";
  MESSAGE("this kernel allows process_vm_readv: " << expected);
  test::temp_dir dir;
  auto pids = spawn_ranks(3, dir, "paths", "paths", {expected});
  for (auto pid : pids)
    CHECK(test::wait_process(pid, 120s) == 0);
  CHECK(test::shm_leftovers("paths").empty());
}

TEST_CASE("shm: every dtype and reduce op across processes matches the "
          "reference, on the small path and both large paths") {
  for (bool single_copy : {true, false}) {
    INFO("single copy " << (single_copy ? "allowed" : "off"));
    // The ranks inherit the environment at spawn.
    if (!single_copy) setenv("CAF_COLLECTIVE_SHM_SINGLE_COPY", "off", 1);
    test::temp_dir dir;
    auto group = std::string{"matrix"} + (single_copy ? "1" : "0");
    auto pids = spawn_ranks(3, dir, "matrix", group);
    unsetenv("CAF_COLLECTIVE_SHM_SINGLE_COPY");
    for (auto pid : pids)
      CHECK(test::wait_process(pid, 120s) == 0);
    CHECK(test::shm_leftovers(group).empty());
  }
}

TEST_CASE("shm: a process killed while its peers read its memory makes them "
          "fail with peer_lost naming it") {
  if (!kernel_allows_single_copy())
    MESSAGE("no single copy on this kernel: the peers read staged copies");
  test::temp_dir dir;
  constexpr int world = 3;
  // The victim (the last rank) broadcasts 8 MiB over and over: its readers
  // spend most of their time copying out of its memory when it dies.
  std::vector<pid_t> readers;
  for (int r = 0; r < world - 1; ++r)
    readers.push_back(spawn_rank(world, r, dir, "reader", "victim"));
  auto victim = spawn_rank(world, world - 1, dir, "victim", "victim");
  // Once formed (on a loaded machine that may take seconds), the ranks
  // broadcast for a while before the victim dies.
  auto formed = dir.path / "formed-0";
  for (auto until = std::chrono::steady_clock::now() + 30s;
       !std::filesystem::exists(formed) &&
       std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(10ms);
  CHECK(std::filesystem::exists(formed));
  std::this_thread::sleep_for(1s);
  kill(victim, SIGKILL);
  test::wait_process(victim, 10s);
  for (auto pid : readers)
    CHECK(test::wait_process(pid, 60s) == 0);
  CHECK(test::shm_leftovers("victim").empty());
}
