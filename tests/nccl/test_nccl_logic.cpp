// The NCCL backend's logic that needs no GPU: the issue section's lock
// scope, the version fallback choice and the run-time lookup of NCCL's newer
// calls, the pair-to-communicator mapping of messages and their headers,
// the abortable unique-id fetch against a store that never answers, the
// pinned-memory cache, the device gate, and the buffers of rooted ops.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <set>
#include <thread>

#include "backends/nccl/nccl_device_gate.hpp"
#include "backends/nccl/nccl_issue.hpp"
#include "backends/nccl/nccl_ops.hpp"
#include "backends/nccl/nccl_p2p.hpp"
#include "backends/nccl/nccl_pinned.hpp"
#include "backends/nccl/nccl_rendezvous.hpp"
#include "backends/nccl/nccl_version.hpp"
#include "nccl_test_support.hpp"

using namespace nccl_test;
namespace d = caf_collective::detail;
using clock_type = std::chrono::steady_clock;

namespace {

bool mentions(const caf::error& err, const std::string& needle) {
  return col::render(err).find(needle) != std::string::npos;
}

/// Runs `fn` on a thread of its own and fails (instead of hanging the
/// suite) if it does not return within `limit`: a self-deadlock shows as
/// a failure. A thread that hangs is left behind and the process exits.
template<class Fn>
bool returns_within(std::chrono::milliseconds limit, Fn fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread{[fn, done] {
    fn();
    done->set_value();
  }}.detach();
  if (finished.wait_for(limit) == std::future_status::ready) return true;
  std::fputs("a call deadlocked; giving up\n", stderr);
  std::quick_exit(1);
}

/// A store that never answers: every get waits for its whole timeout and
/// fails with timeout, as a store whose key never appears.
class silent_store : public col::rendezvous_store {
 public:
  caf::error set(const std::string&, const std::vector<char>&) override {
    return {};
  }

  caf::expected<std::vector<char>>
  get(const std::string& key, std::chrono::milliseconds timeout) override {
    ++calls;
    auto longest = longest_wait.load();
    while (timeout.count() > longest &&
           !longest_wait.compare_exchange_weak(longest, timeout.count())) {
    }
    std::this_thread::sleep_for(timeout);
    return col::make_error(col::errc::timeout, "key '" + key + "' not set");
  }

  std::atomic<int> calls{0};
  std::atomic<int64_t> longest_wait{0};
};

/// A store whose get fails at once with `code`.
class broken_store : public col::rendezvous_store {
 public:
  caf::error set(const std::string&, const std::vector<char>&) override {
    return {};
  }

  caf::expected<std::vector<char>> get(const std::string&,
                                       std::chrono::milliseconds) override {
    return col::make_error(col::errc::backend_error, "connection refused");
  }
};

col::error_context where() {
  return {"g", col::op_kind::recv, 3, 1, 2};
}

} // namespace

// -- finding 2 and 3: the issue mutex is held from group start to group end
// -- only, and failures are reported after it is released

TEST_CASE("the issue mutex is held exactly while a group call is issued") {
  CHECK_FALSE(d::issuing_on_this_thread());
  bool inside = false;
  auto body = [&]() -> caf::error {
    inside = d::issuing_on_this_thread();
    return {};
  };
  auto out = d::issue_group(where(), "test", nullptr, body);
  CHECK_FALSE(out.err);
  CHECK(inside);
  CHECK_FALSE(d::issuing_on_this_thread());
}

TEST_CASE("a failed group call reports after releasing the issue mutex") {
  // The old self-deadlock: an error path that aborts (and issues again)
  // while the same thread still holds the mutex. Here the error handler
  // issues another group call on the same thread; it must not block.
  CHECK(returns_within(5s, [] {
    auto failing = []() -> caf::error {
      return col::make_error(col::errc::backend_error, "enqueue failed");
    };
    auto out = d::issue_group(where(), "test", nullptr, failing);
    CHECK(mentions(out.err, "enqueue failed"));
    CHECK_FALSE(d::issuing_on_this_thread());
    auto again = []() -> caf::error { return {}; };
    CHECK_FALSE(
      d::issue_group(where(), "after the failure", nullptr, again).err);
  }));
}

TEST_CASE("group calls of several threads never interleave") {
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  auto worker = [&] {
    for (int i = 0; i < 200; ++i) {
      auto body = [&]() -> caf::error {
        auto now = ++inside;
        auto seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
        --inside;
        return {};
      };
      static_cast<void>(d::issue_group(where(), "test", nullptr, body));
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back(worker);
  for (auto& t : threads)
    t.join();
  CHECK(most.load() == 1);
}

TEST_CASE("another thread issues while this one waits outside the mutex") {
  // A lane that waits (for its kernels, a peer, a teardown) holds nothing
  // another lane needs to issue.
  auto body = []() -> caf::error { return {}; };
  CHECK_FALSE(d::issue_group(where(), "first", nullptr, body).err);
  CHECK(returns_within(5s, [&] {
    CHECK_FALSE(d::issue_group(where(), "second", nullptr, body).err);
  }));
}

// -- finding 7: NCCL's version decides between its own calls and grouped
// -- send/recv; the newer calls are looked up at run time

TEST_CASE("below NCCL 2.28 gather, scatter and alltoall use send/recv") {
  d::nccl_newer_calls all;
  all.gather = &ncclGather;
  all.scatter = &ncclScatter;
  all.alltoall = &ncclAlltoAll;
  CHECK(d::choose_nccl_paths(22703, all) == d::nccl_paths{});
  CHECK(d::choose_nccl_paths(21700, all) == d::nccl_paths{});
  CHECK(d::choose_nccl_paths(22800, all) == d::nccl_paths{true, true, true});
  CHECK(d::choose_nccl_paths(23001, all) == d::nccl_paths{true, true, true});
  // A call the lookup did not find falls back on its own.
  auto partial = all;
  partial.gather = nullptr;
  CHECK(d::choose_nccl_paths(22809, partial) ==
        d::nccl_paths{false, true, true});
  CHECK(d::choose_nccl_paths(22809, {}) == d::nccl_paths{});
}

TEST_CASE("NCCL older than 2.17 is refused with both versions named") {
  CHECK_FALSE(d::check_nccl_version(21700, where()));
  CHECK_FALSE(d::check_nccl_version(22809, where()));
  auto old = d::check_nccl_version(21603, where());
  CHECK(col::code_of(old) == col::errc::unsupported);
  CHECK(mentions(old, "2.17.0 or newer"));
  CHECK(mentions(old, "NCCL 2.16.3"));
  CHECK(mentions(d::check_nccl_version(0, where()), "unknown version"));
  CHECK(d::nccl_version_text(22809) == "2.28.9");
  CHECK(d::nccl_version_text(2804) == "2.8.4");
}

TEST_CASE("the newer calls are found at run time in the loaded libnccl") {
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  auto& loaded = d::loaded_nccl();
  CHECK(loaded.version == version);
  auto calls = d::find_newer_calls();
  if (version >= d::nccl_rooted_calls_version) {
    // The lookup lands on the same functions the header declares.
    CHECK((calls.gather == &ncclGather));
    CHECK((calls.scatter == &ncclScatter));
    CHECK((calls.alltoall == &ncclAlltoAll));
    CHECK(loaded.paths == d::nccl_paths{true, true, true});
  } else {
    CHECK(loaded.paths == d::nccl_paths{});
  }
  d::force_nccl_fallback(true);
  CHECK(d::paths_for_new_communicators() == d::nccl_paths{});
  d::force_nccl_fallback(false);
  CHECK(d::paths_for_new_communicators() == loaded.paths);
}

// -- finding 9: messages take one communicator per ordered pair, and carry
// -- their tag in a header

TEST_CASE("every tag between two ranks maps to the pair's communicator") {
  std::set<d::p2p_pair> communicators;
  for (uint32_t tag = 0; tag < 100; ++tag) {
    communicators.insert(d::p2p_pair_of(0, 1, tag));
    communicators.insert(d::p2p_pair_of(1, 0, tag));
  }
  // One per direction: each is used by one lane on either side (sends by
  // the send lane, receives by the main lane).
  CHECK(communicators.size() == 2);
  CHECK(d::p2p_pair_of(0, 1, 5) == d::p2p_pair{0, 1});
  CHECK(d::p2p_store_key({0, 1}) == "p2p/0-1");
  CHECK(d::p2p_store_key({3, 2}) == "p2p/3-2");
  CHECK(d::p2p_text({3, 2}) == "3->2");
}

TEST_CASE("a message header names tag and size, and mismatches are clear") {
  auto header = d::make_p2p_header(7, 4096);
  CHECK_FALSE(d::check_p2p_header(header, 7, 4096, 0, where()));
  auto tag = d::check_p2p_header(header, 8, 4096, 0, where());
  CHECK(col::code_of(tag) == col::errc::mismatch);
  CHECK(mentions(tag, "has tag 7 and 4096 bytes"));
  CHECK(mentions(tag, "expects tag 8 and 4096 bytes"));
  CHECK(mentions(tag, "order they were sent"));
  CHECK(mentions(tag, "dropped"));
  auto size = d::check_p2p_header(header, 7, 100, 0, where());
  CHECK(col::code_of(size) == col::errc::mismatch);
  d::p2p_header garbage;
  auto bad = d::check_p2p_header(garbage, 7, 4096, 0, where());
  CHECK(col::code_of(bad) == col::errc::backend_error);
  CHECK(mentions(bad, "no valid header"));
}

// -- finding 4: abort is honoured while the unique id is fetched

TEST_CASE("an abort ends the wait for the unique id against a mute store") {
  silent_store store;
  std::atomic<bool> cancel{false};
  std::thread aborter{[&] {
    std::this_thread::sleep_for(100ms);
    cancel = true;
  }};
  auto start = clock_type::now();
  auto got = d::fetch_nccl_id(store, "unique_id", where(),
                              clock_type::now() + 30s, &cancel);
  auto took = clock_type::now() - start;
  aborter.join();
  REQUIRE_FALSE(got);
  CHECK(col::code_of(got.error()) == col::errc::aborted);
  CHECK(mentions(got.error(), "unique id"));
  CHECK(took < 2s);
  // Never one long question: each is at most a slice.
  CHECK(store.longest_wait.load() <= d::fetch_slice.count());
  CHECK(store.calls.load() > 1);
}

TEST_CASE("the unique id fetch fails with timeout at the deadline") {
  silent_store store;
  auto start = clock_type::now();
  auto got = d::fetch_nccl_id(store, "unique_id", where(),
                              clock_type::now() + 200ms, nullptr);
  auto took = clock_type::now() - start;
  REQUIRE_FALSE(got);
  CHECK(col::code_of(got.error()) == col::errc::timeout);
  CHECK(took >= 190ms);
  CHECK(took < 5s);
  broken_store broken;
  auto refused =
    d::fetch_nccl_id(broken, "unique_id", where(), clock_type::now() + 5s);
  REQUIRE_FALSE(refused);
  CHECK(col::code_of(refused.error()) == col::errc::backend_error);
  CHECK(mentions(refused.error(), "connection refused"));
}

TEST_CASE("the unique id fetch still finds a record published late") {
  auto store = col::make_in_process_store();
  d::nccl_id_record record;
  record.id.internal[0] = 42;
  record.devices_per_member = 3;
  std::thread publisher{[&] {
    std::this_thread::sleep_for(50ms);
    REQUIRE_FALSE(d::publish_nccl_id(*store, "unique_id", record, where()));
  }};
  std::atomic<bool> cancel{false};
  auto got = d::fetch_nccl_id(*store, "unique_id", where(),
                              clock_type::now() + 10s, &cancel);
  publisher.join();
  REQUIRE(got);
  CHECK(got->id.internal[0] == 42);
  CHECK(got->devices_per_member == 3);
}

// -- finding 5: pinned staging is reused, never freed (cudaFreeHost would
// -- synchronize the device)

namespace {

std::atomic<int> fake_allocations{0};

cudaError_t fake_alloc(void** ptr, size_t bytes) {
  ++fake_allocations;
  *ptr = std::malloc(bytes);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t failing_alloc(void**, size_t) {
  return cudaErrorMemoryAllocation;
}

} // namespace

TEST_CASE("pinned blocks go back to the cache and are reused by size class") {
  fake_allocations = 0;
  d::pinned_cache cache{fake_alloc, std::free};
  CHECK(d::pinned_cache::size_class(1) == 4096);
  CHECK(d::pinned_cache::size_class(4097) == 8192);
  void* first = nullptr;
  {
    d::pinned_block block;
    REQUIRE(cache.take(100, block) == cudaSuccess);
    CHECK(block.size() == 4096);
    first = block.get();
  }
  CHECK(cache.cached(4096) == 1);
  d::pinned_block again;
  REQUIRE(cache.take(3000, again) == cudaSuccess);
  CHECK(again.get() == first);
  CHECK(fake_allocations.load() == 1);
  d::pinned_block bigger;
  REQUIRE(cache.take(5000, bigger) == cudaSuccess);
  CHECK(bigger.size() == 8192);
  CHECK(fake_allocations.load() == 2);
  // Moving hands the block over; growing returns the old one.
  again = std::move(bigger);
  CHECK(cache.cached(4096) == 1);
  CHECK(cache.cached(8192) == 0);
  d::pinned_cache refusing{failing_alloc};
  d::pinned_block none;
  CHECK(refusing.take(10, none) == cudaErrorMemoryAllocation);
  CHECK(none.get() == nullptr);
}

TEST_CASE("an abandoned pinned block never returns to the cache") {
  d::pinned_cache cache{fake_alloc, std::free};
  d::pinned_block block;
  REQUIRE(cache.take(10, block) == cudaSuccess);
  auto* ptr = block.get();
  block.abandon();
  CHECK(cache.cached(4096) == 0);
  std::free(ptr);
}

// -- finding 8: communicators on one device run together only as far as
// -- their kernels fit together

TEST_CASE("each communicator gets a power-of-two share of the device") {
  CHECK(d::ctas_per_communicator(132) == 32); // H100 SXM
  CHECK(d::ctas_per_communicator(108) == 16); // A100
  CHECK(d::ctas_per_communicator(80) == 16);  // V100
  CHECK(d::ctas_per_communicator(20) == 4);
  CHECK(d::ctas_per_communicator(3) == 1);
  CHECK(d::ctas_per_communicator(0) == 1);
  for (int sms = 1; sms < 300; ++sms)
    CHECK(d::ctas_per_communicator(sms) * d::slots_per_device <=
          std::max(sms, d::slots_per_device));
}

TEST_CASE("the device gate admits a bounded number of steps per device") {
  d::device_gate gate{4};
  std::vector<int> zero{0};
  for (int i = 0; i < 4; ++i)
    CHECK(gate.try_enter(zero));
  CHECK_FALSE(gate.try_enter(zero));
  CHECK(gate.active(0) == 4);
  // All or nothing across devices: a full device 0 takes no slot on 1.
  std::vector<int> both{0, 1};
  CHECK_FALSE(gate.try_enter(both));
  CHECK(gate.active(1) == 0);
  gate.leave(zero);
  CHECK(gate.try_enter(both));
  CHECK(gate.active(0) == 4);
  CHECK(gate.active(1) == 1);
  std::vector<int> twice{2, 2};
  CHECK(gate.try_enter(twice));
  CHECK(gate.active(2) == 2);
  {
    d::gate_pass pass;
    CHECK(pass.try_enter(gate, std::vector<int>{3}));
    CHECK(pass.held());
    CHECK(gate.active(3) == 1);
  }
  CHECK(gate.active(3) == 0);
}

// -- finding 6: rooted ops never hand NCCL a null buffer

TEST_CASE("gather and scatter off the root pass the rank's own buffer") {
  std::vector<float> mine(8, 1);
  auto in = col::view_of(mine);
  col::tensor_view none; // what a rank off the root may pass
  auto g = d::gather_buffers(false, in, none);
  CHECK(g.send == in.data());
  CHECK(g.recv == in.data());
  std::vector<float> all(16, 0);
  auto root_out = col::view_of(all);
  auto gr = d::gather_buffers(true, in, root_out);
  CHECK(gr.recv == root_out.data());
  auto s = d::scatter_buffers(false, none, in);
  CHECK(s.send == in.data());
  CHECK(s.recv == in.data());
  auto sr = d::scatter_buffers(true, root_out, in);
  CHECK(sr.send == root_out.data());
  CHECK(sr.recv == in.data());
}
