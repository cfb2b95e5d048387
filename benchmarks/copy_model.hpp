// The machine's copy bandwidth, measured in the same run as the
// collectives, and the copy model of busbw derived from it.
//
// Model: in nccl-tests' terms every rank moves busbw x time bytes over its
// "bus" (allreduce: 2(n-1)/n of the size, allgather, reduce_scatter and
// alltoall: (n-1)/n, broadcast: the size). Through memory, each of those
// bytes costs at least one copy (read it where a peer left it, write it
// where it belongs), done by the rank's own core. k = min(n, cores) cores
// (at least 2) copy at most C_k bytes per second together, so
//
//   busbw <= C_k / n
//
// (2 ranks: the copy bandwidth of one thread while another copies too).
// A bound, not a prediction: a reduction also reads its own input, and a
// staged transfer (copy in, copy out) costs two copies per byte.
#pragma once

#include <cstddef>

namespace caf_collective::bench {

struct copy_bandwidth {
  /// Threads copying at once, each its own buffer of `bytes`.
  int threads = 0;
  size_t bytes = 0;
  int reps = 0;
  /// GB/s of payload copied by all threads together (the best repetition).
  double total_gbs = 0;

  /// The copy model's bound on busbw for `ranks` ranks (0 when unknown).
  double model_busbw(int ranks) const noexcept {
    return ranks > 1 && total_gbs > 0 ? total_gbs / ranks : 0.0;
  }

  bool valid() const noexcept { return total_gbs > 0; }
};

/// Threads the copy measurement of `ranks` ranks uses: min(ranks, cores),
/// at least 2.
int copy_threads_for(int ranks) noexcept;

/// Copies `bytes` from one buffer into another on each of `threads`
/// threads at once, `reps` times (buffers allocated and touched first),
/// and keeps the best aggregate bandwidth. Joins its threads before it
/// returns (safe to fork afterwards).
copy_bandwidth measure_copy_bandwidth(int threads,
                                      size_t bytes = size_t{64} << 20,
                                      int reps = 10);

} // namespace caf_collective::bench
