// Reductions over Gloo (allreduce, reduce, reduce_scatter) for every dtype,
// reduce op, world size and count, in place and out of place, against the
// reference the test computes itself (test_support.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "test_support.hpp"

namespace col = caf_collective;
using test::rank_log;

namespace {

constexpr size_t counts[] = {0, 1, 5, 1000, 65537};

/// Roots to try: first, middle and last rank.
std::vector<int> roots_of(int world) {
  std::set<int> rs{0, world / 2, world - 1};
  return {rs.begin(), rs.end()};
}

/// Expected results of reducing the first `size` global indices over
/// `world` ranks, per (dtype, op); computed once in the test thread, then
/// read by all rank threads.
class reference_table {
 public:
  reference_table(int world, size_t size) {
    for (auto t : col::all_dtypes)
      for (auto op : col::all_reduce_ops) {
        if (!col::is_defined(op, t)) continue;
        auto x = test::make_tensor(t, size);
        for (size_t i = 0; i < size; ++i)
          test::reference_element(t, op, world, i, x.data(), i);
        table_.emplace(std::make_pair(t, op), std::move(x));
      }
  }

  col::tensor_view get(col::dtype t, col::reduce_op op, size_t first,
                       size_t count) const {
    return table_.at({t, op}).view().slice(first, count);
  }

 private:
  std::map<std::pair<col::dtype, col::reduce_op>, col::tensor> table_;
};

/// Checks that an out-of-place op left its input alone.
void expect_input_intact(rank_log& log, const std::string& what,
                         const col::tensor_view& in, col::reduce_op op,
                         int rank, size_t offset = 0) {
  auto fresh = test::make_tensor(in.type(), in.numel());
  test::fill_input(fresh, op, rank, offset);
  log.expect_equal(what + " (input modified)", in, fresh);
}

void allreduce_matrix(int world) {
  reference_table ref{world, counts[std::size(counts) - 1]};
  std::string name = "allreduce-" + std::to_string(world);
  std::vector<size_t> checks(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto op : col::all_reduce_ops) {
        if (!col::is_defined(op, t)) continue;
        for (auto n : counts) {
          auto what = test::case_name("allreduce", t, op, world, n);
          col::allreduce_options opts;
          opts.op = op;
          // Out of place.
          auto in = test::make_tensor(t, n);
          auto out = test::make_tensor(t, n);
          test::fill_input(in, op, rank);
          test::poison(out);
          col::allreduce(in, out, name, opts);
          log.expect_equal(what + " out of place", out, ref.get(t, op, 0, n));
          expect_input_intact(log, what, in, op, rank);
          // In place.
          test::fill_input(in, op, rank);
          col::allreduce(in, name, opts);
          log.expect_equal(what + " in place", in, ref.get(t, op, 0, n));
          log.checks += 2;
        }
      }
    checks[rank] = log.checks;
  });
  for (auto c : checks)
    CHECK(c == 2 * 52 * std::size(counts));
}

void reduce_matrix(int world) {
  reference_table ref{world, counts[std::size(counts) - 1]};
  std::string name = "reduce-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto op : col::all_reduce_ops) {
        if (!col::is_defined(op, t)) continue;
        for (auto n : counts)
          for (int root : roots_of(world)) {
            auto what = test::case_name("reduce", t, op, world, n) + " root " +
                        std::to_string(root);
            col::reduce_options opts;
            opts.op = op;
            opts.root = root;
            // Out of place; off the root the output may be empty (tried
            // when the root is 0) or full-sized (otherwise).
            auto in = test::make_tensor(t, n);
            bool empty_out = rank != root && root == 0;
            auto out = test::make_tensor(t, empty_out ? 0 : n);
            test::fill_input(in, op, rank);
            test::poison(out);
            col::reduce(in, out, name, opts);
            if (rank == root)
              log.expect_equal(what + " out of place", out,
                               ref.get(t, op, 0, n));
            expect_input_intact(log, what, in, op, rank);
            // In place.
            test::fill_input(in, op, rank);
            col::reduce(in, root, name, opts);
            if (rank == root)
              log.expect_equal(what + " in place", in, ref.get(t, op, 0, n));
            ++log.checks;
          }
      }
    log.expect(log.checks == 52 * std::size(counts) * roots_of(world).size(),
               "reduce: not every case ran");
  });
}

/// One out-of-place reduce_scatter of `n` elements per rank, checked against
/// the reference; the input must stay intact.
void reduce_scatter_once(rank_log& log, const std::string& name,
                         const reference_table& ref, col::dtype t,
                         col::reduce_op op, int rank, int world, size_t n) {
  auto what = test::case_name("reduce_scatter", t, op, world, n);
  col::reduce_scatter_options opts;
  opts.op = op;
  auto in = test::make_tensor(t, static_cast<size_t>(world) * n);
  auto out = test::make_tensor(t, n);
  test::fill_input(in, op, rank);
  test::poison(out);
  col::reduce_scatter(in, out, name, opts);
  log.expect_equal(what, out, ref.get(t, op, rank * n, n));
  expect_input_intact(log, what, in, op, rank);
}

void reduce_scatter_matrix(int world) {
  auto w = static_cast<size_t>(world);
  reference_table ref{world, w * counts[std::size(counts) - 1]};
  std::string name = "reduce-scatter-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : col::all_dtypes)
      for (auto op : col::all_reduce_ops) {
        if (!col::is_defined(op, t)) continue;
        for (auto n : counts) {
          reduce_scatter_once(log, name, ref, t, op, rank, world, n);
          ++log.checks;
        }
      }
    log.expect(log.checks == 52 * std::size(counts),
               "reduce_scatter: not every case ran");
  });
}

/// Every input size from 1 to 72 bytes. The shm backend carries an input
/// of up to 40 bytes on the rank's sync line and a larger one in its small
/// slot: both sides of that limit, and the limit itself, must reduce alike.
void small_inputs(int world) {
  constexpr size_t max_bytes = 72;
  auto w = static_cast<size_t>(world);
  reference_table ref{world, max_bytes * w};
  auto name = "small-inputs-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    size_t cases = 0;
    for (auto t : {col::dtype::uint8, col::dtype::float32, col::dtype::int64})
      for (size_t n = 1; n * col::size_of(t) <= max_bytes; ++n) {
        auto op = col::reduce_op::sum;
        auto what = test::case_name("allreduce", t, op, world, n);
        col::allreduce_options aopts;
        auto in = test::make_tensor(t, n);
        auto out = test::make_tensor(t, n);
        test::fill_input(in, op, rank);
        test::poison(out);
        col::allreduce(in, out, name, aopts);
        log.expect_equal(what, out, ref.get(t, op, 0, n));
        // reduce_scatter publishes its whole input: w * n elements.
        reduce_scatter_once(log, name, ref, t, op, rank, world, n);
        ++cases;
      }
    log.expect(cases == 72 + 18 + 9, "small inputs: not every case ran");
    ++log.checks;
  });
}

} // namespace

#define CAF_COLLECTIVE_PER_WORLD(title, fn) \
  TEST_CASE(title " with 1 rank") {         \
    fn(1);                                  \
  }                                         \
  TEST_CASE(title " with 2 ranks") {        \
    fn(2);                                  \
  }                                         \
  TEST_CASE(title " with 3 ranks") {        \
    fn(3);                                  \
  }                                         \
  TEST_CASE(title " with 4 ranks") {        \
    fn(4);                                  \
  }                                         \
  TEST_CASE(title " with 7 ranks") {        \
    fn(7);                                  \
  }

CAF_COLLECTIVE_PER_WORLD(
  "allreduce matches the reference for every dtype and op", allreduce_matrix)
CAF_COLLECTIVE_PER_WORLD("reduce matches the reference at every root",
                         reduce_matrix)
CAF_COLLECTIVE_PER_WORLD("reduce_scatter matches the reference for every dtype "
                         "and op",
                         reduce_scatter_matrix)

// -- allreduce algorithms ----------------------------------------------------

namespace {

constexpr col::allreduce_algorithm algorithms[] = {
  col::allreduce_algorithm::automatic,
  col::allreduce_algorithm::ring,
  col::allreduce_algorithm::ring_chunked,
  col::allreduce_algorithm::halving_doubling,
  col::allreduce_algorithm::bcube,
  col::allreduce_algorithm::ring_options_api,
};

const char* algorithm_name(col::allreduce_algorithm a) {
  switch (a) {
    case col::allreduce_algorithm::automatic: return "automatic";
    case col::allreduce_algorithm::ring: return "ring";
    case col::allreduce_algorithm::ring_chunked: return "ring_chunked";
    case col::allreduce_algorithm::halving_doubling: return "halving_doubling";
    case col::allreduce_algorithm::bcube: return "bcube";
    case col::allreduce_algorithm::ring_options_api: return "ring_options_api";
  }
  return "?";
}

void allreduce_algorithms(int world) {
  constexpr size_t sizes[] = {1, 5, 4099, 65537, 300007};
  constexpr col::reduce_op ops[] = {col::reduce_op::sum, col::reduce_op::max,
                                    col::reduce_op::avg};
  reference_table ref{world, sizes[std::size(sizes) - 1]};
  std::string name = "algorithms-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto algo : algorithms)
      for (auto t : col::all_dtypes)
        for (auto op : ops)
          for (auto n : sizes) {
            // The largest size on a few dtypes only, to bound the runtime.
            if (n == 300007 && t != col::dtype::float32 &&
                t != col::dtype::bfloat16 && t != col::dtype::int64)
              continue;
            auto what = test::case_name("allreduce", t, op, world, n) +
                        " algorithm " + algorithm_name(algo);
            col::allreduce_options opts;
            opts.op = op;
            opts.algorithm = algo;
            auto x = test::make_tensor(t, n);
            test::fill_input(x, op, rank);
            col::allreduce(x, name, opts);
            log.expect_equal(what, x, ref.get(t, op, 0, n));
            ++log.checks;
          }
    log.expect(log.checks > 0, "no case ran");
  });
}

} // namespace

CAF_COLLECTIVE_PER_WORLD("allreduce and reduce_scatter are right at every "
                         "input size from 1 to 72 bytes",
                         small_inputs)

TEST_CASE("every allreduce algorithm matches the reference with 2 ranks") {
  allreduce_algorithms(2);
}

TEST_CASE("every allreduce algorithm matches the reference with 3 ranks") {
  allreduce_algorithms(3);
}

TEST_CASE("every allreduce algorithm matches the reference with 4 ranks") {
  allreduce_algorithms(4);
}

TEST_CASE("every allreduce algorithm matches the reference with 1 rank") {
  allreduce_algorithms(1);
}

// -- large reduce_scatter ----------------------------------------------------

namespace {

// Gloo's own halving-doubling reduce-scatter returned wrong floats from
// 128 KiB up; ours must be right at every size. Counts are elements per
// rank (output block), around 128 KiB, 256 KiB and 1 MiB of float32.
void large_reduce_scatter(int world) {
  constexpr size_t per_rank[] = {32767, 32768, 32769, 65536, 65539, 262144};
  auto w = static_cast<size_t>(world);
  reference_table ref{world, w * per_rank[std::size(per_rank) - 1]};
  std::string name = "large-reduce-scatter-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t :
         {col::dtype::float32, col::dtype::float16, col::dtype::bfloat16,
          col::dtype::float64, col::dtype::int32})
      for (auto op : {col::reduce_op::sum, col::reduce_op::min})
        for (auto n : per_rank) {
          // Half-precision types at the same byte sizes as float32.
          if ((t == col::dtype::float16 || t == col::dtype::bfloat16) &&
              n != 65536 && n != 65539 && n != 262144)
            continue;
          auto what = test::case_name("reduce_scatter", t, op, world, n);
          col::reduce_scatter_options opts;
          opts.op = op;
          auto in = test::make_tensor(t, w * n);
          auto out = test::make_tensor(t, n);
          test::fill_input(in, op, rank);
          test::poison(out);
          col::reduce_scatter(in, out, name, opts);
          log.expect_equal(what, out, ref.get(t, op, rank * n, n));
          // Run it twice: buffers reused by the group must not leak the
          // previous call's data into the next.
          test::poison(out);
          col::reduce_scatter(in, out, name, opts);
          log.expect_equal(what + " second call", out,
                           ref.get(t, op, rank * n, n));
          ++log.checks;
        }
    log.expect(log.checks > 0, "no case ran");
  });
}

} // namespace

TEST_CASE("reduce_scatter is right at 128 KiB to 1 MiB per rank with 2 ranks") {
  large_reduce_scatter(2);
}

TEST_CASE("reduce_scatter is right at 128 KiB to 1 MiB per rank with 3 ranks") {
  large_reduce_scatter(3);
}

TEST_CASE("reduce_scatter is right at 128 KiB to 1 MiB per rank with 4 ranks") {
  large_reduce_scatter(4);
}

// -- half precision: accumulate in float32, round once ------------------------

namespace {

// Element i: rank i % world holds `big`, every other rank 0.75. In float32
// the sum is big + 0.75 * (world - 1) exactly, which rounds to a 16-bit
// value above `big`; accumulating in the 16-bit type instead drops every
// 0.75 added to `big` (the step there is 2), so whichever rank an algorithm
// starts from, some elements would come out as `big`.
void half_accumulation(int world) {
  constexpr size_t n = 96;
  auto w = static_cast<size_t>(world);
  std::string name = "half-accumulation-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : {col::dtype::float16, col::dtype::bfloat16}) {
      float big = t == col::dtype::float16 ? 2048.0f : 256.0f;
      auto fill = [&](const col::tensor_view& x) {
        for (size_t i = 0; i < x.numel(); ++i)
          test::store_float(t, x.data(), i,
                            static_cast<int>(i % w) == rank ? big : 0.75);
      };
      auto expected = test::make_tensor(t, w * n);
      for (size_t i = 0; i < w * n; ++i)
        test::store_float(t, expected.data(), i,
                          big + 0.75f * static_cast<float>(world - 1));
      for (auto algo : algorithms) {
        auto what = test::case_name("allreduce", t, world, n) + " algorithm " +
                    algorithm_name(algo);
        col::allreduce_options opts;
        opts.algorithm = algo;
        auto x = test::make_tensor(t, n);
        fill(x);
        col::allreduce(x, name, opts);
        log.expect_equal(what, x, expected.view().slice(0, n));
      }
      // The expectation itself must differ from `big`, or this proves
      // nothing.
      log.expect(test::load(t, expected.data(), 0) > big,
                 "test data does not distinguish the accumulation type");
      auto in = test::make_tensor(t, w * n);
      auto out = test::make_tensor(t, n);
      fill(in);
      col::reduce_scatter(in, out, name);
      log.expect_equal(test::case_name("reduce_scatter", t, world, n), out,
                       expected.view().slice(0, n));
      for (int root : roots_of(world)) {
        auto x = test::make_tensor(t, n);
        fill(x);
        col::reduce(x, root, name);
        if (rank == root)
          log.expect_equal(test::case_name("reduce", t, world, n) + " root " +
                             std::to_string(root),
                           x, expected.view().slice(0, n));
      }
      ++log.checks;
    }
    log.expect(log.checks == 2, "not every dtype ran");
  });
}

} // namespace

TEST_CASE("float16 and bfloat16 accumulate in float32 and round once with 3 "
          "ranks") {
  half_accumulation(3);
}

TEST_CASE("float16 and bfloat16 accumulate in float32 and round once with 4 "
          "ranks") {
  half_accumulation(4);
}

TEST_CASE("float16 and bfloat16 accumulate in float32 and round once with 7 "
          "ranks") {
  half_accumulation(7);
}

// -- integer avg: the sum is formed exactly
// ------------------------------------

namespace {

// Values near the top (and bottom) of each integer type, so the sum of the
// ranks overflows the dtype while the average fits: the documented
// semantics (exact 64-bit sum, then C++ division) must still hold.
int64_t near_limit(col::dtype t, int rank, size_t i) {
  int64_t wobble = static_cast<int64_t>((i + 3 * rank) % 5);
  bool negative = t != col::dtype::uint8 && (i + rank) % 2 == 1 && i % 3 == 0;
  switch (t) {
    case col::dtype::int8: return negative ? -120 - wobble : 120 + wobble;
    case col::dtype::uint8: return 250 + wobble;
    case col::dtype::int32:
      return negative ? -2'000'000'000 - wobble : 2'000'000'000 + wobble;
    default: // int64: sums of up to 7 ranks still fit in 64 bits
      return negative ? -(int64_t{1} << 59) - wobble
                      : (int64_t{1} << 59) + wobble;
  }
}

void integer_avg_overflow(int world) {
  constexpr size_t n = 1003;
  auto w = static_cast<size_t>(world);
  std::string name = "integer-avg-" + std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    for (auto t : {col::dtype::int8, col::dtype::uint8, col::dtype::int32,
                   col::dtype::int64}) {
      auto fill = [&](const col::tensor_view& x) {
        for (size_t i = 0; i < x.numel(); ++i)
          test::store_int(t, x.data(), i, near_limit(t, rank, i));
      };
      auto expected = test::make_tensor(t, w * n);
      for (size_t i = 0; i < w * n; ++i) {
        int64_t sum = 0;
        for (int r = 0; r < world; ++r)
          sum += near_limit(t, r, i);
        test::store_int(t, expected.data(), i, sum / world);
      }
      for (auto algo : algorithms) {
        auto what =
          test::case_name("allreduce", t, col::reduce_op::avg, world, n) +
          " algorithm " + algorithm_name(algo);
        col::allreduce_options opts;
        opts.op = col::reduce_op::avg;
        opts.algorithm = algo;
        auto x = test::make_tensor(t, n);
        fill(x);
        col::allreduce(x, name, opts);
        log.expect_equal(what, x, expected.view().slice(0, n));
      }
      col::reduce_scatter_options rso;
      rso.op = col::reduce_op::avg;
      auto in = test::make_tensor(t, w * n);
      auto out = test::make_tensor(t, n);
      fill(in);
      col::reduce_scatter(in, out, name, rso);
      log.expect_equal(
        test::case_name("reduce_scatter", t, col::reduce_op::avg, world, n),
        out, expected.view().slice(rank * n, n));
      for (int root : roots_of(world)) {
        col::reduce_options ro;
        ro.op = col::reduce_op::avg;
        ro.root = root;
        auto x = test::make_tensor(t, n);
        fill(x);
        col::reduce(x, root, name, ro);
        if (rank == root)
          log.expect_equal(
            test::case_name("reduce", t, col::reduce_op::avg, world, n) +
              " root " + std::to_string(root),
            x, expected.view().slice(0, n));
      }
      ++log.checks;
    }
    log.expect(log.checks == 4, "not every dtype ran");
  });
}

} // namespace

TEST_CASE("integer avg forms the sum exactly before dividing with 2 ranks") {
  integer_avg_overflow(2);
}

TEST_CASE("integer avg forms the sum exactly before dividing with 3 ranks") {
  integer_avg_overflow(3);
}

TEST_CASE("integer avg forms the sum exactly before dividing with 7 ranks") {
  integer_avg_overflow(7);
}

// -- NaN and signed zeros in min and max -------------------------------------

namespace {

/// Element p < world: NaN on rank p, p + 1 elsewhere; then +0 on rank 0
/// and -0 elsewhere, -0 on rank 0 and +0 elsewhere, and rank + 1.
template<class T>
std::vector<T> nan_and_zero_pattern(int world, int rank, size_t repeats) {
  std::vector<T> one;
  for (int p = 0; p < world; ++p)
    one.push_back(p == rank ? std::numeric_limits<T>::quiet_NaN() : T(p + 1));
  one.push_back(rank == 0 ? T(0) : -T(0));
  one.push_back(rank == 0 ? -T(0) : T(0));
  one.push_back(T(rank + 1));
  std::vector<T> all;
  for (size_t i = 0; i < repeats; ++i)
    all.insert(all.end(), one.begin(), one.end());
  return all;
}

template<class T>
void check_nan_and_zeros(rank_log& log, int world, col::reduce_op op,
                         const std::vector<T>& got, const std::string& what) {
  const auto width = static_cast<size_t>(world) + 3;
  const auto nan = std::numeric_limits<T>::quiet_NaN();
  bool is_min = op == col::reduce_op::min;
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    auto at = i % width;
    // Every rank's NaN survives, as one quiet NaN: the same bits anywhere.
    if (at < static_cast<size_t>(world))
      wrong += std::memcmp(&got[i], &nan, sizeof(T)) != 0;
    else if (at < width - 1) // min prefers -0, max +0, whoever holds it
      wrong += got[i] != T(0) || std::signbit(got[i]) != is_min;
    else
      wrong += got[i] != (is_min ? T(1) : T(world));
  }
  log.expect(wrong == 0, what + ": " + std::to_string(wrong) + " of " +
                           std::to_string(got.size()) + " elements wrong");
  log.checks += got.size();
}

template<class T>
void nan_and_zero_rounds(int world, col::dtype type) {
  auto name = "nan-zero-" + std::string{col::to_string(type)} + "-" +
              std::to_string(world);
  test::run_group(world, name, [&](int rank, rank_log& log) {
    // A few elements (Gloo's legacy ring with 2 ranks), and over 512 KiB.
    for (size_t repeats : {size_t{1}, size_t{40000}}) {
      for (auto op : {col::reduce_op::min, col::reduce_op::max}) {
        auto x = nan_and_zero_pattern<T>(world, rank, repeats);
        col::allreduce_options opts;
        opts.op = op;
        col::allreduce(col::view_of(x), name, opts);
        check_nan_and_zeros(log, world, op, x,
                            std::string{col::to_string(op)} + " of " +
                              std::to_string(x.size()));
      }
    }
  });
}

} // namespace

TEST_CASE("float min and max give every rank the same bits whoever holds a "
          "NaN or a signed zero") {
  // Before: std::min and std::max kept their first operand, so with 2 ranks
  // on Gloo's ring rank 0 got 1 and +0 where rank 1 got NaN and -0, and a
  // NaN survived only on rank 0.
  for (int world : {2, 3}) {
    CAPTURE(world);
    nan_and_zero_rounds<float>(world, col::dtype::float32);
    nan_and_zero_rounds<double>(world, col::dtype::float64);
  }
}
