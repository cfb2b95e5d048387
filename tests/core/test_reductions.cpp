// reduce, allreduce and reduce_scatter for every dtype x reduce op x world
// size x element count, against a reference the test computes itself.
#include <doctest/doctest.h>

#include "test_support.hpp"

using namespace test;

namespace {

const std::vector<size_t> counts = {0, 1, 5, 1000, 65537};

void check_outcomes(const std::vector<rank_outcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    INFO("rank " << r);
    CHECK_MESSAGE(outcomes[r].exception.empty(), outcomes[r].exception);
    CHECK_MESSAGE(
      outcomes[r].failures.empty(),
      (outcomes[r].failures.empty() ? "" : outcomes[r].failures[0]));
  }
}

// Checks result elements [0, n) against the reference for elements
// [offset, offset + n); records at most one failure per call.
void verify(const buffer& result, col::reduce_op op, int world, size_t offset,
            std::vector<std::string>& failures, const std::string& what) {
  for (size_t i = 0; i < result.size(); ++i) {
    double expected = 0;
    if (!matches_reduction(op, result.type(), world, offset + i, result.get(i),
                           expected)) {
      failures.push_back(describe(what, " element ", offset + i, ": got ",
                                  result.get(i), ", expected ", expected));
      return;
    }
  }
}

void run_matrix(
  int world, bool in_place,
  const std::function<void(int, col::dtype, col::reduce_op, size_t,
                           std::vector<std::string>&)>& one) {
  check_outcomes(run_ranks(world, "matrix", [&](int rank, auto& failures) {
    for (auto type : col::all_dtypes)
      for (auto op : col::all_reduce_ops)
        if (col::is_defined(op, type))
          for (auto count : counts)
            one(rank, type, op, count, failures);
  }));
  (void)in_place;
}

std::string label(const char* name, col::dtype type, col::reduce_op op,
                  size_t count) {
  return describe(name, " ", col::to_string(type), " ", col::to_string(op),
                  " count ", count);
}

} // namespace

TEST_CASE("allreduce matches the reference for every dtype, op, size and "
          "world size, out of place and in place") {
  for (int world : {1, 2, 3, 4, 7}) {
    INFO("world size " << world);
    run_matrix(world, false,
               [world](int rank, col::dtype type, col::reduce_op op,
                       size_t count, std::vector<std::string>& failures) {
                 buffer in{type, count};
                 buffer out{type, count};
                 fill_inputs(in, op, rank);
                 col::allreduce_options opts;
                 opts.op = op;
                 col::allreduce(in.view(), out.view(), "matrix", opts);
                 verify(out, op, world, 0, failures,
                        label("out-of-place allreduce", type, op, count));
                 for (size_t i = 0; i < count; ++i)
                   if (in.get(i) != input_value(op, rank, i)) {
                     failures.push_back(
                       label("allreduce modified its input", type, op, count));
                     break;
                   }
                 col::allreduce(in.view(), "matrix", opts);
                 verify(in, op, world, 0, failures,
                        label("in-place allreduce", type, op, count));
               });
  }
}

TEST_CASE("reduce delivers the reduction to every root, in and out of "
          "place") {
  for (int world : {1, 2, 3, 4, 7}) {
    INFO("world size " << world);
    run_matrix(world, false,
               [world](int rank, col::dtype type, col::reduce_op op,
                       size_t count, std::vector<std::string>& failures) {
                 // Rotate the root with the count so every root position is
                 // used.
                 int root = static_cast<int>(count % world);
                 buffer in{type, count};
                 buffer out{type, count};
                 fill_inputs(in, op, rank);
                 col::reduce_options opts;
                 opts.op = op;
                 opts.root = root;
                 col::reduce(in.view(), out.view(), "matrix", opts);
                 if (rank == root)
                   verify(out, op, world, 0, failures,
                          label("out-of-place reduce", type, op, count));
                 col::reduce(in.view(), root, "matrix", opts);
                 if (rank == root)
                   verify(in, op, world, 0, failures,
                          label("in-place reduce", type, op, count));
               });
  }
}

TEST_CASE("reduce_scatter gives rank r the reduction of block r") {
  for (int world : {1, 2, 3, 4, 7}) {
    INFO("world size " << world);
    run_matrix(world, false,
               [world](int rank, col::dtype type, col::reduce_op op,
                       size_t count, std::vector<std::string>& failures) {
                 buffer in{type, count * world};
                 buffer out{type, count};
                 fill_inputs(in, op, rank);
                 col::reduce_scatter_options opts;
                 opts.op = op;
                 col::reduce_scatter(in.view(), out.view(), "matrix", opts);
                 verify(out, op, world, rank * count, failures,
                        label("reduce_scatter", type, op, count));
               });
  }
}

TEST_CASE("reduce_scatter stays right at large sizes (where Gloo's "
          "halving-doubling failed)") {
  for (int world : {2, 3, 4}) {
    INFO("world size " << world);
    check_outcomes(run_ranks(world, "large", [world](int rank, auto& fails) {
      // 16 KiB to 1 MiB per rank of float32.
      for (size_t count :
           {size_t{4096}, size_t{32768}, size_t{65536}, size_t{262144}}) {
        buffer in{col::dtype::float32, count * world};
        buffer out{col::dtype::float32, count};
        fill_inputs(in, col::reduce_op::sum, rank);
        col::reduce_scatter(in.view(), out.view(), "large");
        verify(out, col::reduce_op::sum, world, rank * count, fails,
               label("reduce_scatter", col::dtype::float32, col::reduce_op::sum,
                     count));
      }
    }));
  }
}

TEST_CASE("every allreduce algorithm gives the same, right result") {
  using algo = col::allreduce_algorithm;
  for (int world : {2, 3, 4}) {
    INFO("world size " << world);
    check_outcomes(run_ranks(world, "algos", [world](int rank, auto& fails) {
      for (auto algorithm :
           {algo::automatic, algo::ring, algo::ring_chunked,
            algo::halving_doubling, algo::bcube, algo::ring_options_api})
        for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}})
          for (auto type :
               {col::dtype::float32, col::dtype::int64, col::dtype::float16}) {
            buffer xs{type, count};
            fill_inputs(xs, col::reduce_op::sum, rank);
            col::allreduce_options opts;
            opts.algorithm = algorithm;
            col::allreduce(xs.view(), "algos", opts);
            verify(xs, col::reduce_op::sum, world, 0, fails,
                   describe("algorithm ", static_cast<int>(algorithm), " ",
                            col::to_string(type), " count ", count));
          }
    }));
  }
}
