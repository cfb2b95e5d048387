#include "bench_op.hpp"

#include <array>

namespace caf_collective::bench {

namespace {

constexpr std::array<bench_op, 10> ops = {
  bench_op::allreduce, bench_op::reduce,         bench_op::broadcast,
  bench_op::allgather, bench_op::reduce_scatter, bench_op::alltoall,
  bench_op::gather,    bench_op::scatter,        bench_op::sendrecv,
  bench_op::barrier,
};

constexpr std::array<std::string_view, 10> names = {
  "allreduce", "reduce", "broadcast", "allgather", "reduce_scatter",
  "alltoall",  "gather", "scatter",   "sendrecv",  "barrier",
};

// Ops whose per-rank buffer is one block of total / ranks elements.
bool is_blocked(bench_op op) noexcept {
  switch (op) {
    case bench_op::allgather:
    case bench_op::reduce_scatter:
    case bench_op::alltoall:
    case bench_op::gather:
    case bench_op::scatter: return true;
    default: return false;
  }
}

} // namespace

std::span<const bench_op> all_bench_ops() noexcept {
  return ops;
}

std::string_view to_string(bench_op op) noexcept {
  return names[static_cast<size_t>(op)];
}

std::optional<bench_op> parse_bench_op(std::string_view name) noexcept {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return ops[i];
  return std::nullopt;
}

bool is_reduction(bench_op op) noexcept {
  return op == bench_op::allreduce || op == bench_op::reduce ||
         op == bench_op::reduce_scatter;
}

bool has_root(bench_op op) noexcept {
  return op == bench_op::reduce || op == bench_op::broadcast ||
         op == bench_op::gather || op == bench_op::scatter;
}

size_t usable_count(bench_op op, size_t total, int ranks) noexcept {
  if (op == bench_op::barrier) return 0;
  if (!is_blocked(op)) return total;
  auto n = static_cast<size_t>(ranks);
  return total / n * n;
}

buffer_counts counts_of(bench_op op, size_t total, int ranks) noexcept {
  auto block = total / static_cast<size_t>(ranks);
  switch (op) {
    case bench_op::allgather:
    case bench_op::gather: return {block, total};
    case bench_op::reduce_scatter:
    case bench_op::scatter: return {total, block};
    case bench_op::barrier: return {0, 0};
    default: return {total, total};
  }
}

double bus_factor(bench_op op, int ranks) noexcept {
  auto n = static_cast<double>(ranks);
  switch (op) {
    case bench_op::allreduce: return 2.0 * (n - 1) / n;
    case bench_op::allgather:
    case bench_op::reduce_scatter:
    case bench_op::alltoall:
    case bench_op::gather:
    case bench_op::scatter: return (n - 1) / n;
    default: return 1.0;
  }
}

} // namespace caf_collective::bench
