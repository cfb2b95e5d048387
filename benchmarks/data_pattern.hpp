// Inputs whose exact results are known, and the check of the results.
// Reductions use 1 + (rank + i) % 5 so sums and products of a few ranks
// stay exact in every dtype (integers wrap the same way in Gloo and here);
// data movement uses values that differ per rank and per element.
#pragma once

#include <cstddef>

#include "bench_path.hpp"

namespace caf_collective::bench {

/// Fills this rank's input and poisons its output.
void fill_inputs(const op_args& args);

/// Number of wrong elements in this rank's output.
size_t count_wrong(const op_args& args);

} // namespace caf_collective::bench
