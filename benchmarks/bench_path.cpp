#include "bench_path.hpp"

namespace caf_collective::bench {

bench_path::~bench_path() = default;

} // namespace caf_collective::bench
