// The NCCL backend on one rank (one GPU allows no more: NCCL refuses two
// ranks of one communicator on one device): every op, every dtype, every
// reduce op, in place and out of place, sizes 0, 1, odd and large; CUDA
// tensors from tensor::empty/zeros/clone; persistent ops; what NCCL cannot
// do is refused.
#include <string>

#include "nccl_test_support.hpp"

using namespace nccl_test;

namespace {

const size_t sizes[] = {0, 1, 7, 1000, 1 << 16};

std::string name_of(col::dtype t) {
  return std::string{col::to_string(t)};
}

} // namespace

TEST_CASE("every data-movement op copies every dtype on one rank") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_moves");
  for (auto t : col::all_dtypes) {
    for (auto n : sizes) {
      CAPTURE(name_of(t));
      CAPTURE(n);
      auto expected = pattern(t, n);
      auto in = cuda_tensor(t, expected);
      auto fresh = [&] { return cuda_filled(t, n, 3); };
      {
        auto out = fresh();
        CHECK(outcome(g->broadcast(in, out, {})) == "none");
        CHECK(host_values(out) == expected);
      }
      {
        auto out = fresh();
        CHECK(outcome(g->allgather(in, out)) == "none");
        CHECK(host_values(out) == expected);
      }
      {
        auto out = fresh();
        col::allgatherv_options opts;
        opts.counts = {n};
        CHECK(outcome(g->allgatherv(in, out, opts)) == "none");
        CHECK(host_values(out) == expected);
      }
      {
        auto out = fresh();
        CHECK(outcome(g->gather(in, out)) == "none");
        CHECK(host_values(out) == expected);
      }
      {
        auto out = fresh();
        CHECK(outcome(g->scatter(in, out)) == "none");
        CHECK(host_values(out) == expected);
      }
      {
        auto out = fresh();
        CHECK(outcome(g->alltoall(in, out)) == "none");
        CHECK(host_values(out) == expected);
      }
      {
        auto out = fresh();
        col::alltoallv_options opts;
        opts.send_counts = {n};
        opts.recv_counts = {n};
        CHECK(outcome(g->alltoallv(in, out, opts)) == "none");
        CHECK(host_values(out) == expected);
      }
      // Out-of-place ops leave their input alone.
      CHECK(host_values(in) == expected);
      {
        auto x = cuda_tensor(t, expected);
        CHECK(outcome(g->broadcast(x, x, {})) == "none");
        CHECK(host_values(x) == expected);
      }
    }
  }
  CHECK(outcome(g->barrier()) == "none");
  CHECK_FALSE(g->broken());
}

TEST_CASE("every reduce op NCCL has reduces every dtype on one rank") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_reductions");
  const col::reduce_op ops[] = {col::reduce_op::sum, col::reduce_op::product,
                                col::reduce_op::min, col::reduce_op::max,
                                col::reduce_op::avg};
  for (auto t : col::all_dtypes) {
    for (auto op : ops) {
      for (auto n : sizes) {
        CAPTURE(name_of(t));
        CAPTURE(std::string{col::to_string(op)});
        CAPTURE(n);
        // On one rank every reduction is the identity; integer avg takes
        // the staged exact path, negative values included.
        auto expected = pattern(t, n, 1);
        auto in = cuda_tensor(t, expected);
        {
          auto out = cuda_filled(t, n, 5);
          col::allreduce_options opts;
          opts.op = op;
          CHECK(outcome(g->allreduce(in, out, opts)) == "none");
          CHECK(host_values(out) == expected);
        }
        {
          auto x = cuda_tensor(t, expected);
          col::allreduce_options opts;
          opts.op = op;
          CHECK(outcome(g->allreduce(x, x, opts)) == "none");
          CHECK(host_values(x) == expected);
        }
        {
          auto out = cuda_filled(t, n, 5);
          col::reduce_options opts;
          opts.op = op;
          CHECK(outcome(g->reduce(in, out, opts)) == "none");
          CHECK(host_values(out) == expected);
        }
        {
          auto out = cuda_filled(t, n, 5);
          col::reduce_scatter_options opts;
          opts.op = op;
          CHECK(outcome(g->reduce_scatter(in, out, opts)) == "none");
          CHECK(host_values(out) == expected);
        }
        CHECK(host_values(in) == expected);
      }
    }
  }
  CHECK_FALSE(g->broken());
}

TEST_CASE("persistent ops run again on the same CUDA buffers and follow "
          "their contents") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_persistent");
  const size_t n = 1000;
  auto in = cuda_filled(col::dtype::float32, n, 0);
  auto out = cuda_filled(col::dtype::float32, n, 0);
  col::allreduce_options max;
  max.op = col::reduce_op::max;
  auto reduce = g->prepare_allreduce(in, out, max);
  REQUIRE_MESSAGE(reduce, col::render(reduce.error()));
  auto gather = g->prepare_allgather(in, out);
  REQUIRE_MESSAGE(gather, col::render(gather.error()));
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    // New contents, same buffer: the ops read whatever it holds now.
    auto values = pattern(col::dtype::float32, n, round + 1);
    auto fresh = cuda_tensor(col::dtype::float32, values);
    REQUIRE(cudaMemcpy(in.data(), fresh.data(), in.nbytes(),
                       cudaMemcpyDeviceToDevice) == cudaSuccess);
    auto err = round % 2 == 0 ? reduce->run() : reduce->start().wait();
    CHECK(col::render(err) == "none");
    CHECK(host_values(out) == values);
    REQUIRE(cudaMemset(out.data(), 0, out.nbytes()) == cudaSuccess);
    CHECK(col::render(gather->run()) == "none");
    CHECK(host_values(out) == values);
  }
  CHECK_FALSE(g->broken());
}

TEST_CASE("bitwise reduce ops are refused, naming backend, op and dtype") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_bitwise");
  for (auto t : {col::dtype::int8, col::dtype::uint8, col::dtype::int32,
                 col::dtype::int64}) {
    for (auto op :
         {col::reduce_op::band, col::reduce_op::bor, col::reduce_op::bxor}) {
      CAPTURE(name_of(t));
      CAPTURE(std::string{col::to_string(op)});
      auto x = cuda_filled(t, 4, 1);
      col::allreduce_options opts;
      opts.op = op;
      auto err = g->allreduce(x, x, opts).wait();
      CHECK(col::code_of(err) == col::errc::unsupported);
      auto text = col::render(err);
      CHECK(text.find("nccl") != std::string::npos);
      CHECK(text.find(std::string{col::to_string(op)}) != std::string::npos);
      CHECK(text.find(name_of(t)) != std::string::npos);
    }
  }
  // A refused op sends nothing: the group still works.
  CHECK_FALSE(g->broken());
  auto x = cuda_filled(col::dtype::float32, 4, 2);
  CHECK(outcome(g->allreduce(x, x)) == "none");
  CHECK(host_values(x) == std::vector<double>(4, 2));
}

TEST_CASE("overlapping CUDA buffers are refused and the in-place forms run") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_overlap");
  const auto f32 = col::dtype::float32;
  auto values = pattern(f32, 12);
  auto area = cuda_tensor(f32, values);
  auto at = [&](size_t first, size_t count) {
    return area.view().slice(first, count);
  };
  auto refused = [&](const std::string& op, const col::work& w) {
    CAPTURE(op);
    auto err = w.wait();
    CHECK(col::code_of(err) == col::errc::invalid_argument);
    auto text = col::render(err);
    CHECK(text.find("overlap") != std::string::npos);
    CHECK(text.find(op) != std::string::npos);
  };
  // Device addresses overlap like host ones: refused before NCCL sees them
  // (NCCL would read input it had already overwritten).
  refused("allreduce", g->allreduce(at(0, 6), at(1, 6)));
  refused("broadcast", g->broadcast(at(0, 6), at(2, 6)));
  refused("reduce", g->reduce(at(0, 6), at(3, 6)));
  refused("reduce_scatter", g->reduce_scatter(at(0, 6), at(3, 6)));
  refused("scatter", g->scatter(at(0, 6), at(4, 6)));
  refused("alltoall", g->alltoall(at(0, 6), at(5, 6)));
  refused("allgather", g->allgather(at(1, 6), at(0, 6)));
  CHECK(host_values(area) == values); // nothing was written
  // The in-place forms: the same buffer, and (one rank) its own block.
  CHECK(outcome(g->allreduce(at(0, 6), at(0, 6))) == "none");
  CHECK(outcome(g->allgather(at(6, 6), at(6, 6))) == "none");
  CHECK(outcome(g->gather(at(6, 6), at(6, 6))) == "none");
  CHECK(host_values(area) == values);
  CHECK_FALSE(g->broken());
}

TEST_CASE("host tensors are refused by the NCCL backend up front") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_host");
  std::vector<float> xs{1, 2, 3};
  auto err = g->allreduce(col::view_of(xs), col::view_of(xs)).wait();
  CHECK(col::code_of(err) == col::errc::unsupported);
  CHECK(col::render(err).find("nccl") != std::string::npos);
  CHECK(col::render(err).find("cpu") != std::string::npos);
  CHECK_FALSE(g->broken());
}

TEST_CASE("send and recv need a peer: one rank alone is refused") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_p2p_alone");
  auto x = cuda_filled(col::dtype::float32, 4, 1);
  col::send_options so;
  so.peer = 0;
  CHECK(col::code_of(g->send(x, so).wait()) == col::errc::invalid_argument);
  col::recv_options ro;
  ro.peer = 0;
  CHECK(col::code_of(g->recv(x, ro).wait()) == col::errc::invalid_argument);
}

TEST_CASE("CUDA tensors come from tensor::empty, zeros and clone") {
  if (!gpu_present()) return;
  auto z =
    col::tensor::zeros(col::dtype::float64, {3, 5}, col::device::cuda(0));
  REQUIRE_MESSAGE(z, col::render(z.error()));
  CHECK(z->dev() == col::device::cuda(0));
  CHECK(host_values(*z) == std::vector<double>(15, 0));
  auto x = cuda_tensor(col::dtype::int32, pattern(col::dtype::int32, 9));
  auto copy = x.clone();
  REQUIRE_MESSAGE(copy, col::render(copy.error()));
  CHECK(copy->data() != x.data());
  CHECK(host_values(*copy) == pattern(col::dtype::int32, 9));
  auto none = col::tensor::empty(col::dtype::int8, {0}, col::device::cuda(0));
  REQUIRE(none);
  CHECK(none->numel() == 0);
  auto beyond = col::tensor::empty(col::dtype::float32, {4},
                                   col::device::cuda(gpu_count()));
  REQUIRE_FALSE(beyond);
  CHECK(col::code_of(beyond.error()) == col::errc::invalid_argument);
  CHECK(col::render(beyond.error()).find("cuda:") != std::string::npos);
}
