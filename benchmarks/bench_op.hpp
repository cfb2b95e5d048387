// The collectives the perf tool measures and their nccl-tests metadata:
// buffer shapes and the bus-bandwidth factor of nccl-tests' PERFORMANCE.md.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

namespace caf_collective::bench {

enum class bench_op {
  allreduce,
  reduce,
  broadcast,
  allgather,
  reduce_scatter,
  alltoall,
  gather,
  scatter,
  sendrecv,
  barrier,
};

std::span<const bench_op> all_bench_ops() noexcept;
std::string_view to_string(bench_op op) noexcept;
std::optional<bench_op> parse_bench_op(std::string_view name) noexcept;

/// Whether the op combines values (takes -o) and has a root (takes -r).
bool is_reduction(bench_op op) noexcept;
bool has_root(bench_op op) noexcept;

/// Element counts of the input and output buffers of one rank for a
/// "size" of `total` elements (nccl-tests' size: the largest buffer).
struct buffer_counts {
  size_t in;
  size_t out;
};
buffer_counts counts_of(bench_op op, size_t total, int ranks) noexcept;

/// Rounds `total` down to what the op can split evenly among the ranks.
size_t usable_count(bench_op op, size_t total, int ranks) noexcept;

/// nccl-tests' bus bandwidth factor: busbw = algbw * factor.
double bus_factor(bench_op op, int ranks) noexcept;

} // namespace caf_collective::bench
