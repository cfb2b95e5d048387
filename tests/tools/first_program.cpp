// The README's first program, word for word: its test runs it as 4
// processes through caf_collective_run, as the README shows.
#include <caf_collective/all.hpp>
#include <cstdio>
#include <vector>
namespace col = caf_collective;

int main() {
  // Rank, world size and where the ranks meet come from the launcher
  // (caf_collective_run, mpirun, srun or torchrun).
  col::init_collective_group_from_env("gloo", "workers");
  std::vector<float> grads(1024, 1.0f);
  col::allreduce(col::view_of(grads), "workers"); // every element is now 4
  std::printf("rank %d: grads[0] = %g\n", col::get_rank("workers"), grads[0]);
  col::destroy_collective_group("workers");
}
