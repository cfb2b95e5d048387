#include "data_pattern.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dtype_visit.hpp"

namespace caf_collective::bench {

namespace {

// Distinct per rank and element; < 101 so it fits every dtype.
int64_t movement_value(int rank, size_t i) {
  return static_cast<int64_t>((static_cast<size_t>(rank) * 13 + i * 7) % 101);
}

// Ranks whose reduction values may differ from 1 under a floating-point
// product: the partial products of any order then stay within
// 2^-64 .. 2^64, powers of two that float32 (2^-126 .. 2^127) holds
// exactly.
constexpr int scaled_ranks = 64;

// Mixed from rank and element so that no rank count makes every element's
// reduction alike: with (rank + i) % 5, 5 or 10 ranks summed to 15 or 30
// everywhere, and a misplaced block of the result still passed the check.
uint32_t mix(int rank, size_t i) {
  auto mixed = (static_cast<uint32_t>(rank) + 1) * 2654435761u ^
               (static_cast<uint32_t>(i) + 1) * 40503u;
  return mixed >> 7;
}

// The input of `rank` at element i of a reduction by `op` in T. Sums, min
// and max take 1 to 5: sums of the tool's at most 1024 ranks stay far
// below float32's 2^24, so every partial sum is exact. A floating-point
// product takes 1/2, 1 or 2 (1 from rank scaled_ranks on), so every partial
// product is an exact power of two: products of 1 to 5 outgrow float32's
// 24-bit mantissa (5^11 does), Gloo then rounds in another order than we
// do, and 13 ranks already reported false failures. Integer products wrap
// modulo 2^bits alike in any order, so they keep 1 to 5.
template<class T>
T reduction_value(reduce_op op, int rank, size_t i) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == reduce_op::product) {
      if (rank >= scaled_ranks) return T{1};
      return static_cast<T>(
        std::ldexp(1.0, static_cast<int>(mix(rank, i) % 3) - 1));
    }
  }
  return static_cast<T>(1 + mix(rank, i) % 5);
}

// The reduction of element i over all ranks, folded in a wide type and
// narrowed once: integer wrap-around matches Gloo's element-wise kernels.
template<class T>
T reduced(reduce_op op, int ranks, size_t i) {
  using wide = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  auto acc = static_cast<wide>(reduction_value<T>(op, 0, i));
  for (int r = 1; r < ranks; ++r) {
    auto x = static_cast<wide>(reduction_value<T>(op, r, i));
    switch (op) {
      case reduce_op::product: acc *= x; break;
      case reduce_op::min: acc = std::min(acc, x); break;
      case reduce_op::max: acc = std::max(acc, x); break;
      default: acc += x; break;
    }
  }
  return static_cast<T>(acc);
}

template<class T>
void fill(const op_args& a, const buffer_counts& n) {
  auto* in = static_cast<T*>(a.in);
  auto block = a.block();
  for (size_t i = 0; i < n.in; ++i) {
    if (is_reduction(a.op)) {
      in[i] = reduction_value<T>(a.redop, a.rank, i);
      continue;
    }
    int64_t v = 0;
    if (a.op == bench_op::broadcast)
      v = a.rank == a.root ? movement_value(a.root, i) : 0;
    else if (a.op == bench_op::allgather || a.op == bench_op::gather)
      v = movement_value(a.rank, i % std::max<size_t>(block, 1));
    else
      v = movement_value(a.rank, i);
    in[i] = static_cast<T>(v);
  }
}

template<class T>
T expected(const op_args& a, size_t i) {
  auto block = std::max<size_t>(a.block(), 1);
  switch (a.op) {
    case bench_op::allreduce:
    case bench_op::reduce: return reduced<T>(a.redop, a.ranks, i);
    case bench_op::reduce_scatter:
      return reduced<T>(a.redop, a.ranks, a.rank * block + i);
    case bench_op::broadcast: return static_cast<T>(movement_value(a.root, i));
    case bench_op::allgather:
    case bench_op::gather:
      return static_cast<T>(
        movement_value(static_cast<int>(i / block), i % block));
    case bench_op::alltoall:
      return static_cast<T>(movement_value(static_cast<int>(i / block),
                                           a.rank * block + i % block));
    case bench_op::scatter:
      return static_cast<T>(movement_value(a.root, a.rank * block + i));
    case bench_op::sendrecv:
      return static_cast<T>(
        movement_value((a.rank + a.ranks - 1) % a.ranks, i));
    default: return T{};
  }
}

// Only the root's output is defined for reduce and gather.
bool output_defined(const op_args& a) {
  if (a.op == bench_op::reduce || a.op == bench_op::gather)
    return a.rank == a.root;
  return a.op != bench_op::barrier;
}

} // namespace

void fill_inputs(const op_args& args) {
  poison_output(args);
  auto n = counts_of(args.op, args.total, args.ranks);
  visit_dtype(args.type, [&](auto tag) { fill<decltype(tag)>(args, n); });
}

void poison_output(const op_args& args) {
  if (args.in_place() || args.op == bench_op::barrier) return;
  auto n = counts_of(args.op, args.total, args.ranks);
  // 0xA5 in every byte: a tiny negative float, a negative integer (checked
  // results are positive unless integer sums wrap) and 165 in uint8 (data
  // movement values are below 101): an element no op wrote stays wrong
  // but for such rare coincidences.
  std::memset(args.out, 0xA5, n.out * size_of(args.type));
}

size_t count_wrong(const op_args& args) {
  if (!output_defined(args)) return 0;
  auto n = counts_of(args.op, args.total, args.ranks);
  return visit_dtype(args.type, [&](auto tag) {
    using T = decltype(tag);
    auto* out = static_cast<const T*>(args.out);
    size_t wrong = 0;
    for (size_t i = 0; i < n.out; ++i)
      if (out[i] != expected<T>(args, i)) ++wrong;
    return wrong;
  });
}

} // namespace caf_collective::bench
