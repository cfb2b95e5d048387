// Our backend through the imperative API (the blocking calls on a group
// the member initialized): what an application on one member runs; or the
// same ops as persistent ops, prepared once and run many times.
#pragma once

#include <string>

#include "caf_collective/options.hpp"
#include "caf_collective/rendezvous.hpp"

#include "bench_path.hpp"

namespace caf_collective::bench {

/// Joins the group "bench-<label>" on `backend` (gloo, shm or auto; blocks
/// until every rank joined); its rows are labelled `label`. The calling
/// thread must hold a member_scope for as long as the path lives.
/// `algorithm` is what its allreduce calls ask for. `persistent`: each op
/// is prepared once per buffers (group::prepare_*) and run from then on.
bench_path_ptr make_direct_path(const std::string& label,
                                const std::string& backend, int rank, int ranks,
                                rendezvous_store_ptr store,
                                allreduce_algorithm algorithm,
                                bool persistent = false);

} // namespace caf_collective::bench
