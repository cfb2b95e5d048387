// multigpu_group: one NCCL rank per device of a member, over the same code
// as the backend. One member with one device runs anywhere with a GPU; with
// two or more GPUs the member drives them all and the sums are real.
#include "nccl_test_support.hpp"

using namespace nccl_test;

namespace {

std::unique_ptr<col::multigpu_group> solo_multigpu(const std::string& name,
                                                   std::vector<int> devices) {
  col::multigpu_config cfg;
  cfg.name = name;
  cfg.world_size = 1;
  cfg.rank = 0;
  cfg.cuda_devices = std::move(devices);
  cfg.store = col::make_in_process_store();
  cfg.timeout = test_group_timeout();
  auto result = col::multigpu_group::create(std::move(cfg));
  REQUIRE_MESSAGE(result, col::render(result.error()));
  return std::move(*result);
}

} // namespace

TEST_CASE("a multi-GPU group runs every op over all of a member's devices") {
  if (!gpu_present()) return;
  std::vector<int> devices;
  for (int i = 0; i < gpu_count(); ++i)
    devices.push_back(i);
  auto ndev = devices.size();
  auto g = solo_multigpu("multigpu_all", devices);
  CHECK(g->nccl_world_size() == static_cast<int>(ndev));
  for (auto t : col::all_dtypes) {
    CAPTURE(std::string{col::to_string(t)});
    const size_t n = 33;
    std::vector<col::tensor> owned;
    std::vector<col::tensor_view> xs;
    for (size_t d = 0; d < ndev; ++d) {
      owned.push_back(
        cuda_filled(t, n, static_cast<double>(d + 1), devices[d]));
      xs.push_back(owned.back());
    }
    // Sum over devices of (d + 1).
    auto total = static_cast<double>(ndev * (ndev + 1) / 2);
    REQUIRE_FALSE(g->allreduce(xs));
    for (auto& x : xs)
      CHECK(host_values(x) == std::vector<double>(n, total));
    col::multigpu_broadcast_options bo;
    bo.root_device = ndev - 1;
    std::vector<col::tensor> bouts;
    std::vector<col::tensor_view> bviews;
    for (size_t d = 0; d < ndev; ++d) {
      bouts.push_back(cuda_filled(t, n, 0, devices[d]));
      bviews.push_back(bouts.back());
    }
    auto src = cuda_tensor(t, pattern(t, n), devices[ndev - 1]);
    std::vector<col::tensor_view> bins(ndev, col::tensor_view{});
    bins[ndev - 1] = src;
    REQUIRE_FALSE(g->broadcast(bins, bviews, bo));
    for (auto& x : bviews)
      CHECK(host_values(x) == pattern(t, n));
    std::vector<col::tensor> gathered;
    std::vector<col::tensor_view> gviews;
    for (size_t d = 0; d < ndev; ++d) {
      gathered.push_back(cuda_filled(t, n * ndev, 0, devices[d]));
      gviews.push_back(gathered.back());
    }
    REQUIRE_FALSE(g->allgather(bviews, gviews));
    for (auto& x : gviews) {
      std::vector<double> want;
      for (size_t d = 0; d < ndev; ++d)
        for (auto v : pattern(t, n))
          want.push_back(v);
      CHECK(host_values(x) == want);
    }
    std::vector<col::tensor> scattered;
    std::vector<col::tensor_view> sviews;
    for (size_t d = 0; d < ndev; ++d) {
      scattered.push_back(cuda_filled(t, n, 0, devices[d]));
      sviews.push_back(scattered.back());
    }
    col::reduce_scatter_options ro;
    ro.op = col::reduce_op::max;
    REQUIRE_FALSE(g->reduce_scatter(gviews, sviews, ro));
    for (auto& x : sviews)
      CHECK(host_values(x) == pattern(t, n));
    col::multigpu_reduce_options mo;
    mo.op = col::reduce_op::min;
    auto rout = cuda_filled(t, n, 9, devices[0]);
    std::vector<col::tensor_view> routs(ndev, col::tensor_view{});
    routs[0] = rout;
    REQUIRE_FALSE(g->reduce(bviews, routs, mo));
    CHECK(host_values(rout) == pattern(t, n));
  }
  CHECK_FALSE(g->barrier());
  CHECK_FALSE(g->broken());
}

TEST_CASE("a multi-GPU group refuses tensors that do not fit its devices") {
  if (!gpu_present()) return;
  auto g = solo_multigpu("multigpu_bad", {0});
  auto x = cuda_filled(col::dtype::float32, 8, 1);
  auto y = cuda_filled(col::dtype::float32, 9, 1);
  col::tensor_view xv = x;
  col::tensor_view yv = y;
  std::vector<col::tensor_view> two{xv, xv};
  CHECK(col::code_of(g->allreduce(two)) == col::errc::invalid_argument);
  CHECK(col::code_of(g->allreduce({&xv, 1}, {&yv, 1})) ==
        col::errc::invalid_argument);
  std::vector<float> host(8, 1);
  auto hv = col::view_of(host);
  auto err = g->allreduce({&hv, 1});
  CHECK(col::code_of(err) == col::errc::invalid_argument);
  CHECK(col::render(err).find("cpu") != std::string::npos);
  col::allreduce_options bitwise;
  bitwise.op = col::reduce_op::bxor;
  auto ints = cuda_filled(col::dtype::int32, 8, 1);
  col::tensor_view iv = ints;
  CHECK(col::code_of(g->allreduce({&iv, 1}, bitwise)) ==
        col::errc::unsupported);
  // None of these reached NCCL: the group still works.
  CHECK_FALSE(g->broken());
  CHECK_FALSE(g->allreduce({&xv, 1}));
}
