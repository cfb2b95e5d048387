// Test support for the collective layer: N ranks as threads of one process,
// deterministic input data per (rank, index, dtype), and a reference
// reducer that the tests compute themselves.
//
// doctest's assertions are not thread-safe, so rank threads never assert:
// they record failures in their own `rank_log`, and the test thread checks
// the logs after joining them (`check_ranks`).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <latch>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

// all.hpp only forward-declares caf::expected (see the report).
#include <caf/expected.hpp>

#include <caf_collective/all.hpp>

namespace test {

namespace col = caf_collective;

// -- float16 / bfloat16 (IEEE binary16 and the upper half of binary32) -------

inline float half_to_float(uint16_t h) {
  int sign = (h >> 15) & 1;
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  float value;
  if (exponent == 0x1f)
    value = mantissa == 0 ? INFINITY : NAN;
  else if (exponent == 0)
    value = std::ldexp(static_cast<float>(mantissa), -24);
  else
    value = std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
  return sign ? -value : value;
}

// Round to nearest, ties to even, by exhaustive arithmetic on the value (not
// bit tricks), so it is an independent check of the library's conversion.
inline uint16_t float_to_half(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (std::isnan(f)) return 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00; // rounds beyond 65504
  // Exponent of the result: subnormals share the step 2^-24.
  int e = a < 0x1p-14 ? -14 : std::ilogb(a);
  double step = std::ldexp(1.0, e - 10);
  double q = a / step;          // exact: a has at most 24 significant bits
  double r = std::nearbyint(q); // default rounding mode: ties to even
  double rounded = r * step;
  // Encode `rounded` (which may have moved up one binade).
  if (rounded == 0) return sign;
  if (rounded < 0x1p-14) return sign | static_cast<uint16_t>(rounded / 0x1p-24);
  int re = std::ilogb(rounded);
  auto mant = static_cast<uint16_t>(rounded / std::ldexp(1.0, re - 10) - 1024);
  return sign | static_cast<uint16_t>((re + 15) << 10) | mant;
}

inline float bfloat16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bfloat16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t bits = std::bit_cast<uint32_t>(f);
  uint32_t upper = bits >> 16;
  uint32_t lower = bits & 0xffff;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1) == 1)) ++upper;
  return static_cast<uint16_t>(upper);
}

// -- element access by dtype --------------------------------------------------

/// Reads element `i` as a double (integers up to 2^53 are exact).
inline double load(col::dtype t, const void* base, size_t i) {
  auto p = static_cast<const char*>(base) + i * col::size_of(t);
  switch (t) {
    case col::dtype::int8: return *reinterpret_cast<const int8_t*>(p);
    case col::dtype::uint8: return *reinterpret_cast<const uint8_t*>(p);
    case col::dtype::int32: return *reinterpret_cast<const int32_t*>(p);
    case col::dtype::int64:
      return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case col::dtype::float16:
      return half_to_float(*reinterpret_cast<const uint16_t*>(p));
    case col::dtype::bfloat16:
      return bfloat16_to_float(*reinterpret_cast<const uint16_t*>(p));
    case col::dtype::float32: return *reinterpret_cast<const float*>(p);
    case col::dtype::float64: return *reinterpret_cast<const double*>(p);
  }
  return 0;
}

/// Stores an integer into an integer element (two's complement wrap).
inline void store_int(col::dtype t, void* base, size_t i, int64_t x) {
  auto p = static_cast<char*>(base) + i * col::size_of(t);
  switch (t) {
    case col::dtype::int8: *reinterpret_cast<int8_t*>(p) = int8_t(x); break;
    case col::dtype::uint8: *reinterpret_cast<uint8_t*>(p) = uint8_t(x); break;
    case col::dtype::int32: *reinterpret_cast<int32_t*>(p) = int32_t(x); break;
    case col::dtype::int64: *reinterpret_cast<int64_t*>(p) = x; break;
    default: throw std::logic_error("store_int on a floating-point dtype");
  }
}

/// Loads an integer element, sign- or zero-extended.
inline int64_t load_int(col::dtype t, const void* base, size_t i) {
  auto p = static_cast<const char*>(base) + i * col::size_of(t);
  switch (t) {
    case col::dtype::int8: return *reinterpret_cast<const int8_t*>(p);
    case col::dtype::uint8: return *reinterpret_cast<const uint8_t*>(p);
    case col::dtype::int32: return *reinterpret_cast<const int32_t*>(p);
    case col::dtype::int64: return *reinterpret_cast<const int64_t*>(p);
    default: return 0;
  }
}

/// Stores a floating-point value, rounding once to the element type.
inline void store_float(col::dtype t, void* base, size_t i, double x) {
  auto p = static_cast<char*>(base) + i * col::size_of(t);
  switch (t) {
    case col::dtype::float16:
      *reinterpret_cast<uint16_t*>(p) = float_to_half(static_cast<float>(x));
      break;
    case col::dtype::bfloat16:
      *reinterpret_cast<uint16_t*>(p) =
        float_to_bfloat16(static_cast<float>(x));
      break;
    case col::dtype::float32:
      *reinterpret_cast<float*>(p) = static_cast<float>(x);
      break;
    case col::dtype::float64: *reinterpret_cast<double*>(p) = x; break;
    default: throw std::logic_error("store_float on an integer dtype");
  }
}

// -- deterministic inputs ----------------------------------------------------

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t hash(uint64_t a, uint64_t b, uint64_t c = 0) {
  return mix(a * 0x100000001b3ull ^ mix(b * 31 + mix(c)));
}

/// Integer input of `rank` at global index `i`, chosen so that no
/// reduction of up to 8 ranks overflows the dtype (except bitwise ops,
/// which use every bit).
inline int64_t int_input(col::dtype t, col::reduce_op op, int rank, size_t i) {
  auto h = hash(static_cast<uint64_t>(rank), i, static_cast<uint64_t>(op));
  bool is_signed = t != col::dtype::uint8;
  switch (op) {
    case col::reduce_op::band:
    case col::reduce_op::bor:
    case col::reduce_op::bxor:
      // Full width; store_int truncates to the dtype. Bias band toward
      // ones and bor toward zeros so results are not all 0 / all 1.
      if (op == col::reduce_op::band) return int64_t(h | mix(h) | mix(h + 1));
      if (op == col::reduce_op::bor) return int64_t(h & mix(h) & mix(h + 1));
      return int64_t(h);
    case col::reduce_op::product: {
      // At most every third rank contributes a 2: |product| <= 2^3.
      if ((static_cast<size_t>(rank) + i) % 3 == 0) return 2;
      if (is_signed && h % 4 == 0) return -1;
      if (i % 17 == 5 && rank == 1) return 0;
      return 1;
    }
    default: {
      int64_t small = is_signed ? int64_t(h % 32) - 16 : int64_t(h % 32);
      // Spread the wider types over more bits while sums stay exact.
      if (t == col::dtype::int32) return small * 1000003 + int64_t(h % 7);
      if (t == col::dtype::int64) return small * (int64_t{1} << 40) + i % 7;
      return small;
    }
  }
}

/// Floating-point input: multiples of 1/8 with |x| <= 8 (exact in every
/// float dtype incl. bfloat16), so float32 sums of a few ranks are exact and
/// the order of the reduction does not matter.
inline double float_input(col::reduce_op op, int rank, size_t i) {
  auto h = hash(static_cast<uint64_t>(rank), i, 100 + static_cast<int>(op));
  if (op == col::reduce_op::product) {
    if ((static_cast<size_t>(rank) + i) % 3 == 0) return 2;
    if (h % 4 == 0) return -1;
    if (h % 4 == 1) return 0.5;
    return 1.5;
  }
  return (static_cast<double>(h % 128) - 64) / 8;
}

/// Fills `x` with the inputs of `rank` for `op`; element j has global
/// index `offset + j`.
inline void fill_input(const col::tensor_view& x, col::reduce_op op, int rank,
                       size_t offset = 0) {
  for (size_t j = 0; j < x.numel(); ++j) {
    if (col::is_integral(x.type()))
      store_int(x.type(), x.data(), j,
                int_input(x.type(), op, rank, offset + j));
    else
      store_float(x.type(), x.data(), j, float_input(op, rank, offset + j));
  }
}

/// Fills `x` with arbitrary bytes unique to (seed, rank, index), for
/// operations that only move data.
inline void fill_pattern(const col::tensor_view& x, int rank, size_t offset = 0,
                         uint64_t seed = 0) {
  auto width = col::size_of(x.type());
  auto bytes = static_cast<unsigned char*>(x.data());
  for (size_t j = 0; j < x.numel(); ++j) {
    auto h = hash(static_cast<uint64_t>(rank) + 7919 * seed, offset + j, 77);
    std::memcpy(bytes + j * width, &h, width);
  }
}

// -- reference reduction -----------------------------------------------------

/// The expected result of reducing element `i` (global index) over ranks
/// [0, world), written into `out` at position `j`. Integers: exact in 64
/// bits (avg truncates toward zero). float16 / bfloat16 / float32:
/// accumulate in float32 in rank order and round once; float64 in double.
inline void reference_element(col::dtype t, col::reduce_op op, int world,
                              size_t i, void* out, size_t j) {
  using col::reduce_op;
  if (col::is_integral(t)) {
    // Widen what each rank actually stored (after truncation to the dtype).
    auto input = [&](int r) {
      int64_t raw = int_input(t, op, r, i);
      unsigned char buf[8];
      store_int(t, buf, 0, raw);
      return load_int(t, buf, 0);
    };
    int64_t acc = input(0);
    for (int r = 1; r < world; ++r) {
      int64_t x = input(r);
      switch (op) {
        case reduce_op::sum:
        case reduce_op::avg: acc += x; break;
        case reduce_op::product: acc *= x; break;
        case reduce_op::min: acc = std::min(acc, x); break;
        case reduce_op::max: acc = std::max(acc, x); break;
        case reduce_op::band: acc &= x; break;
        case reduce_op::bor: acc |= x; break;
        case reduce_op::bxor: acc ^= x; break;
      }
    }
    if (op == reduce_op::avg) acc /= world;
    store_int(t, out, j, acc);
    return;
  }
  auto reduce_in = [&](auto acc_tag) {
    using acc_t = decltype(acc_tag);
    auto input = [&](int r) {
      unsigned char buf[8];
      store_float(t, buf, 0, float_input(op, r, i));
      return static_cast<acc_t>(load(t, buf, 0));
    };
    acc_t acc = input(0);
    for (int r = 1; r < world; ++r) {
      acc_t x = input(r);
      switch (op) {
        case reduce_op::sum:
        case reduce_op::avg: acc += x; break;
        case reduce_op::product: acc *= x; break;
        case reduce_op::min: acc = std::min(acc, x); break;
        case reduce_op::max: acc = std::max(acc, x); break;
        default: break;
      }
    }
    if (op == reduce_op::avg) acc /= static_cast<acc_t>(world);
    return static_cast<double>(acc);
  };
  double result =
    t == col::dtype::float64 ? reduce_in(double{}) : reduce_in(float{});
  store_float(t, out, j, result);
}

// -- buffers ------------------------------------------------------------------

/// An owning, zero-initialized host buffer of `count` elements of `type`
/// (64-byte aligned through col::tensor).
inline col::tensor make_tensor(col::dtype type, size_t count) {
  // Rank threads call this: throw (reported per rank), never assert.
  auto t = col::tensor::zeros(type, {static_cast<int64_t>(count)});
  if (!t)
    throw std::runtime_error("allocation failed: " + col::render(t.error()));
  return std::move(*t);
}

/// Fills `x` with a poison value so that untouched outputs are detected.
inline void poison(const col::tensor_view& x) {
  std::memset(x.data(), 0xa5, x.nbytes());
}

inline std::string describe_element(col::dtype t, const void* base, size_t i) {
  std::ostringstream os;
  if (col::is_integral(t))
    os << load_int(t, base, i);
  else
    os << load(t, base, i);
  uint64_t raw = 0;
  std::memcpy(&raw, static_cast<const char*>(base) + i * col::size_of(t),
              col::size_of(t));
  os << " (0x" << std::hex << raw << ")";
  return os.str();
}

// -- per-rank logs -----------------------------------------------------------

/// Failures one rank saw; written only by that rank's thread.
class rank_log {
 public:
  /// Records a failure; `what` should name the case (op, dtype, sizes).
  void fail(std::string what) {
    ++failures_;
    if (messages_.size() < max_messages) messages_.push_back(std::move(what));
  }

  /// Compares `got` bytewise with `expected`, element by element; records
  /// the first few mismatching elements. Returns whether all matched.
  bool expect_equal(const std::string& what, const col::tensor_view& got,
                    const col::tensor_view& expected) {
    if (got.numel() != expected.numel()) {
      fail(what + ": " + std::to_string(got.numel()) + " elements, expected " +
           std::to_string(expected.numel()));
      return false;
    }
    auto w = col::size_of(got.type());
    auto a = static_cast<const char*>(got.data());
    auto b = static_cast<const char*>(expected.data());
    if (got.numel() == 0 || std::memcmp(a, b, got.nbytes()) == 0) return true;
    size_t bad = 0;
    for (size_t i = 0; i < got.numel(); ++i) {
      if (std::memcmp(a + i * w, b + i * w, w) != 0) {
        if (++bad <= 3)
          fail(what + ": element " + std::to_string(i) + " is " +
               describe_element(got.type(), a, i) + ", expected " +
               describe_element(got.type(), b, i));
      }
    }
    if (bad > 3)
      fail(what + ": " + std::to_string(bad) + " of " +
           std::to_string(got.numel()) + " elements differ");
    return false;
  }

  /// Records a failure unless `cond`.
  void expect(bool cond, const std::string& what) {
    if (!cond) fail(what);
  }

  size_t failures() const { return failures_; }

  const std::vector<std::string>& messages() const { return messages_; }

  size_t checks = 0; ///< number of comparisons made, to prove work was done

 private:
  static constexpr size_t max_messages = 20;
  size_t failures_ = 0;
  std::vector<std::string> messages_;
};

struct rank_result {
  rank_log log;
  std::exception_ptr error;
};

inline std::string what_of(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const col::collective_error& e) {
    return std::string{"collective_error: "} + e.what();
  } catch (const std::exception& e) {
    return std::string{"exception: "} + e.what();
  } catch (...) {
    return "unknown exception";
  }
}

/// Runs `body(rank, log)` on `world` threads at once, each in its own
/// member_scope, and returns every rank's log and exception.
inline std::vector<rank_result>
run_threads(int world, const std::function<void(int, rank_log&)>& body) {
  std::vector<rank_result> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto& res = results[static_cast<size_t>(r)];
      try {
        col::member_scope scope;
        body(r, res.log);
      } catch (...) {
        res.error = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  return results;
}

/// Checks every rank's log in the test thread; rethrows the first rank's
/// exception (after reporting all of them) so doctest names it.
inline void check_ranks(std::vector<rank_result>& results) {
  std::exception_ptr first;
  for (size_t r = 0; r < results.size(); ++r) {
    auto& res = results[r];
    INFO("rank " << r);
    for (auto& msg : res.log.messages())
      FAIL_CHECK(msg);
    CHECK(res.log.failures() == 0);
    if (res.error) {
      FAIL_CHECK("rank " << r << " threw " << what_of(res.error));
      if (!first) first = res.error;
    }
  }
  if (first) std::rethrow_exception(first);
}

/// Options for a test group: a fresh in-process store shared by all ranks
/// and a generous timeout so that a bug fails instead of hanging.
inline col::init_options
group_options(col::rendezvous_store_ptr store,
              col::milliseconds timeout = std::chrono::seconds{60}) {
  col::init_options opts;
  opts.store = std::move(store);
  opts.timeout = timeout;
  return opts;
}

#ifndef CAF_COLLECTIVE_TEST_BACKEND
#define CAF_COLLECTIVE_TEST_BACKEND "gloo"
#endif

/// The backend run_group forms: the correctness suites are built once per
/// backend (tests/collective/CMakeLists.txt), so Gloo and shm share them.
inline constexpr const char* backend_under_test = CAF_COLLECTIVE_TEST_BACKEND;

/// Runs `body(rank, log)` on `world` ranks that first form the group `name`
/// on backend_under_test, then checks the results in the test thread.
inline void run_group(int world, const std::string& name,
                      const std::function<void(int, rank_log&)>& body,
                      col::milliseconds timeout = std::chrono::seconds{60}) {
  auto store = col::make_in_process_store();
  auto results = run_threads(world, [&](int rank, rank_log& log) {
    col::init_collective_group(world, rank, backend_under_test, name,
                               group_options(store, timeout));
    body(rank, log);
    col::destroy_collective_group(name);
  });
  check_ranks(results);
}

/// Forms an shm group `name` of `world` threads, runs `body` on each, and
/// destroys the group once every rank is through its body.
inline void run_shm_threads(int world, const std::string& name,
                            const std::function<void(int, rank_log&)>& body,
                            col::milliseconds timeout = std::chrono::seconds{
                              20}) {
  auto store = col::make_in_process_store();
  std::latch done{world};
  auto results = run_threads(world, [&](int rank, rank_log& log) {
    col::init_collective_group(world, rank, "shm", name,
                               group_options(store, timeout));
    body(rank, log);
    done.arrive_and_wait();
    col::destroy_collective_group(name);
  });
  check_ranks(results);
}

/// Runs `fn` and returns the collective_error it throws; records a failure
/// (and returns a default error) if it throws nothing or something else.
template<class Fn>
col::collective_error expect_throw(rank_log& log, const std::string& what,
                                   Fn&& fn) {
  try {
    fn();
  } catch (const col::collective_error& e) {
    return e;
  } catch (const std::exception& e) {
    log.fail(what + ": threw a non-collective exception: " + e.what());
    return col::collective_error{caf::error{}};
  }
  log.fail(what + ": did not throw");
  return col::collective_error{caf::error{}};
}

/// Expects `err` to have `code` and a text containing every string of
/// `needles`.
inline void expect_error_of(rank_log& log, const std::string& what,
                            const caf::error& err, col::errc code,
                            std::initializer_list<std::string> needles) {
  if (!err) {
    log.fail(what + ": succeeded, expected " +
             std::string{col::to_string(code)});
    return;
  }
  auto text = col::render(err);
  if (col::code_of(err) != code)
    log.fail(what + ": code " + std::string{col::to_string(col::code_of(err))} +
             ", expected " + std::string{col::to_string(code)} + " (" + text +
             ")");
  for (auto& needle : needles)
    if (text.find(needle) == std::string::npos)
      log.fail(what + ": message does not mention '" + needle + "': " + text);
}

/// Runs `fn`, expects a collective_error with `code` whose what() contains
/// every string of `needles`.
template<class Fn>
inline void expect_error(rank_log& log, const std::string& what, col::errc code,
                         std::initializer_list<std::string> needles, Fn&& fn) {
  auto e = expect_throw(log, what, std::forward<Fn>(fn));
  if (!e.error()) return; // already recorded
  expect_error_of(log, what, e.error(), code, needles);
}

/// The same check in the test thread.
template<class Fn>
inline void check_error(col::errc code,
                        std::initializer_list<std::string> needles, Fn&& fn) {
  rank_log log;
  expect_error(log, "call", code, needles, std::forward<Fn>(fn));
  for (auto& msg : log.messages())
    FAIL_CHECK(msg);
  CHECK(log.failures() == 0);
}

/// A correct allreduce (sum of int64 over the group), to show the group
/// still works after a refused call.
inline void expect_usable(rank_log& log, const std::string& group, int world,
                          int rank) {
  auto x = col::tensor::from_vector(std::vector<int64_t>{rank + 1, 10});
  try {
    col::allreduce(x, group);
  } catch (const std::exception& e) {
    log.fail("allreduce after bad input failed: " + std::string{e.what()});
    return;
  }
  auto p = static_cast<int64_t*>(x.data());
  log.expect(p[0] == world * (world + 1) / 2 && p[1] == 10 * world,
             "allreduce after bad input returned a wrong sum");
  log.expect(!col::get_group(group)->broken(), "group is marked broken");
}

inline std::string case_name(const char* op, col::dtype t, int world,
                             size_t count) {
  return std::string{op} + " " + std::string{col::to_string(t)} + " world " +
         std::to_string(world) + " count " + std::to_string(count);
}

inline std::string case_name(const char* op, col::dtype t, col::reduce_op rop,
                             int world, size_t count) {
  return case_name(op, t, world, count) + " op " +
         std::string{col::to_string(rop)};
}

/// allreduce, reduce_scatter and reduce (to the last rank) of `count`
/// elements per rank block on `group` against the reference, as rank `rank`
/// of `world`.
inline void check_reductions(rank_log& log, int world, int rank,
                             const std::string& group, col::dtype t,
                             col::reduce_op op, size_t count) {
  auto w = size_t(world);
  auto what = case_name("", t, op, world, count);
  auto want = make_tensor(t, count * w);
  for (size_t i = 0; i < count * w; ++i)
    reference_element(t, op, world, i, want.data(), i);
  auto x = make_tensor(t, count);
  fill_input(x, op, rank);
  col::allreduce_options aopts;
  aopts.op = op;
  col::allreduce(x, group, aopts);
  log.expect_equal("allreduce" + what, x, want.view().slice(0, count));
  auto in = make_tensor(t, count * w);
  fill_input(in, op, rank);
  auto out = make_tensor(t, count);
  poison(out);
  col::reduce_scatter_options sopts;
  sopts.op = op;
  col::reduce_scatter(in, out, group, sopts);
  log.expect_equal("reduce_scatter" + what, out,
                   want.view().slice(size_t(rank) * count, count));
  auto rout = make_tensor(t, count * w);
  poison(rout);
  col::reduce_options ropts;
  ropts.op = op;
  ropts.root = world - 1;
  col::reduce(in, rout, group, ropts);
  if (rank == world - 1) log.expect_equal("reduce" + what, rout, want);
}

} // namespace test
