// Failure handling of the NCCL backend on one GPU: an op that cannot
// finish times out and aborts the communicator; abort() from another thread
// stops a running op; a rank that never comes makes formation time out.
//
// An op is made to hang by blocking the legacy default stream with a host
// function: every op waits (on the host) for the caller's work there before
// it enqueues anything.
#include <atomic>
#include <chrono>
#include <thread>

#include "nccl_test_support.hpp"
#include "runtime/backend_factory.hpp"

using namespace nccl_test;

namespace {

using clock_type = std::chrono::steady_clock;

bool mentions(const caf::error& err, const std::string& needle) {
  return col::render(err).find(needle) != std::string::npos;
}

} // namespace

TEST_CASE("an op that cannot finish times out, aborts and breaks the group") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_timeout");
  auto x = cuda_filled(col::dtype::float32, 256, 1);
  REQUIRE(outcome(g->allreduce(x, x)) == "none"); // warm up
  caf::error err;
  auto start = clock_type::now();
  {
    stream_blocker block;
    col::allreduce_options opts;
    opts.timeout = 300ms;
    err = g->allreduce(x, x, opts).wait();
  }
  auto took = clock_type::now() - start;
  CHECK(col::code_of(err) == col::errc::timeout);
  CHECK(mentions(err, "did not complete within 300 ms"));
  CHECK(mentions(err, "aborted"));
  CHECK(took >= 300ms);
  CHECK(took < 20s);
  CHECK(g->broken());
  auto later = g->allreduce(x, x).wait();
  CHECK(col::code_of(later) == col::errc::aborted);
}

TEST_CASE("abort from another thread stops the backend's running op") {
  if (!gpu_present()) return;
  col::group_config cfg;
  cfg.name = "nccl_abort_backend";
  cfg.world_size = 1;
  cfg.rank = 0;
  cfg.backend = "nccl";
  cfg.store = col::make_in_process_store();
  cfg.timeout = 60s;
  auto be = col::detail::make_nccl_backend(cfg);
  REQUIRE_MESSAGE(be, col::render(be.error()));
  auto& backend = **be;
  auto x = cuda_filled(col::dtype::int32, 64, 1);
  col::op_call call{1, 60s};
  REQUIRE_FALSE(backend.allreduce(call, x, x, {}));
  caf::error err;
  auto start = clock_type::now();
  {
    stream_blocker block;
    std::thread runner{[&] { err = backend.allreduce(call, x, x, {}); }};
    std::this_thread::sleep_for(200ms);
    backend.abort("test abort");
    // abort() returns only once the op let go of its buffers.
    block.open();
    runner.join();
  }
  CHECK(clock_type::now() - start < 20s);
  CHECK(col::code_of(err) == col::errc::aborted);
  CHECK(mentions(err, "test abort"));
  auto later = backend.barrier(call, {});
  CHECK(col::code_of(later) == col::errc::aborted);
}

TEST_CASE("group abort fails a running NCCL op at once and breaks the group") {
  if (!gpu_present()) return;
  auto g = solo_group("nccl_abort_group", 60s);
  auto x = cuda_filled(col::dtype::float32, 64, 1);
  REQUIRE(outcome(g->allreduce(x, x)) == "none");
  caf::error err;
  {
    stream_blocker block;
    auto w = g->allreduce(x, x);
    std::this_thread::sleep_for(200ms);
    CHECK_FALSE(w.ready());
    std::thread aborter{[&] { g->abort("peer gone (test)"); }};
    err = w.wait();
    aborter.join();
  }
  CHECK(col::code_of(err) == col::errc::aborted);
  CHECK(g->broken());
  CHECK(col::code_of(g->barrier().wait()) == col::errc::aborted);
}

TEST_CASE("formation fails with timeout when the other rank never comes") {
  if (!gpu_present()) return;
  auto store = col::make_in_process_store();
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    col::group_config cfg;
    cfg.name = "nccl_alone_" + std::to_string(rank);
    cfg.world_size = 2;
    cfg.rank = rank;
    cfg.backend = "nccl";
    cfg.store = store;
    cfg.timeout = 1500ms;
    auto start = clock_type::now();
    auto g = col::group::create(cfg);
    auto took = clock_type::now() - start;
    REQUIRE_FALSE(g);
    CHECK(col::code_of(g.error()) == col::errc::timeout);
    CHECK(took < 20s);
    // Rank 1 waits for rank 0's formation, before any key of NCCL's.
    if (rank == 1) CHECK(mentions(g.error(), "rank 0 never joined"));
    if (rank == 0) CHECK(mentions(g.error(), "rank 1 never joined"));
  }
}

TEST_CASE("a rank learns at once that rank 0 could not form the group") {
  if (!gpu_present()) return;
  auto store = col::make_in_process_store();
  // Rank 0 asks for a device this process does not have.
  col::group_config bad;
  bad.name = "nccl_bad_root";
  bad.world_size = 2;
  bad.rank = 0;
  bad.backend = "nccl";
  bad.store = store;
  bad.timeout = 10s;
  bad.cuda_device = gpu_count();
  auto other = bad;
  other.rank = 1;
  other.cuda_device = 0;
  // Rank 1 waits already when rank 0 refuses: it fails at once, quoting it.
  std::thread root{[&] {
    std::this_thread::sleep_for(300ms);
    auto refused = col::group::create(bad);
    CHECK_FALSE(refused);
    if (!refused)
      CHECK(col::code_of(refused.error()) == col::errc::invalid_argument);
  }};
  auto start = clock_type::now();
  auto g = col::group::create(other);
  root.join();
  REQUIRE_FALSE(g);
  CHECK(clock_type::now() - start < 5s);
  CHECK(mentions(g.error(), "rank 0 could not create"));
  CHECK(mentions(g.error(), "CUDA device"));
}
