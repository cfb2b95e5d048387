#include "data_pattern.hpp"

#include <algorithm>
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

// 1 to 5 (products of many ranks stay exact in float32), mixed from rank
// and element so that no rank count makes every element's reduction alike:
// with (rank + i) % 5, 5 or 10 ranks summed to 15 or 30 everywhere, and a
// misplaced block of the result still passed the check.
int64_t reduction_value(int rank, size_t i) {
  auto mixed = (static_cast<uint32_t>(rank) + 1) * 2654435761u ^
               (static_cast<uint32_t>(i) + 1) * 40503u;
  return 1 + static_cast<int64_t>((mixed >> 7) % 5);
}

// The reduction of element i over all ranks, folded in a wide type and
// narrowed once: integer wrap-around matches Gloo's element-wise kernels.
template<class T>
T reduced(reduce_op op, int ranks, size_t i) {
  using wide = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  wide acc = static_cast<wide>(reduction_value(0, i));
  for (int r = 1; r < ranks; ++r) {
    auto x = static_cast<wide>(reduction_value(r, i));
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
    int64_t v = 0;
    if (is_reduction(a.op))
      v = reduction_value(a.rank, i);
    else if (a.op == bench_op::broadcast)
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
  auto n = counts_of(args.op, args.total, args.ranks);
  visit_dtype(args.type, [&](auto tag) {
    using T = decltype(tag);
    if (!args.in_place()) std::memset(args.out, 0xA5, n.out * sizeof(T));
    fill<T>(args, n);
  });
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
