// Our backend through the imperative API (the blocking calls on a group
// the member initialized): what an application on one member runs.
#pragma once

#include "caf_collective/rendezvous.hpp"

#include "bench_path.hpp"

namespace caf_collective::bench {

/// Joins the group "bench-direct" (blocks until every rank joined). The
/// calling thread must hold a member_scope for as long as the path lives.
bench_path_ptr make_direct_path(int rank, int ranks,
                                rendezvous_store_ptr store);

} // namespace caf_collective::bench
