// Two NCCL ranks in one process, one per GPU (NCCL refuses two ranks of a
// communicator on one device), so these cases need two GPUs and say
// SKIPPED otherwise: rooted ops off the root (run with NCCL_CHECK_POINTERS=1,
// see main_gpu.cpp), native and fallback; messages that share one
// communicator per ordered pair whatever their tags, with mismatches
// reported and drained; and a teardown of several communicators bounded by
// one timeout.
#include <chrono>
#include <functional>
#include <thread>

#include "backends/nccl/nccl_backend.hpp"
#include "backends/nccl/nccl_version.hpp"
#include "nccl_test_support.hpp"
#include "runtime/backend_factory.hpp"

using namespace nccl_test;
namespace d = caf_collective::detail;

namespace {

using clock_type = std::chrono::steady_clock;

bool two_gpus() {
  if (gpu_count() >= 2) return true;
  std::puts("SKIPPED: needs two CUDA devices");
  return false;
}

col::group_config
rank_config(const std::string& name, int rank, col::rendezvous_store_ptr store,
            col::milliseconds timeout = test_group_timeout()) {
  col::group_config cfg;
  cfg.name = name;
  cfg.world_size = 2;
  cfg.rank = rank;
  cfg.backend = "nccl";
  cfg.store = std::move(store);
  cfg.timeout = timeout;
  cfg.cuda_device = rank;
  return cfg;
}

/// Both ranks' backends, formed side by side.
std::pair<col::backend_ptr, col::backend_ptr>
backend_pair(const std::string& name,
             col::milliseconds timeout = test_group_timeout()) {
  auto store = col::make_in_process_store();
  caf::expected<col::backend_ptr> one{col::backend_ptr{}};
  std::thread other{
    [&] { one = d::make_nccl_backend(rank_config(name, 1, store, timeout)); }};
  auto zero = d::make_nccl_backend(rank_config(name, 0, store, timeout));
  other.join();
  REQUIRE_MESSAGE(zero, col::render(zero.error()));
  REQUIRE_MESSAGE(one, col::render(one.error()));
  return {std::move(*zero), std::move(*one)};
}

/// Runs fn(rank) for both ranks at once; each rank's CUDA work on its GPU.
void on_both(const std::function<void(int)>& fn) {
  std::thread other{[&] {
    cudaSetDevice(1);
    fn(1);
  }};
  cudaSetDevice(0);
  fn(0);
  other.join();
}

col::op_call call(uint64_t seq) {
  return {seq, 20s};
}

void rooted_ops_on_both(col::backend_ptr& b0, col::backend_ptr& b1) {
  const size_t n = 1000;
  auto t = col::dtype::float32;
  on_both([&](int rank) {
    auto& be = rank == 0 ? b0 : b1;
    uint64_t seq = 1;
    for (int root : {0, 1}) {
      // gather: rank r contributes pattern(salt r); off the root the output
      // is empty, which NCCL must never see as a null pointer.
      auto in = cuda_tensor(t, pattern(t, n, rank), rank);
      auto out = rank == root ? cuda_filled(t, 2 * n, 0, rank)
                              : cuda_filled(t, 0, 0, rank);
      col::gather_options go;
      go.root = root;
      CHECK_FALSE(be->gather(call(seq++), in, out, go));
      if (rank == root) {
        auto want = pattern(t, n, 0);
        auto second = pattern(t, n, 1);
        want.insert(want.end(), second.begin(), second.end());
        CHECK(host_values(out) == want);
      }
      // scatter: the root's input block r goes to rank r.
      std::vector<double> blocks;
      for (int r = 0; r < 2; ++r)
        for (auto v : pattern(t, n, 10 + r))
          blocks.push_back(v);
      auto src = rank == root ? cuda_tensor(t, blocks, rank)
                              : cuda_filled(t, 0, 0, rank);
      auto mine = cuda_filled(t, n, 0, rank);
      col::scatter_options so;
      so.root = root;
      CHECK_FALSE(be->scatter(call(seq++), src, mine, so));
      CHECK(host_values(mine) == pattern(t, n, 10 + rank));
    }
    // alltoall: block j of rank i goes to rank j.
    std::vector<double> send;
    for (int j = 0; j < 2; ++j)
      for (auto v : pattern(t, n, 20 + rank * 2 + j))
        send.push_back(v);
    auto in = cuda_tensor(t, send, rank);
    auto out = cuda_filled(t, 2 * n, 0, rank);
    CHECK_FALSE(be->alltoall(call(seq++), in, out, {}));
    std::vector<double> want;
    for (int i = 0; i < 2; ++i)
      for (auto v : pattern(t, n, 20 + i * 2 + rank))
        want.push_back(v);
    CHECK(host_values(out) == want);
  });
}

} // namespace

// -- findings 6 and 7

TEST_CASE("rooted ops off the root pass real buffers, natively and not") {
  if (!gpu_present() || !two_gpus()) return;
  {
    auto [b0, b1] = backend_pair("nccl_rooted_native");
    rooted_ops_on_both(b0, b1);
  }
  d::force_nccl_fallback(true);
  auto [b0, b1] = backend_pair("nccl_rooted_fallback");
  d::force_nccl_fallback(false);
  rooted_ops_on_both(b0, b1);
}

// -- finding 9

TEST_CASE("messages share one communicator per direction, whatever the tag") {
  if (!gpu_present() || !two_gpus()) return;
  auto [b0, b1] = backend_pair("nccl_pairs");
  auto t = col::dtype::int32;
  on_both([&, &b0 = b0, &b1 = b1](int rank) {
    for (uint32_t tag = 0; tag < 5; ++tag) {
      if (rank == 0) {
        auto x = cuda_tensor(t, pattern(t, 100, static_cast<int>(tag)), 0);
        col::send_options so;
        so.peer = 1;
        so.tag = tag;
        CHECK_FALSE(b0->send(call(tag), x, so));
      } else {
        auto y = cuda_filled(t, 100, 0, 1);
        col::recv_options ro;
        ro.peer = 0;
        ro.tag = tag;
        CHECK_FALSE(b1->recv(call(tag), y, ro));
        CHECK(host_values(y) == pattern(t, 100, static_cast<int>(tag)));
      }
    }
  });
  auto* n0 = dynamic_cast<d::nccl_backend*>(b0.get());
  auto* n1 = dynamic_cast<d::nccl_backend*>(b1.get());
  REQUIRE(n0 != nullptr);
  REQUIRE(n1 != nullptr);
  CHECK(n0->p2p_communicators() == 1);
  CHECK(n1->p2p_communicators() == 1);
  // A receive that expects another tag fails with mismatch and drains the
  // message, so the next one lines up.
  on_both([&, &b0 = b0, &b1 = b1](int rank) {
    if (rank == 0) {
      auto x = cuda_filled(t, 64, 5, 0);
      col::send_options so;
      so.peer = 1;
      so.tag = 7;
      CHECK_FALSE(b0->send(call(10), x, so));
      so.tag = 8;
      auto z = cuda_filled(t, 64, 9, 0);
      CHECK_FALSE(b0->send(call(11), z, so));
    } else {
      auto y = cuda_filled(t, 64, 0, 1);
      col::recv_options ro;
      ro.peer = 0;
      ro.tag = 6;
      auto err = b1->recv(call(10), y, ro);
      CHECK(col::code_of(err) == col::errc::mismatch);
      CHECK(col::render(err).find("has tag 7") != std::string::npos);
      ro.tag = 8;
      CHECK_FALSE(b1->recv(call(11), y, ro));
      CHECK(host_values(y) == std::vector<double>(64, 9));
    }
  });
  // The other direction: a second communicator, and no more.
  on_both([&, &b0 = b0, &b1 = b1](int rank) {
    auto x = cuda_filled(t, 8, 4, rank);
    if (rank == 1) {
      col::send_options so;
      so.peer = 0;
      so.tag = 99;
      CHECK_FALSE(b1->send(call(20), x, so));
    } else {
      col::recv_options ro;
      ro.peer = 1;
      ro.tag = 99;
      CHECK_FALSE(b0->recv(call(20), x, ro));
    }
  });
  CHECK(n0->p2p_communicators() == 2);
  CHECK(n1->p2p_communicators() == 2);
}

TEST_CASE("a backend's communicators finalize together within one timeout") {
  if (!gpu_present() || !two_gpus()) return;
  auto [b0, b1] = backend_pair("nccl_teardown", 2s);
  auto t = col::dtype::float32;
  // Both directions: each rank holds the main and two p2p communicators.
  on_both([&, &b0 = b0, &b1 = b1](int rank) {
    auto& be = rank == 0 ? b0 : b1;
    auto x = cuda_filled(t, 8, 1, rank);
    col::send_options so;
    so.peer = 1 - rank;
    col::recv_options ro;
    ro.peer = 1 - rank;
    std::thread sender{[&] {
      cudaSetDevice(rank);
      CHECK_FALSE(be->send(call(1), x, so));
    }};
    auto y = cuda_filled(t, 8, 0, rank);
    CHECK_FALSE(be->recv(call(1), y, ro));
    sender.join();
  });
  // Rank 1 keeps its end: rank 0's finalizes cannot complete with it, so
  // its teardown ends at the shared deadline, not at three of them.
  auto start = clock_type::now();
  b0.reset();
  CHECK(clock_type::now() - start < 5s);
  b1->abort("test over");
}
