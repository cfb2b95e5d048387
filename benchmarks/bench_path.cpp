#include "bench_path.hpp"

#include "data_pattern.hpp"

namespace caf_collective::bench {

bench_path::~bench_path() = default;

size_t bench_path::check(const op_args& args) {
  fill_inputs(args);
  run(args);
  return count_wrong(args);
}

size_t bench_path::check_timed(const op_args& args) {
  if (args.in_place() || args.op == bench_op::barrier) return 0;
  return count_wrong(args);
}

} // namespace caf_collective::bench
