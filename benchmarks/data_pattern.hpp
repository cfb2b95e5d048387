// Inputs whose exact results are known, and the check of the results.
// Reductions use values that keep every result exact in any order of
// combining (data_pattern.cpp says how); data movement uses values that
// differ per rank and per element.
#pragma once

#include <cstddef>

#include "bench_path.hpp"

namespace caf_collective::bench {

/// Fills this rank's input and poisons its output.
void fill_inputs(const op_args& args);

/// Overwrites this rank's output with a pattern no op writes, so that a
/// later count_wrong sees only what ran since. Out-of-place ops only: an
/// in-place op's output is its input (nothing done for those, nor for
/// barrier).
void poison_output(const op_args& args);

/// Number of wrong elements in this rank's output.
size_t count_wrong(const op_args& args);

} // namespace caf_collective::bench
