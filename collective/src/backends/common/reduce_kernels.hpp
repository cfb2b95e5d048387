// Elementwise reduction kernels for every (carrier type, reduce op), and the
// dtype conversions around them.
//
// Nomenclature: the "carrier" is the type a reduction runs in. It is the
// tensor's own dtype, except float16/bfloat16 (reduced in float32 and
// rounded once at the end) and avg on 8/32-bit integers (summed exactly in
// int64, then divided). Integer sums wrap around like unsigned arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "caf_collective/dtype.hpp"
#include "caf_collective/reduce_op.hpp"
#include "caf_collective/tensor.hpp"

namespace caf_collective::detail {

/// c[i] = a[i] op b[i]; `c` may alias `a` or `b`. The signature of Gloo's
/// options-API reduce function.
using reduce_fn = void (*)(void* c, const void* a, const void* b, size_t n);

/// The type a reduction of `type` with `op` runs in.
dtype carrier_of(dtype type, reduce_op op) noexcept;

/// The kernel for `op` on `carrier` (avg maps to sum). Null if undefined.
reduce_fn kernel_of(dtype carrier, reduce_op op) noexcept;

/// Converts `n` elements from `from` to `to` (carrier widening and
/// narrowing: f16/bf16 <-> f32, int8/uint8/int32 <-> int64).
void convert(const void* src, dtype from, void* dst, dtype to, size_t n);

/// Divides `n` carrier elements by `divisor` in place (the end of avg):
/// C++ integer division (truncation toward zero) for integers.
void divide(void* data, dtype carrier, size_t n, int divisor);

/// int64 avg, exactly. The sum of the ranks' int64 values may not fit in
/// int64, so each value splits into x = d * q + r (q = x / d, r = x % d,
/// d the world size): the sums of q cannot overflow (|q| <= INT64_MAX / d)
/// and the sums of r stay below d * d. Both are summed across ranks (two
/// passes of an ordinary int64 sum), then join_avg forms (d * Q + R) / d in
/// 128 bits, truncated toward zero like every integer avg. `x` and `q` may
/// be the same buffer.
void split_for_avg(const int64_t* x, int64_t* q, int64_t* r, size_t n, int d);
void join_avg(const int64_t* q, const int64_t* r, int64_t* out, size_t n,
              int d);

/// Whether an avg on `type` needs the split above.
constexpr bool needs_split_avg(dtype type, reduce_op op) noexcept {
  return type == dtype::int64 && op == reduce_op::avg;
}

/// Invokes `fn(T{})` with the C++ type of a carrier dtype (not for
/// float16/bfloat16, which are never carriers).
template<class Fn>
decltype(auto) visit_carrier(dtype carrier, Fn&& fn) {
  switch (carrier) {
    case dtype::int8: return fn(int8_t{});
    case dtype::uint8: return fn(uint8_t{});
    case dtype::int32: return fn(int32_t{});
    case dtype::int64: return fn(int64_t{});
    case dtype::float64: return fn(double{});
    default: return fn(float{});
  }
}

/// Kernels as Gloo's legacy algorithms want them: x[i] = x[i] op y[i].
template<class T>
using legacy_fn = void (*)(T* x, const T* y, size_t n);

template<class T>
legacy_fn<T> legacy_kernel_of(reduce_op op) noexcept;

} // namespace caf_collective::detail
