// The baseline: Gloo called directly, no code of ours in the loop.
#pragma once

#include <memory>

#include <gloo/context.h>

#include "bench_path.hpp"

namespace caf_collective::bench {

/// raw-gloo: Gloo's options-API call for each op with its default
/// algorithm (what a Gloo user writes first).
bench_path_ptr make_raw_gloo_path(std::shared_ptr<gloo::Context> ctx);

/// raw-gloo-best: allreduce only, each of Gloo's algorithms called directly
/// (legacy ring, ring_chunked, halving_doubling; options-API ring, bcube);
/// the report keeps the fastest per size.
bench_path_ptr make_raw_gloo_best_path(std::shared_ptr<gloo::Context> ctx);

} // namespace caf_collective::bench
