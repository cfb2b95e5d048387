// What the NCCL build must get right on any machine, GPU or not: the
// capability answers, the mapping onto NCCL's types, refusals of what NCCL
// cannot do, and clear errors (never a crash or a hang) when there is no
// GPU to run on.
#include <chrono>

#include "runtime/backend_factory.hpp"
#include "vocabulary/device_memory.hpp"
#include "backends/nccl/nccl_backend.hpp"
#include "backends/nccl/nccl_ops.hpp"
#include "backends/nccl/nccl_util.hpp"
#include "nccl_test_support.hpp"

using namespace nccl_test;
namespace d = caf_collective::detail;

namespace {

bool mentions(const caf::error& err, const std::string& needle) {
  return col::render(err).find(needle) != std::string::npos;
}

col::group_config nccl_config(const std::string& name, int world_size = 1,
                              int rank = 0) {
  col::group_config cfg;
  cfg.name = name;
  cfg.world_size = world_size;
  cfg.rank = rank;
  cfg.backend = "nccl";
  cfg.store = col::make_in_process_store();
  cfg.timeout = std::chrono::seconds{5};
  return cfg;
}

} // namespace

TEST_CASE("the NCCL backend supports every op and dtype on CUDA, none on cpu") {
  // supports() needs no communicator.
  d::nccl_backend backend{nccl_config("caps"), nullptr};
  CHECK(backend.name() == "nccl");
  for (auto op : col::all_op_kinds) {
    for (auto t : col::all_dtypes) {
      CHECK(backend.supports(op, col::device_kind::cuda, t));
      CHECK_FALSE(backend.supports(op, col::device_kind::cpu, t));
    }
  }
}

TEST_CASE("every dtype and every arithmetic reduce op maps onto NCCL's") {
  CHECK(d::to_nccl(col::dtype::int8) == ncclInt8);
  CHECK(d::to_nccl(col::dtype::uint8) == ncclUint8);
  CHECK(d::to_nccl(col::dtype::int32) == ncclInt32);
  CHECK(d::to_nccl(col::dtype::int64) == ncclInt64);
  CHECK(d::to_nccl(col::dtype::float16) == ncclFloat16);
  CHECK(d::to_nccl(col::dtype::bfloat16) == ncclBfloat16);
  CHECK(d::to_nccl(col::dtype::float32) == ncclFloat32);
  CHECK(d::to_nccl(col::dtype::float64) == ncclFloat64);
  CHECK(d::to_nccl(col::reduce_op::sum) == ncclSum);
  CHECK(d::to_nccl(col::reduce_op::product) == ncclProd);
  CHECK(d::to_nccl(col::reduce_op::min) == ncclMin);
  CHECK(d::to_nccl(col::reduce_op::max) == ncclMax);
  CHECK(d::to_nccl(col::reduce_op::avg) == ncclAvg);
  CHECK_FALSE(d::to_nccl(col::reduce_op::band));
  CHECK_FALSE(d::to_nccl(col::reduce_op::bor));
  CHECK_FALSE(d::to_nccl(col::reduce_op::bxor));
}

TEST_CASE("bitwise reduce ops are unsupported on integers, invalid on floats") {
  col::error_context where{"g", col::op_kind::allreduce, 4, 0, 1};
  for (auto t : col::all_dtypes) {
    for (auto op : col::all_reduce_ops) {
      CAPTURE(std::string{col::to_string(t)});
      CAPTURE(std::string{col::to_string(op)});
      auto err = d::check_nccl_reduce_op(where, op, t);
      if (!col::is_bitwise(op)) {
        CHECK_FALSE(err);
      } else if (col::is_integral(t)) {
        CHECK(col::code_of(err) == col::errc::unsupported);
        CHECK(mentions(err, "backend nccl"));
        CHECK(mentions(err, std::string{col::to_string(op)}));
        CHECK(mentions(err, std::string{col::to_string(t)}));
        CHECK(mentions(err, "group 'g' allreduce seq 4"));
      } else {
        CHECK(col::code_of(err) == col::errc::invalid_argument);
      }
    }
  }
}

TEST_CASE(
  "NCCL errors carry NCCL's own name and message, and who is at fault") {
  auto text = d::nccl_text(ncclInvalidUsage, nullptr);
  CHECK(text.find("ncclInvalidUsage") != std::string::npos);
  CHECK(text.find(ncclGetErrorString(ncclInvalidUsage)) != std::string::npos);
  CHECK(d::errc_of(ncclRemoteError) == col::errc::peer_lost);
  CHECK(d::errc_of(ncclSystemError) == col::errc::backend_error);
  auto err = d::nccl_error({}, "ncclAllReduce", ncclInvalidArgument, nullptr);
  CHECK(col::code_of(err) == col::errc::backend_error);
  CHECK(mentions(err, "ncclAllReduce failed"));
  CHECK(mentions(err, "arguments"));
  auto cuda = d::cuda_error({}, "cudaMalloc", cudaErrorMemoryAllocation);
  CHECK(col::code_of(cuda) == col::errc::out_of_memory);
  CHECK(mentions(cuda, "cudaErrorMemoryAllocation"));
}

TEST_CASE("host memory works in the CUDA build: aligned, copied, zeroed") {
  auto mem = d::allocate_memory(col::device::cpu(), 100);
  REQUIRE(mem);
  CHECK(reinterpret_cast<uintptr_t>(mem->get()) % 64 == 0);
  std::vector<char> src(100, 'x');
  REQUIRE_FALSE(d::copy_memory(mem->get(), col::device::cpu(), src.data(),
                               col::device::cpu(), 100));
  CHECK(static_cast<char*>(mem->get())[99] == 'x');
  REQUIRE_FALSE(d::zero_memory(mem->get(), col::device::cpu(), 100));
  CHECK(static_cast<char*>(mem->get())[42] == 0);
  auto t = col::tensor::zeros(col::dtype::int64, {4});
  REQUIRE(t);
  CHECK(t->dev().is_cpu());
}

TEST_CASE("the library and the runtime agree on the number of CUDA devices") {
  CHECK(col::cuda_device_count() == gpu_count());
  CHECK(col::cuda_device_count() >= 0);
}

TEST_CASE("without a GPU, CUDA memory and NCCL groups fail with clear errors") {
  if (gpu_count() > 0) {
    std::puts("SKIPPED: this case is about machines without a CUDA device");
    return;
  }
  auto t = col::tensor::empty(col::dtype::float32, {8}, col::device::cuda(0));
  REQUIRE_FALSE(t);
  CHECK(col::code_of(t.error()) == col::errc::unsupported);
  CHECK(mentions(t.error(), "cuda:0"));
  CHECK(mentions(t.error(), "no usable CUDA device"));
  auto z = col::tensor::zeros(col::dtype::int8, {1}, col::device::cuda(0));
  CHECK_FALSE(z);
  // Rank 0 fails at once, and publishes why, so rank 1 does not wait for
  // its deadline.
  auto cfg = nccl_config("no_gpu", 2, 0);
  auto start = std::chrono::steady_clock::now();
  auto g = col::group::create(cfg);
  REQUIRE_FALSE(g);
  CHECK(col::code_of(g.error()) == col::errc::unsupported);
  CHECK(mentions(g.error(), "needs a CUDA device"));
  CHECK(mentions(g.error(), "group 'no_gpu'"));
  auto be = d::make_nccl_backend(nccl_config("no_gpu_direct"));
  REQUIRE_FALSE(be);
  CHECK(col::code_of(be.error()) == col::errc::unsupported);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds{4});
  col::multigpu_config mcfg;
  mcfg.name = "no_gpu_multi";
  mcfg.world_size = 1;
  mcfg.rank = 0;
  mcfg.cuda_devices = {0};
  mcfg.store = col::make_in_process_store();
  auto mg = col::multigpu_group::create(mcfg);
  REQUIRE_FALSE(mg);
  CHECK(col::code_of(mg.error()) == col::errc::unsupported);
}

TEST_CASE(
  "a multi-GPU group refuses a bad configuration before any CUDA call") {
  col::multigpu_config cfg;
  cfg.name = "bad";
  cfg.world_size = 2;
  cfg.rank = 0;
  cfg.store = col::make_in_process_store();
  auto none = col::multigpu_group::create(cfg);
  REQUIRE_FALSE(none);
  CHECK(col::code_of(none.error()) == col::errc::invalid_argument);
  CHECK(mentions(none.error(), "no CUDA devices"));
  cfg.cuda_devices = {0, 0};
  auto twice = col::multigpu_group::create(cfg);
  REQUIRE_FALSE(twice);
  CHECK(mentions(twice.error(), "appears twice"));
  cfg.cuda_devices = {0};
  cfg.rank = 2;
  auto rank = col::multigpu_group::create(cfg);
  REQUIRE_FALSE(rank);
  CHECK(mentions(rank.error(), "rank 2"));
}
