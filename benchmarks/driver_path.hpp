// The actor layer: a client asks the driver for an op on object-store refs,
// the members run it, the driver answers with the result refs. The driver,
// the members (one per rank) and the client live in rank 0's process; the
// other ranks only take part in the runner's barriers.
#pragma once

#include "bench_path.hpp"

namespace caf_collective::bench {

/// Whether this build has the actor layer (otherwise the driver path is
/// reported as not available).
bool driver_path_available() noexcept;

/// Spawns the driver and `ranks` members on rank 0 (in an actor system
/// with the CAF scheduler `scheduler`, see caf_scheduler.hpp), forms
/// their group on `backend` and waits until it formed; a no-op object on
/// the other ranks. With `window` > 1 each run keeps that many requests in
/// flight (path "driver-overlap"), as a client that overlaps its ops
/// would: the driver numbers them and the members queue them on their
/// lanes in that order.
bench_path_ptr make_driver_path(int rank, int ranks,
                                const std::string& scheduler,
                                const std::string& backend, int window);

} // namespace caf_collective::bench
