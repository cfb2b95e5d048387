// Command line of caf_collective_perf: nccl-tests' flags and meanings
// (-b -e -f -n -w -c -d -o -r) plus the paths and the rank layout.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "caf_collective/dtype.hpp"
#include "caf_collective/options.hpp"
#include "caf_collective/reduce_op.hpp"

#include "bench_op.hpp"
#include "copy_model.hpp"

namespace caf_collective::bench {

struct perf_options {
  std::vector<bench_op> ops{bench_op::allreduce};
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  double step_factor = 2.0;
  int iters = 20;
  int warmup_iters = 5;
  /// Timed series per size and path; the fastest (lowest mean) is kept,
  /// which filters noise from other load on a shared machine.
  int repeat = 1;
  /// Report the median iteration instead of the mean (nccl-tests: mean);
  /// robust against scheduler stalls on a loaded machine.
  bool median_time = false;
  bool check = true;
  dtype type = dtype::float32;
  reduce_op redop = reduce_op::sum;
  int root = 0;
  int ranks = 2;
  /// Backend of the direct and driver paths: gloo, shm or auto.
  std::string backend = "gloo";
  std::vector<std::string> paths{"raw-gloo", "raw-gloo-best", "direct"};
  /// Caps the timed (and warm-up) iterations of a size at iter_budget /
  /// size, at least 2 timed and 1 warm-up (0: no cap, always -n / -w).
  size_t iter_budget = 0;
  /// Measures the machine's copy bandwidth before the sweep and prints
  /// busbw as a fraction of the copy model (copy_model.hpp).
  bool copy_model = true;
  /// The measured copy bandwidth (filled before the sweep when copy_model).
  copy_bandwidth copy;
  bool procs = false;
  /// Also print one row per algorithm of multi-algorithm paths.
  bool show_variants = false;
  /// Allreduce algorithm the direct path asks for (automatic: ours).
  allreduce_algorithm direct_algorithm = allreduce_algorithm::automatic;
  /// Gives raw Gloo our groups' 1 MiB per-pair warm-up (like with like).
  bool raw_warm_up = true;
  /// CAF scheduler of the driver path's actor system: "stealing" (CAF's
  /// default), "sharing" (one shared queue; wakes idle workers at once) or
  /// "stealing-sleep" (idle workers sleep at once: sleep_idle_workers).
  std::string caf_scheduler = "stealing";
  /// Requests the driver-overlap path keeps in flight.
  int window = 4;
  std::string csv_file;
  std::string plot_file;
  /// Ops of --op that this run cannot measure, each with why (sendrecv at
  /// 1 rank; no size of the sweep splits among the ranks): the parser
  /// leaves them out of `ops` and the tools print these before the sweep.
  std::vector<std::string> notes;
};

/// The sizes of one sweep: min, min * f, ... up to max (nccl-tests' -f).
std::vector<size_t> sweep_sizes(const perf_options& opts);

/// The sizes in bytes `op` runs at: the sweep's sizes rounded down to
/// whole elements, and for blocked ops to a multiple of the rank count,
/// without zeros and repeats ({0} for barrier).
std::vector<size_t> op_sizes(const perf_options& opts, bench_op op);

/// Timed and warm-up iterations at a size of `bytes` (--iter-budget).
int iters_at(const perf_options& opts, size_t bytes);
int warmup_iters_at(const perf_options& opts, size_t bytes);

/// Parses argv; prints usage or the problem to stderr and returns nullopt
/// when the program should exit (with status `exit_code`: 0 after --help,
/// 2 for a flag it refuses or a run that would measure nothing). Opens
/// (creates) --csv FILE at once, so that an unwritable file fails before
/// the sweep, not after it.
std::optional<perf_options> parse_perf_options(int argc, char** argv,
                                               int& exit_code);

} // namespace caf_collective::bench
