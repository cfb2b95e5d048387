// One rank started by a launcher (torchrun-, Slurm- or mpirun-style
// environment, or caf_collective_run): forms a group from the environment
// alone, checks an allreduce and an allgather of the local ranks, prints
// one line and exits 0; 1 on a wrong result or an error (on stderr).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>
#include <caf_collective/launch.hpp>

namespace col = caf_collective;

int main() {
  auto info = col::read_launch_environment();
  if (!info) {
    std::fprintf(stderr, "%s\n", col::render(info.error()).c_str());
    return 1;
  }
  try {
    col::init_collective_group_from_env("gloo", "env");
    int rank = col::get_rank("env");
    int world = col::get_collective_group_size("env");
    if (rank != info->rank || world != info->world_size) {
      std::fprintf(stderr, "group says rank %d of %d, environment %d of %d\n",
                   rank, world, info->rank, info->world_size);
      return 1;
    }
    std::vector<int64_t> xs(4096, rank + 1);
    col::allreduce(col::view_of(xs), "env");
    for (auto x : xs)
      if (x != int64_t{world} * (world + 1) / 2) {
        std::fprintf(stderr, "rank %d: allreduce gave %lld\n", rank,
                     static_cast<long long>(x));
        return 1;
      }
    // Local ranks as the test expects them ("0,1,0,1" for two "hosts" of
    // two ranks), else one host: local rank == rank.
    std::vector<int32_t> expected;
    if (const char* e = std::getenv("CAF_COLLECTIVE_TEST_LOCAL_RANKS")) {
      std::istringstream list{e};
      for (std::string item; std::getline(list, item, ',');)
        expected.push_back(std::stoi(item));
    } else {
      for (int r = 0; r < world; ++r)
        expected.push_back(r);
    }
    std::vector<int32_t> mine{info->local_rank};
    std::vector<int32_t> all(static_cast<size_t>(world), -7);
    col::allgather(col::view_of(mine), col::view_of(all), "env");
    for (int r = 0; r < world; ++r)
      if (all[r] != expected.at(static_cast<size_t>(r))) {
        std::fprintf(stderr, "rank %d: local rank of rank %d is %d\n", rank, r,
                     all[r]);
        return 1;
      }
    col::destroy_collective_group("env");
    // A group over the same store whose rank 0 is the launcher's last
    // rank: the store's server stays with the launcher's rank 0 (a second
    // process serving it failed with "address in use").
    int reversed = world - 1 - rank;
    col::init_options opts;
    opts.timeout = std::chrono::seconds{30};
    col::init_collective_group(world, reversed, "gloo", "reversed", opts);
    std::vector<int64_t> ones(16, 1);
    col::allreduce(col::view_of(ones), "reversed");
    if (ones[0] != world) {
      std::fprintf(stderr,
                   "rank %d: allreduce of the reversed group gave %lld\n", rank,
                   static_cast<long long>(ones[0]));
      return 1;
    }
    col::destroy_collective_group("reversed");
    std::printf("rank %d of %d (%s) ok\n", rank, world, info->launcher.c_str());
    return 0;
  } catch (const col::collective_error& ex) {
    std::fprintf(stderr, "rank %d: %s\n", info->rank, ex.what());
    return 1;
  }
}
