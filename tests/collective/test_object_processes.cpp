// Object collectives between ranks in separate processes (real sockets,
// a file store), and a rank that dies in the middle of an object op.
#include <chrono>
#include <string>
#include <vector>

#include "process_support.hpp"

namespace {

pid_t spawn_rank(int world, int rank, const test::temp_dir& dir,
                 const char* mode) {
  return test::spawn_process(
    CAF_COLLECTIVE_OBJECT_RANK_PROCESS,
    {std::to_string(world), std::to_string(rank), dir.path.string(), mode});
}

std::vector<int> run_processes(int world, const char* mode) {
  test::temp_dir dir;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r)
    pids.push_back(spawn_rank(world, r, dir, mode));
  std::vector<int> codes;
  for (auto pid : pids)
    codes.push_back(test::wait_process(pid, std::chrono::seconds{90}));
  return codes;
}

// Runs 3 ranks in `mode`; every one must exit with `code`.
void expect_every_rank_exits(const char* mode, int code) {
  auto codes = run_processes(3, mode);
  for (size_t r = 0; r < codes.size(); ++r) {
    INFO("rank " << r);
    CHECK(codes[r] == code);
  }
}

// The sanitizers reserve terabytes of address space and end the process
// when an allocation fails: an address-space limit cannot be tested there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool address_space_limits_work = false;
#else
constexpr bool address_space_limits_work = true;
#endif

} // namespace

TEST_CASE("object ops between 3 processes move objects of every size") {
  expect_every_rank_exits("ok", 0);
}

TEST_CASE("a rank that dies inside allgather_object fails the others with "
          "a lost peer") {
  auto codes = run_processes(3, "die");
  REQUIRE(codes.size() == 3);
  CHECK(codes[2] == 7); // the rank died where the hook put it
  CHECK(codes[0] == 3); // peer_lost naming allgather_object
  CHECK(codes[1] == 3);
}

TEST_CASE("a rank that runs out of memory inside allgather_object fails "
          "with out_of_memory and its peers learn at once") {
  // Before: std::bad_alloc left that rank as no collective_error, and its
  // peers waited in the payload exchange until their 20 s timeout.
  if (!address_space_limits_work) {
    MESSAGE("skipped under a sanitizer");
    return;
  }
  expect_every_rank_exits("oom", 3);
}

TEST_CASE("a rank that cannot hold the object it received fails every rank "
          "with out_of_memory and the group stays usable") {
  // Before: every rank reported mismatch, as if the ranks disagreed on
  // the type or the bytes were corrupted.
  if (!address_space_limits_work) {
    MESSAGE("skipped under a sanitizer");
    return;
  }
  expect_every_rank_exits("oom-read", 3);
}

TEST_CASE("caf::message objects move between 3 processes with their own "
          "registries and a type one registry lacks fails every rank") {
  expect_every_rank_exits("msg", 3);
}

TEST_CASE("actor handles between processes fail every rank with mismatch "
          "instead of naming an actor of the reader's own process") {
  // Before: without a middleman every process's node is "invalid-node", so
  // CAF read another process's handle as the reader's own actor with the
  // same number, and allgather_object succeeded with the wrong actors.
  expect_every_rank_exits("actors", 3);
}
