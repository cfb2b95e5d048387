// Bad input fails at once with an error naming group, op and value, and
// leaves the group usable; missing ranks and silent peers end in timeouts.
#include <doctest/doctest.h>

#include "test_support.hpp"

using namespace test;
using namespace std::chrono_literals;

namespace {

// Runs `bad` in every rank and expects it to throw `code` with every
// fragment in its message; then runs a correct allreduce.
void expect_rejected(int world, col::errc code,
                     std::vector<std::string> fragments,
                     std::function<void(int rank)> bad) {
  auto outcomes = run_ranks(world, "bad", [&](int rank, auto& failures) {
    try {
      bad(rank);
      failures.push_back("no error");
    } catch (const col::collective_error& ex) {
      if (ex.code() != code)
        failures.push_back(describe("wrong code: ", ex.what()));
      for (const auto& fragment : fragments)
        if (std::string{ex.what()}.find(fragment) == std::string::npos)
          failures.push_back(
            describe("'", fragment, "' missing in: ", ex.what()));
    }
    // The group stays usable.
    std::vector<int32_t> xs(10, rank + 1);
    col::allreduce(col::view_of(xs), "bad");
    if (xs[9] != world * (world + 1) / 2)
      failures.push_back("allreduce after the error went wrong");
  });
  for (size_t r = 0; r < outcomes.size(); ++r) {
    INFO("rank " << r);
    CHECK_MESSAGE(outcomes[r].exception.empty(), outcomes[r].exception);
    for (const auto& failure : outcomes[r].failures)
      FAIL_CHECK(failure);
  }
}

} // namespace

TEST_CASE("an output of the wrong size is refused for allgather, gather "
          "and reduce_scatter") {
  expect_rejected(3, col::errc::invalid_argument,
                  {"group 'bad'", "allgather", "output has 5", "expected 12"},
                  [](int) {
                    std::vector<float> in(4), out(5);
                    col::allgather(col::view_of(in), col::view_of(out), "bad");
                  });
  expect_rejected(3, col::errc::invalid_argument,
                  {"gather", "output has 2", "expected 12"}, [](int) {
                    std::vector<float> in(4), out(2);
                    col::gather(col::view_of(in), col::view_of(out), "bad");
                  });
  expect_rejected(2, col::errc::invalid_argument,
                  {"reduce_scatter", "output has 3", "expected 4"}, [](int) {
                    std::vector<float> in(8), out(3);
                    col::reduce_scatter(col::view_of(in), col::view_of(out),
                                        "bad");
                  });
  expect_rejected(2, col::errc::invalid_argument,
                  {"reduce_scatter", "not divisible by world size 2"}, [](int) {
                    std::vector<float> in(7), out(3);
                    col::reduce_scatter(col::view_of(in), col::view_of(out),
                                        "bad");
                  });
}

TEST_CASE("a root out of range is refused") {
  expect_rejected(2, col::errc::invalid_argument,
                  {"broadcast", "root 2 is outside [0, 2)"}, [](int) {
                    std::vector<float> xs(4);
                    col::broadcast(col::view_of(xs), 2, "bad");
                  });
  expect_rejected(2, col::errc::invalid_argument,
                  {"reduce", "root -1 is outside [0, 2)"}, [](int) {
                    std::vector<float> xs(4);
                    col::reduce(col::view_of(xs), -1, "bad");
                  });
}

TEST_CASE("a dtype mismatch between input and output is refused") {
  expect_rejected(2, col::errc::invalid_argument,
                  {"allreduce", "dtype mismatch", "float32", "int32"}, [](int) {
                    std::vector<float> in(4);
                    std::vector<int32_t> out(4);
                    col::allreduce(col::view_of(in), col::view_of(out), "bad");
                  });
}

TEST_CASE("a send to oneself and a null buffer with elements are refused") {
  expect_rejected(2, col::errc::invalid_argument,
                  {"send", "send to oneself (rank"}, [](int rank) {
                    std::vector<float> xs(4);
                    col::send(col::view_of(xs), rank, "bad");
                  });
  expect_rejected(
    2, col::errc::invalid_argument,
    {"allreduce", "input has 3 elements but a null data pointer"}, [](int) {
      col::tensor_view null_view{nullptr, col::dtype::float32, size_t{3}};
      col::allreduce(null_view, "bad");
    });
}

TEST_CASE("bitwise reduce ops on floating-point dtypes are refused") {
  expect_rejected(2, col::errc::invalid_argument,
                  {"allreduce", "bxor", "float64"}, [](int) {
                    std::vector<double> xs(4);
                    col::allreduce_options opts;
                    opts.op = col::reduce_op::bxor;
                    col::allreduce(col::view_of(xs), "bad", opts);
                  });
}

TEST_CASE("bad group configurations are refused before anything happens") {
  col::member_scope scope;
  auto store = col::make_in_process_store();
  col::init_options opts;
  opts.store = store;
  auto code_of = [&](int world, int rank, std::string backend) {
    try {
      col::init_collective_group(world, rank, backend, "cfg", opts);
    } catch (const col::collective_error& ex) {
      return std::make_pair(ex.code(), std::string{ex.what()});
    }
    return std::make_pair(col::errc{}, std::string{});
  };
  auto [c1, m1] = code_of(0, 0, "gloo");
  CHECK(c1 == col::errc::invalid_argument);
  CHECK(m1.find("world size 0") != std::string::npos);
  auto [c2, m2] = code_of(2, 2, "gloo");
  CHECK(c2 == col::errc::invalid_argument);
  CHECK(m2.find("rank 2 is outside [0, 2)") != std::string::npos);
  auto [c3, m3] = code_of(2, -1, "gloo");
  CHECK(c3 == col::errc::invalid_argument);
  auto [c4, m4] = code_of(1, 0, "carrier-pigeon");
  CHECK(c4 == col::errc::invalid_argument);
  CHECK(m4.find("carrier-pigeon") != std::string::npos);
  CHECK_FALSE(col::is_group_initialized("cfg"));
}

TEST_CASE("a duplicate group name is refused, the first group still works") {
  col::member_scope scope;
  col::init_options opts;
  opts.store = col::make_in_process_store();
  col::init_collective_group(1, 0, "gloo", "solo", opts);
  try {
    col::init_collective_group(1, 0, "gloo", "solo", opts);
    FAIL("duplicate accepted");
  } catch (const col::collective_error& ex) {
    CHECK(ex.code() == col::errc::duplicate_group);
    CHECK(std::string{ex.what()}.find("'solo'") != std::string::npos);
  }
  std::vector<float> xs{1, 2};
  col::allreduce(col::view_of(xs), "solo");
  CHECK(xs == std::vector<float>{1, 2});
  CHECK(col::get_rank("solo") == 0);
  CHECK(col::get_collective_group_size("solo") == 1);
  col::destroy_collective_group("solo");
  CHECK_FALSE(col::is_group_initialized("solo"));
}

TEST_CASE("an unknown group is refused by every call") {
  col::member_scope scope;
  std::vector<float> xs(2);
  CHECK(col::get_rank("ghost") == -1);
  CHECK(col::get_collective_group_size("ghost") == -1);
  try {
    col::allreduce(col::view_of(xs), "ghost");
    FAIL("unknown group accepted");
  } catch (const col::collective_error& ex) {
    CHECK(ex.code() == col::errc::unknown_group);
    CHECK(std::string{ex.what()}.find("'ghost'") != std::string::npos);
  }
  CHECK_THROWS_AS(col::destroy_collective_group("ghost"),
                  col::collective_error);
}

TEST_CASE("a rank that never joins makes the others time out") {
  col::member_scope scope;
  col::init_options opts;
  opts.store = col::make_in_process_store();
  opts.timeout = 500ms;
  auto start = std::chrono::steady_clock::now();
  try {
    col::init_collective_group(3, 0, "gloo", "absent", opts);
    FAIL("formed without ranks 1 and 2");
  } catch (const col::collective_error& ex) {
    CHECK(ex.code() == col::errc::timeout);
    CHECK(std::string{ex.what()}.find("group 'absent'") != std::string::npos);
  }
  // Generous bound: fails near 500 ms, never hangs.
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK_FALSE(col::is_group_initialized("absent"));
}

TEST_CASE("a rank that never calls makes the others time out, then the "
          "group reports itself broken") {
  auto outcomes = run_ranks(
    2, "silent",
    [](int rank, auto& failures) {
      if (rank == 1) {
        std::this_thread::sleep_for(1500ms); // never calls the allreduce
        return;
      }
      std::vector<float> xs(8, 1.0f);
      col::allreduce_options opts;
      opts.timeout = 300ms;
      auto start = std::chrono::steady_clock::now();
      try {
        col::allreduce(col::view_of(xs), "silent", opts);
        failures.push_back("allreduce finished without the peer");
      } catch (const col::collective_error& ex) {
        if (ex.code() != col::errc::timeout)
          failures.push_back(describe("expected timeout: ", ex.what()));
        if (std::string{ex.what()}.find("allreduce") == std::string::npos)
          failures.push_back(describe("op not named: ", ex.what()));
      }
      if (std::chrono::steady_clock::now() - start > 10s)
        failures.push_back("timeout took far longer than 300 ms");
      if (!col::get_group("silent")->broken())
        failures.push_back("group not marked broken after a timeout");
      try {
        col::barrier("silent");
        failures.push_back("broken group accepted a barrier");
      } catch (const col::collective_error& ex) {
        if (ex.code() != col::errc::aborted)
          failures.push_back(describe("expected aborted: ", ex.what()));
      }
    },
    5s);
  for (const auto& o : outcomes) {
    CHECK_MESSAGE(o.exception.empty(), o.exception);
    for (const auto& f : o.failures)
      FAIL_CHECK(f);
  }
}

TEST_CASE("several named groups coexist over the same and different ranks") {
  auto store = col::make_in_process_store();
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank)
    threads.emplace_back([&, rank] {
      try {
        col::member_scope scope;
        col::init_options opts;
        opts.store = store;
        col::init_collective_group(4, rank, "gloo", "all", opts);
        // Subgroups: even and odd ranks.
        col::init_collective_group(2, rank / 2, "gloo",
                                   rank % 2 ? "odd" : "even", opts);
        std::vector<int64_t> a(100, rank), b(100, rank);
        auto w1 = col::allreduce_async(col::view_of(a), "all");
        auto w2 =
          col::allreduce_async(col::view_of(b), rank % 2 ? "odd" : "even");
        col::throw_if(w1.wait());
        col::throw_if(w2.wait());
        int64_t pair_sum = rank % 2 ? 1 + 3 : 0 + 2;
        if (a[0] != 6 || b[99] != pair_sum)
          failures[rank] = describe("got ", a[0], " and ", b[99]);
      } catch (const std::exception& ex) {
        failures[rank] = ex.what();
      }
    });
  for (auto& t : threads)
    t.join();
  for (const auto& f : failures)
    CHECK_MESSAGE(f.empty(), f);
}

TEST_CASE("asynchronous calls return handles that complete and call back") {
  auto outcomes = run_ranks(3, "async", [](int rank, auto& failures) {
    std::vector<float> xs(1000, 1.0f);
    std::atomic<bool> called{false};
    auto w = col::allreduce_async(col::view_of(xs), "async");
    w.on_complete([&](const caf::error& err) { called = !err; });
    if (auto err = w.wait()) failures.push_back(col::render(err));
    if (!w.ready() || !w.wait_for(1s))
      failures.push_back("handle not ready after wait");
    // on_complete runs before waiters wake or right away when complete.
    for (int i = 0; i < 100 && !called; ++i)
      std::this_thread::sleep_for(10ms);
    if (!called) failures.push_back("callback did not run");
    if (xs[0] != 3.0f)
      failures.push_back(describe("wrong sum ", xs[0], " on rank ", rank));
  });
  for (const auto& o : outcomes) {
    CHECK_MESSAGE(o.exception.empty(), o.exception);
    for (const auto& f : o.failures)
      FAIL_CHECK(f);
  }
}
