// Shared helpers of the collective-layer tests: N ranks as threads of one
// process, typed test data whose exact results are known, and a reference
// the tests compute themselves.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <filesystem>
#include <unistd.h>

#include <caf_collective/all.hpp>

namespace test {

namespace col = caf_collective;

/// What one rank reports back to the test thread (doctest's assertions are
/// not thread-safe, so ranks collect failures and the test checks them).
struct rank_outcome {
  std::vector<std::string> failures;
  std::string exception;
};

using rank_body = std::function<void(int rank, std::vector<std::string>&)>;

/// Runs `body` in `world` threads, each a member of group `name` (formed
/// before the body runs, destroyed after).
inline std::vector<rank_outcome>
run_ranks(int world, const std::string& name, const rank_body& body,
          std::chrono::milliseconds timeout = std::chrono::seconds{20}) {
  auto store = col::make_in_process_store();
  std::vector<rank_outcome> outcomes(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        col::member_scope scope;
        col::init_options opts;
        opts.store = store;
        opts.timeout = timeout;
        col::init_collective_group(world, rank, "gloo", name, opts);
        body(rank, outcomes[rank].failures);
        col::destroy_collective_group(name);
      } catch (const std::exception& ex) {
        outcomes[rank].exception = ex.what();
      }
    });
  for (auto& t : threads)
    t.join();
  return outcomes;
}

/// Formats a failure message from anything streamable.
template<class... Ts>
std::string describe(const Ts&... xs) {
  std::ostringstream out;
  (out << ... << xs);
  return out.str();
}

// -- 16-bit floats, written independently of the library's conversions -------

inline float half_bits_to_float(uint16_t h) {
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exponent == 0)
    return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

/// Exact encoding of values that half represents exactly (test inputs).
inline uint16_t exact_float_to_half_bits(float value) {
  if (value == 0.0f) return std::signbit(value) ? 0x8000 : 0;
  uint16_t sign = value < 0 ? 0x8000 : 0;
  int exponent = 0;
  float fraction = std::frexp(std::fabs(value), &exponent); // [0.5, 1)
  int biased = exponent + 14;
  auto mantissa = static_cast<uint16_t>(std::ldexp(fraction, 11)) & 0x3ff;
  return sign | static_cast<uint16_t>(biased << 10) | mantissa;
}

inline float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t exact_float_to_bf16_bits(float value) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(value) >> 16);
}

// -- typed buffers -----------------------------------------------------------

/// A host buffer of `count` elements of `type`, read and written as double.
class buffer {
 public:
  buffer(col::dtype type, size_t count)
    : type_(type), count_(count), bytes_(count * col::size_of(type)) {
    // nop
  }

  col::tensor_view view() {
    return col::tensor_view{bytes_.empty() ? nullptr : bytes_.data(), type_,
                            count_};
  }

  size_t size() const { return count_; }

  col::dtype type() const { return type_; }

  void set(size_t i, double value) {
    auto* p = bytes_.data() + i * col::size_of(type_);
    switch (type_) {
      case col::dtype::int8: store<int8_t>(p, value); break;
      case col::dtype::uint8: store<uint8_t>(p, value); break;
      case col::dtype::int32: store<int32_t>(p, value); break;
      case col::dtype::int64: store<int64_t>(p, value); break;
      case col::dtype::float16:
        store_bits(p, exact_float_to_half_bits(static_cast<float>(value)));
        break;
      case col::dtype::bfloat16:
        store_bits(p, exact_float_to_bf16_bits(static_cast<float>(value)));
        break;
      case col::dtype::float32: store<float>(p, value); break;
      case col::dtype::float64: store<double>(p, value); break;
    }
  }

  double get(size_t i) const {
    auto* p = bytes_.data() + i * col::size_of(type_);
    switch (type_) {
      case col::dtype::int8: return load<int8_t>(p);
      case col::dtype::uint8: return load<uint8_t>(p);
      case col::dtype::int32: return load<int32_t>(p);
      case col::dtype::int64: return static_cast<double>(load<int64_t>(p));
      case col::dtype::float16: return half_bits_to_float(load<uint16_t>(p));
      case col::dtype::bfloat16: return bf16_bits_to_float(load<uint16_t>(p));
      case col::dtype::float32: return load<float>(p);
      case col::dtype::float64: return load<double>(p);
    }
    return 0;
  }

 private:
  template<class T>
  static void store(std::byte* p, double value) {
    // Integers wrap modulo 2^n (C++20 conversion of int64 to a narrower
    // integer), as the library's integer sums and products do.
    T x;
    if constexpr (std::is_integral_v<T>)
      x = static_cast<T>(static_cast<int64_t>(value));
    else
      x = static_cast<T>(value);
    std::memcpy(p, &x, sizeof(T));
  }

  static void store_bits(std::byte* p, uint16_t bits) {
    std::memcpy(p, &bits, sizeof(bits));
  }

  template<class T>
  static T load(const std::byte* p) {
    T x;
    std::memcpy(&x, p, sizeof(T));
    return x;
  }

  col::dtype type_;
  size_t count_;
  std::vector<std::byte> bytes_;
};

// -- inputs and the reference
// --------------------------------------------------

/// Input element i of `rank`, chosen per reduce op so that every result is
/// exact in every dtype (small integers; products of 1s and 2s).
inline double input_value(col::reduce_op op, int rank, size_t i) {
  switch (op) {
    case col::reduce_op::product: return ((rank + i) % 3 == 0) ? 2.0 : 1.0;
    case col::reduce_op::band:
    case col::reduce_op::bor:
    case col::reduce_op::bxor:
      return static_cast<double>((rank * 37 + i * 11) & 0x7f);
    default: return static_cast<double>((rank * 3 + i * 7) % 9);
  }
}

/// Reduction of `input_value(op, r, i)` over ranks 0..world-1, before any
/// rounding to the dtype: exact integer arithmetic in int64.
inline int64_t exact_reduction(col::reduce_op op, int world, size_t i) {
  auto v = [&](int r) { return static_cast<int64_t>(input_value(op, r, i)); };
  int64_t acc = v(0);
  for (int r = 1; r < world; ++r) {
    switch (op) {
      case col::reduce_op::sum:
      case col::reduce_op::avg: acc += v(r); break;
      case col::reduce_op::product: acc *= v(r); break;
      case col::reduce_op::min: acc = std::min(acc, v(r)); break;
      case col::reduce_op::max: acc = std::max(acc, v(r)); break;
      case col::reduce_op::band: acc &= v(r); break;
      case col::reduce_op::bor: acc |= v(r); break;
      case col::reduce_op::bxor: acc ^= v(r); break;
    }
  }
  return acc;
}

/// Checks element i of a reduction result against the reference: exact for
/// every op and dtype, except float avg, which must be the float32 (or
/// float64) quotient, rounded once to the dtype: within half a unit in the
/// last place of a float16 (2^-11 relative) or bfloat16 (2^-8).
inline bool matches_reduction(col::reduce_op op, col::dtype type, int world,
                              size_t i, double got, double& expected) {
  auto exact = exact_reduction(op, world, i);
  if (op != col::reduce_op::avg) {
    buffer wrap{type, 1};
    wrap.set(0, static_cast<double>(exact)); // integer wrap-around
    expected = wrap.get(0);
    return got == expected;
  }
  if (col::is_integral(type)) {
    expected = static_cast<double>(exact / world); // truncation toward zero
    return got == expected;
  }
  if (type == col::dtype::float64) {
    expected = static_cast<double>(exact) / world;
    return got == expected;
  }
  auto quotient = static_cast<float>(exact) / static_cast<float>(world);
  expected = quotient;
  if (type == col::dtype::float32) return static_cast<float>(got) == quotient;
  double tolerance =
    std::fabs(quotient) * (type == col::dtype::float16 ? 0x1p-11 : 0x1p-8);
  return std::fabs(got - quotient) <= tolerance;
}

inline void fill_inputs(buffer& buf, col::reduce_op op, int rank,
                        size_t offset = 0) {
  for (size_t i = 0; i < buf.size(); ++i)
    buf.set(i, input_value(op, rank, offset + i));
}

/// A value unique to (rank, i) that every dtype represents exactly.
inline double tagged_value(col::dtype type, int rank, size_t i) {
  auto span = col::is_integral(type) && col::size_of(type) == 1 ? 16 : 64;
  return static_cast<double>((rank * 7 + static_cast<int>(i % span)) % span);
}

} // namespace test
