#include "backends/common/reduce_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "vocabulary/half.hpp"

namespace caf_collective::detail {

namespace {

// Integer sums and products wrap around: computed on the unsigned type so
// that overflow is defined behaviour.
template<class T>
T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template<class T>
T wrapping_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Promote to unsigned int at least, so uint8/int8 do not promote to a
    // signed int whose product could overflow.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                 std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

struct op_sum {
  template<class T>
  static T apply(T a, T b) {
    return wrapping_add(a, b);
  }
};
struct op_product {
  template<class T>
  static T apply(T a, T b) {
    return wrapping_mul(a, b);
  }
};
// Floating min and max as IEEE 754-2019's minimum and maximum: a NaN on any
// rank gives NaN (one quiet NaN, whatever the payloads), and -0 is below +0.
// Then the result does not depend on the operands' order: a ring, where
// each rank reduces in its own order, gives every rank the same bits, and
// no rank's NaN is dropped. (std::min and std::max return their first
// operand for a NaN and for +0 against -0.) Written on the bits without
// branches so that the loop still vectorizes: equal operands differ at most
// in the sign of a zero, which OR (min) or AND (max) of the bits settles.
template<class T>
using bits_of = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

template<class T>
T ordered_min(T a, T b) {
  auto x = std::bit_cast<bits_of<T>>(a);
  auto y = std::bit_cast<bits_of<T>>(b);
  auto result = a < b ? x : y;
  result = a == b ? (x | y) : result;
  result = (a != a || b != b)
             ? std::bit_cast<bits_of<T>>(std::numeric_limits<T>::quiet_NaN())
             : result;
  return std::bit_cast<T>(result);
}

template<class T>
T ordered_max(T a, T b) {
  auto x = std::bit_cast<bits_of<T>>(a);
  auto y = std::bit_cast<bits_of<T>>(b);
  auto result = a > b ? x : y;
  result = a == b ? (x & y) : result;
  result = (a != a || b != b)
             ? std::bit_cast<bits_of<T>>(std::numeric_limits<T>::quiet_NaN())
             : result;
  return std::bit_cast<T>(result);
}

struct op_min {
  template<class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return ordered_min(a, b);
    else
      return std::min(a, b);
  }
};
struct op_max {
  template<class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return ordered_max(a, b);
    else
      return std::max(a, b);
  }
};
struct op_band {
  template<class T>
  static T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};
struct op_bor {
  template<class T>
  static T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};
struct op_bxor {
  template<class T>
  static T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

template<class T, class Op>
void kernel(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<T*>(c);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i)
    out[i] = Op::apply(x[i], y[i]);
}

template<class T, class Op>
void legacy_kernel(T* x, const T* y, size_t n) {
  for (size_t i = 0; i < n; ++i)
    x[i] = Op::apply(x[i], y[i]);
}

template<class T, template<class, class> class Make, class Result>
Result pick(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg: return Make<T, op_sum>::get();
    case reduce_op::product: return Make<T, op_product>::get();
    case reduce_op::min: return Make<T, op_min>::get();
    case reduce_op::max: return Make<T, op_max>::get();
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case reduce_op::band: return Make<T, op_band>::get();
      case reduce_op::bor: return Make<T, op_bor>::get();
      case reduce_op::bxor: return Make<T, op_bxor>::get();
      default: break;
    }
  }
  return nullptr;
}

template<class T, class Op>
struct make_kernel {
  static reduce_fn get() { return &kernel<T, Op>; }
};

template<class T, class Op>
struct make_legacy_kernel {
  static legacy_fn<T> get() { return &legacy_kernel<T, Op>; }
};

template<class From, class To>
void convert_loop(const void* src, void* dst, size_t n) {
  auto* in = static_cast<const From*>(src);
  auto* out = static_cast<To*>(dst);
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<To>(in[i]);
}

} // namespace

dtype carrier_of(dtype type, reduce_op op) noexcept {
  switch (type) {
    case dtype::float16:
    case dtype::bfloat16: return dtype::float32;
    case dtype::int8:
    case dtype::uint8:
    case dtype::int32: return op == reduce_op::avg ? dtype::int64 : type;
    default: return type;
  }
}

reduce_fn kernel_of(dtype carrier, reduce_op op) noexcept {
  return visit_carrier(carrier, [op](auto tag) {
    return pick<decltype(tag), make_kernel, reduce_fn>(op);
  });
}

template<class T>
legacy_fn<T> legacy_kernel_of(reduce_op op) noexcept {
  return pick<T, make_legacy_kernel, legacy_fn<T>>(op);
}

template legacy_fn<int8_t> legacy_kernel_of<int8_t>(reduce_op) noexcept;
template legacy_fn<uint8_t> legacy_kernel_of<uint8_t>(reduce_op) noexcept;
template legacy_fn<int32_t> legacy_kernel_of<int32_t>(reduce_op) noexcept;
template legacy_fn<int64_t> legacy_kernel_of<int64_t>(reduce_op) noexcept;
template legacy_fn<float> legacy_kernel_of<float>(reduce_op) noexcept;
template legacy_fn<double> legacy_kernel_of<double>(reduce_op) noexcept;

void convert(const void* src, dtype from, void* dst, dtype to, size_t n) {
  auto* in16 = static_cast<const uint16_t*>(src);
  auto* out16 = static_cast<uint16_t*>(dst);
  auto* inf = static_cast<const float*>(src);
  auto* outf = static_cast<float*>(dst);
  if (from == dtype::float16 && to == dtype::float32) {
    for (size_t i = 0; i < n; ++i)
      outf[i] = half_to_float(in16[i]);
  } else if (from == dtype::bfloat16 && to == dtype::float32) {
    for (size_t i = 0; i < n; ++i)
      outf[i] = bfloat16_to_float(in16[i]);
  } else if (from == dtype::float32 && to == dtype::float16) {
    for (size_t i = 0; i < n; ++i)
      out16[i] = float_to_half(inf[i]);
  } else if (from == dtype::float32 && to == dtype::bfloat16) {
    for (size_t i = 0; i < n; ++i)
      out16[i] = float_to_bfloat16(inf[i]);
  } else if (to == dtype::int64) {
    visit_carrier(from, [&](auto tag) {
      convert_loop<decltype(tag), int64_t>(src, dst, n);
    });
  } else if (from == dtype::int64) {
    visit_carrier(
      to, [&](auto tag) { convert_loop<int64_t, decltype(tag)>(src, dst, n); });
  }
}

void divide(void* data, dtype carrier, size_t n, int divisor) {
  visit_carrier(carrier, [&](auto tag) {
    using T = decltype(tag);
    auto* xs = static_cast<T*>(data);
    for (size_t i = 0; i < n; ++i)
      xs[i] = static_cast<T>(xs[i] / static_cast<T>(divisor));
  });
}

void split_for_avg(const int64_t* x, int64_t* q, int64_t* r, size_t n, int d) {
  for (size_t i = 0; i < n; ++i) {
    auto value = x[i];
    r[i] = value % d;
    q[i] = value / d;
  }
}

void join_avg(const int64_t* q, const int64_t* r, int64_t* out, size_t n,
              int d) {
  for (size_t i = 0; i < n; ++i) {
    auto sum = static_cast<__int128>(q[i]) * d + r[i];
    out[i] = static_cast<int64_t>(sum / d);
  }
}

} // namespace caf_collective::detail
