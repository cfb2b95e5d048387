// One way of running a collective (raw Gloo, our direct API, the driver),
// as one rank sees it. Every rank owns one object per path; the runner
// calls the same methods in the same order on every rank.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "caf_collective/dtype.hpp"
#include "caf_collective/reduce_op.hpp"

#include "bench_op.hpp"

namespace caf_collective::bench {

/// One call of a collective: the buffers of this rank and what to do.
struct op_args {
  bench_op op = bench_op::allreduce;
  dtype type = dtype::float32;
  reduce_op redop = reduce_op::sum;
  int root = 0;
  int rank = 0;
  int ranks = 1;
  /// Elements of nccl-tests' size (the largest buffer of the op).
  size_t total = 0;
  void* in = nullptr;
  void* out = nullptr;
  bool in_place() const noexcept { return in == out; }
  size_t block() const noexcept { return total / static_cast<size_t>(ranks); }
};

class bench_path {
 public:
  virtual ~bench_path();

  virtual std::string_view name() const = 0;

  /// Whether this path implements the op (in place: in == out).
  virtual bool supports(bench_op op, bool in_place) const = 0;

  /// Number of algorithms tried per size; the report keeps the fastest.
  virtual int variants(bench_op) const { return 1; }

  /// Name of a variant, printed beside its row ("" for single variants).
  virtual std::string variant_name(bench_op, int) const { return {}; }

  /// Builds per-size state (e.g. a legacy Gloo algorithm) outside the
  /// timed loop. Called on every rank before the first run() of a size.
  virtual void prepare(const op_args&, int /*variant*/) {}

  /// Runs ops_per_run() collectives; throws on failure.
  virtual void run(const op_args& args) = 0;

  /// How many ops one run() starts (more than one when they overlap); the
  /// time of a run is divided by it.
  virtual int ops_per_run() const { return 1; }

  /// Runs one collective on known inputs and returns the number of wrong
  /// result elements this rank saw (default: on this rank's buffers).
  virtual size_t check(const op_args& args);

  /// After the timed runs that followed check(): the wrong elements of what
  /// the last one left in this rank's output. Out-of-place ops only (their
  /// inputs are still check()'s); 0 where nothing is left to look at.
  virtual size_t check_timed(const op_args& args);

  /// Drops what prepare built.
  virtual void finish() {}
};

using bench_path_ptr = std::unique_ptr<bench_path>;

} // namespace caf_collective::bench
