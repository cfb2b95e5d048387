// One rank of a multi-process test: joins a group through a file store,
// runs allreduce, allgather and broadcast, checks the results. Exit code 0
// means every result was right.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <caf_collective/all.hpp>

namespace col = caf_collective;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s WORLD RANK STORE_DIR\n", argv[0]);
    return 2;
  }
  int world = std::atoi(argv[1]);
  int rank = std::atoi(argv[2]);
  try {
    col::init_options opts;
    opts.store = col::make_file_store(argv[3]);
    opts.timeout = std::chrono::seconds{30};
    col::init_collective_group(world, rank, "gloo", "procs", opts);
    std::vector<double> xs(4096, rank + 1.0);
    col::allreduce(col::view_of(xs), "procs");
    std::vector<int32_t> mine(3, rank), all(3 * world);
    col::allgather(col::view_of(mine), col::view_of(all), "procs");
    std::vector<int64_t> b(10, rank == 1 ? 99 : 0);
    col::broadcast(col::view_of(b), 1, "procs");
    col::destroy_collective_group("procs");
    bool ok = xs[4095] == world * (world + 1) / 2.0 && b[9] == 99;
    for (int i = 0; i < 3 * world; ++i)
      ok = ok && all[i] == i / 3;
    if (!ok) std::fprintf(stderr, "rank %d: wrong results\n", rank);
    return ok ? 0 : 1;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "rank %d: %s\n", rank, ex.what());
    return 1;
  }
}
