// Everything one rank does in a run: connect the paths, sweep the sizes,
// time every path at every size in turn, and (rank 0) report.
#pragma once

#include <memory>

#include <gloo/rendezvous/store.h>

#include "caf_collective/rendezvous.hpp"

#include "perf_options.hpp"

namespace caf_collective::bench {

/// Where the ranks of one run find each other: a Gloo store for the raw
/// paths and the control channel, and our store for the groups.
struct rank_env {
  int rank = 0;
  std::shared_ptr<gloo::rendezvous::Store> gloo_store;
  rendezvous_store_ptr store;
};

/// Runs the whole sweep on this rank. Returns the process exit status:
/// 0, 1 if any result was wrong (on any rank), 2 on a failure.
int run_rank(const perf_options& opts, const rank_env& env);

} // namespace caf_collective::bench
