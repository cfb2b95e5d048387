// The review findings of issue 14 that need a GPU, on one device: abort
// never waits for the caller's stream, formation stops when aborted, the
// backend's memory never synchronizes the device, the send/recv fallback
// of gather, scatter and alltoall is right, and communicators share a
// device through the device gate. (Two-rank cases: test_nccl_pairs.cpp.)
#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/backend_factory.hpp"
#include "backends/nccl/nccl_backend.hpp"
#include "backends/nccl/nccl_device_gate.hpp"
#include "backends/nccl/nccl_version.hpp"
#include "nccl_test_support.hpp"

using namespace nccl_test;
namespace d = caf_collective::detail;

namespace {

using clock_type = std::chrono::steady_clock;

bool mentions(const caf::error& err, const std::string& needle) {
  return col::render(err).find(needle) != std::string::npos;
}

col::group_config pair_config(const std::string& name, int rank,
                              col::rendezvous_store_ptr store,
                              col::milliseconds timeout) {
  col::group_config cfg;
  cfg.name = name;
  cfg.world_size = 2;
  cfg.rank = rank;
  cfg.backend = "nccl";
  cfg.store = std::move(store);
  cfg.timeout = timeout;
  cfg.cuda_device = 0;
  return cfg;
}

/// Sets `flag` after `delay` on a thread of its own.
std::thread raise_after(std::atomic<bool>& flag, col::milliseconds delay) {
  return std::thread{[&flag, delay] {
    std::this_thread::sleep_for(delay);
    flag = true;
  }};
}

} // namespace

// -- finding 1

TEST_CASE("abort returns at once while the caller's default stream is held") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_abort_held", 60s);
  auto x = cuda_filled(col::dtype::float32, 64, 1);
  REQUIRE(outcome(g->allreduce(x, x)) == "none");
  stream_blocker block{30s};
  auto w = g->allreduce(x, x);
  std::this_thread::sleep_for(200ms);
  auto start = clock_type::now();
  g->abort("test abort");
  // The stream is still held: abort did not wait for it.
  CHECK(clock_type::now() - start < 2s);
  CHECK(cudaStreamQuery(cudaStreamLegacy) == cudaErrorNotReady);
  CHECK(col::code_of(w.wait()) == col::errc::aborted);
  block.open();
}

TEST_CASE("an op that timed out behind the caller's work never writes later") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_untouched");
  auto in = cuda_filled(col::dtype::float32, 256, 5);
  auto out = cuda_filled(col::dtype::float32, 256, 7);
  caf::error err;
  {
    stream_blocker block{30s};
    col::allreduce_options opts;
    opts.timeout = 300ms;
    err = g->allreduce(in, out, opts).wait();
    // The failed op came back while the caller's work still holds the
    // stream: its cleanup did not wait for that work either.
    CHECK(cudaStreamQuery(cudaStreamLegacy) == cudaErrorNotReady);
    block.open();
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(col::code_of(err) == col::errc::timeout);
  CHECK(mentions(err, "never started"));
  // Nothing was queued behind the caller's work: the output is as it was.
  CHECK(host_values(out) == std::vector<double>(256, 7));
}

// -- finding 4

TEST_CASE("formation stops when aborted while waiting for the unique id") {
  if (!gpu_present()) return;
  auto cfg =
    pair_config("nccl_cancel_fetch", 1, col::make_in_process_store(), 60s);
  std::atomic<bool> cancel{false};
  auto aborter = raise_after(cancel, 100ms);
  auto start = clock_type::now();
  auto be = d::make_nccl_backend(cfg, &cancel);
  aborter.join();
  REQUIRE_FALSE(be);
  CHECK(col::code_of(be.error()) == col::errc::aborted);
  CHECK(clock_type::now() - start < 2s);
}

TEST_CASE("formation stops when aborted inside NCCL's communicator init") {
  if (!gpu_present()) return;
  // Rank 0 publishes the id and waits in init for a rank 1 that never comes.
  auto cfg =
    pair_config("nccl_cancel_init", 0, col::make_in_process_store(), 60s);
  std::atomic<bool> cancel{false};
  auto aborter = raise_after(cancel, 300ms);
  auto start = clock_type::now();
  auto be = d::make_nccl_backend(cfg, &cancel);
  aborter.join();
  REQUIRE_FALSE(be);
  CHECK(col::code_of(be.error()) == col::errc::aborted);
  CHECK(clock_type::now() - start < 10s);
}

// -- finding 5

TEST_CASE("the backend's memory never waits for other work on the device") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_no_sync");
  auto small = cuda_filled(col::dtype::int32, 16, 3);
  col::allreduce_options avg;
  avg.op = col::reduce_op::avg;
  REQUIRE(outcome(g->allreduce(small, small, avg)) == "none");
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) ==
          cudaSuccess);
  auto large = cuda_filled(col::dtype::int32, 1 << 20, 3);
  auto start = clock_type::now();
  {
    // Work of someone else that does not finish for a while: a device-wide
    // synchronization (cudaFree, cudaFreeHost) would wait for it.
    stream_blocker busy{10s, side};
    // Grows the device scratch (stream-ordered free and allocation) and the
    // pinned staging (from the cache; the old block is kept, not freed).
    CHECK(outcome(g->allreduce(large, large, avg)) == "none");
    CHECK(outcome(g->barrier()) == "none");
    CHECK(clock_type::now() - start < 5s);
    busy.open();
  }
  CHECK(host_values(large) == std::vector<double>(1 << 20, 3));
  cudaStreamDestroy(side);
}

// -- finding 7

TEST_CASE("gather, scatter and alltoall are right on the send/recv fallback") {
  if (!gpu_present()) return;
  d::force_nccl_fallback(true);
  auto g = solo_group("nccl_fallback");
  d::force_nccl_fallback(false);
  for (auto t : col::all_dtypes) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{65536}}) {
      CAPTURE(std::string{col::to_string(t)});
      CAPTURE(n);
      auto expected = pattern(t, n);
      auto in = cuda_tensor(t, expected);
      auto out = cuda_filled(t, n, 3);
      CHECK(outcome(g->gather(in, out)) == "none");
      CHECK(host_values(out) == expected);
      out = cuda_filled(t, n, 3);
      CHECK(outcome(g->scatter(in, out)) == "none");
      CHECK(host_values(out) == expected);
      out = cuda_filled(t, n, 3);
      CHECK(outcome(g->alltoall(in, out)) == "none");
      CHECK(host_values(out) == expected);
    }
  }
}

// -- finding 8

TEST_CASE("two groups on one device run side by side and give slots back") {
  if (!gpu_present()) return;
  auto a = solo_group("nccl_side_a");
  auto b = solo_group("nccl_side_b");
  auto run = [](col::group_ptr g, std::atomic<int>& failures) {
    auto x = cuda_filled(col::dtype::float32, 4096, 1);
    for (int i = 0; i < 200; ++i)
      if (outcome(g->allreduce(x, x)) != "none") ++failures;
  };
  std::atomic<int> failures{0};
  std::thread ta{run, a, std::ref(failures)};
  std::thread tb{run, b, std::ref(failures)};
  ta.join();
  tb.join();
  CHECK(failures.load() == 0);
  CHECK(d::device_gate::instance().active(0) == 0);
}

TEST_CASE("an op waits for a free slot on its device, within its deadline") {
  if (!gpu_present()) return;
  auto& gate = d::device_gate::instance();
  std::vector<int> all_slots(static_cast<size_t>(d::slots_per_device), 0);
  auto x = cuda_filled(col::dtype::float32, 64, 1);
  {
    auto g = solo_group("nccl_gate_full");
    REQUIRE(gate.try_enter(all_slots));
    col::allreduce_options opts;
    opts.timeout = 300ms;
    auto err = g->allreduce(x, x, opts).wait();
    gate.leave(all_slots);
    CHECK(col::code_of(err) == col::errc::timeout);
    CHECK(mentions(err, "other NCCL operations"));
  }
  auto g = solo_group("nccl_gate_freed");
  REQUIRE(gate.try_enter(all_slots));
  std::thread freer{[&] {
    std::this_thread::sleep_for(200ms);
    gate.leave(all_slots);
  }};
  CHECK(outcome(g->allreduce(x, x)) == "none");
  freer.join();
  CHECK(gate.active(0) == 0);
}
