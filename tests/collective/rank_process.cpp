// One rank of a multi-process test: joins a Gloo group through a file store,
// runs allreduce, allgather and broadcast, checks the results and exits 0
// (all right), 4 (the group's formation timed out naming the ranks that
// never joined) or 1 (wrong result or any other error, printed to stderr).
//
// Usage: collective_rank_process <world size> <rank> <store dir> [timeout ms]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>

namespace col = caf_collective;

namespace {

int failures = 0;

void expect(bool cond, const std::string& what, int rank) {
  if (!cond) {
    std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
    ++failures;
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr,
                 "usage: %s <world size> <rank> <store dir> [timeout ms]\n",
                 argv[0]);
    return 2;
  }
  int world = std::atoi(argv[1]);
  int rank = std::atoi(argv[2]);
  try {
    col::init_options opts;
    opts.store = col::make_file_store(argv[3]);
    opts.timeout =
      std::chrono::milliseconds{argc == 5 ? std::atol(argv[4]) : 60000};
    col::init_collective_group(world, rank, "gloo", "procs", opts);
    expect(col::get_rank("procs") == rank, "get_rank", rank);
    expect(col::get_collective_group_size("procs") == world,
           "get_collective_group_size", rank);
    // allreduce: sum of (rank + 1) * (i + 1) over ranks, exact in doubles.
    constexpr size_t n = 70001;
    std::vector<double> xs(n);
    for (size_t i = 0; i < n; ++i)
      xs[i] = static_cast<double>(rank + 1) * static_cast<double>(i + 1);
    col::allreduce(col::view_of(xs), "procs");
    double ranks_sum = world * (world + 1) / 2.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i)
      if (xs[i] != ranks_sum * static_cast<double>(i + 1)) ++bad;
    expect(bad == 0, "allreduce: " + std::to_string(bad) + " wrong", rank);
    // allgather: every rank contributes {rank, rank * 100, -rank}.
    std::vector<int32_t> mine{rank, rank * 100, -rank};
    std::vector<int32_t> all(3 * static_cast<size_t>(world), -7);
    col::allgather(col::view_of(mine), col::view_of(all), "procs");
    for (int r = 0; r < world; ++r)
      expect(all[3 * r] == r && all[3 * r + 1] == r * 100 &&
               all[3 * r + 2] == -r,
             "allgather block " + std::to_string(r), rank);
    // broadcast from the last rank.
    std::vector<int64_t> b(1000, rank == world - 1 ? 0 : -1);
    if (rank == world - 1)
      for (size_t i = 0; i < b.size(); ++i)
        b[i] = int64_t(i) * 3 + 1;
    col::broadcast(col::view_of(b), world - 1, "procs");
    for (size_t i = 0; i < b.size(); ++i)
      if (b[i] != int64_t(i) * 3 + 1) {
        expect(false, "broadcast element " + std::to_string(i), rank);
        break;
      }
    col::barrier("procs");
    col::destroy_collective_group("procs");
  } catch (const col::collective_error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    bool never_joined =
      e.code() == col::errc::timeout &&
      std::string{e.what()}.find("never joined") != std::string::npos;
    return never_joined ? 4 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
