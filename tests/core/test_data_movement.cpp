// broadcast, allgather(v), gather, scatter, alltoall(v), send/recv and
// barrier for every dtype, world size and element count.
#include <doctest/doctest.h>

#include <numeric>

#include "test_support.hpp"

using namespace test;

namespace {

const std::vector<size_t> counts = {0, 1, 5, 1000, 65537};
const std::vector<int> worlds = {1, 2, 3, 4, 7};

void check_outcomes(const std::vector<rank_outcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    INFO("rank " << r);
    CHECK_MESSAGE(outcomes[r].exception.empty(), outcomes[r].exception);
    CHECK_MESSAGE(
      outcomes[r].failures.empty(),
      (outcomes[r].failures.empty() ? "" : outcomes[r].failures[0]));
  }
}

void fill_tagged(buffer& buf, int rank, size_t offset = 0) {
  for (size_t i = 0; i < buf.size(); ++i)
    buf.set(i, tagged_value(buf.type(), rank, offset + i));
}

// Checks buf[first + i] == tagged_value(src_rank, src_offset + i).
bool expect_block(const buffer& buf, size_t first, size_t n, int src_rank,
                  size_t src_offset, std::vector<std::string>& failures,
                  const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    auto expected = tagged_value(buf.type(), src_rank, src_offset + i);
    if (buf.get(first + i) != expected) {
      failures.push_back(describe(what, ": element ", first + i, " is ",
                                  buf.get(first + i), ", expected ", expected,
                                  " from rank ", src_rank));
      return false;
    }
  }
  return true;
}

template<class Body>
void for_each_case(int world, Body body) {
  check_outcomes(run_ranks(world, "moves", [&](int rank, auto& failures) {
    for (auto type : col::all_dtypes)
      for (auto count : counts)
        body(rank, type, count, failures,
             describe(col::to_string(type), " count ", count));
  }));
}

} // namespace

TEST_CASE("broadcast copies the root's tensor to every rank") {
  for (int world : worlds) {
    INFO("world size " << world);
    for_each_case(world, [world](int rank, col::dtype type, size_t count,
                                 auto& failures, const std::string& what) {
      int root = static_cast<int>((count + 1) % world);
      buffer in{type, count};
      buffer out{type, count};
      fill_tagged(in, rank);
      col::broadcast(in.view(), out.view(), "moves",
                     col::broadcast_options{{}, root});
      expect_block(out, 0, count, root, 0, failures,
                   "out-of-place broadcast " + what);
      col::broadcast(in.view(), root, "moves");
      expect_block(in, 0, count, root, 0, failures,
                   "in-place broadcast " + what);
    });
  }
}

TEST_CASE("allgather concatenates every rank's tensor in rank order") {
  for (int world : worlds) {
    INFO("world size " << world);
    for_each_case(world, [world](int rank, col::dtype type, size_t count,
                                 auto& failures, const std::string& what) {
      buffer in{type, count};
      buffer out{type, count * world};
      fill_tagged(in, rank);
      col::allgather(in.view(), out.view(), "moves");
      for (int src = 0; src < world; ++src)
        expect_block(out, src * count, count, src, 0, failures,
                     "allgather " + what);
    });
  }
}

TEST_CASE("allgatherv concatenates uneven contributions, zeros included") {
  for (int world : worlds) {
    INFO("world size " << world);
    for_each_case(world, [world](int rank, col::dtype type, size_t count,
                                 auto& failures, const std::string& what) {
      col::allgatherv_options opts;
      for (int r = 0; r < world; ++r) // rank 1 contributes nothing
        opts.counts.push_back(r == 1 ? 0 : count + r);
      auto total =
        std::accumulate(opts.counts.begin(), opts.counts.end(), size_t{0});
      buffer in{type, opts.counts[rank]};
      buffer out{type, total};
      fill_tagged(in, rank);
      col::allgatherv(in.view(), out.view(), "moves", opts);
      size_t first = 0;
      for (int src = 0; src < world; ++src) {
        expect_block(out, first, opts.counts[src], src, 0, failures,
                     "allgatherv " + what);
        first += opts.counts[src];
      }
    });
  }
}

TEST_CASE("gather collects every rank's tensor at the root") {
  for (int world : worlds) {
    INFO("world size " << world);
    for_each_case(world, [world](int rank, col::dtype type, size_t count,
                                 auto& failures, const std::string& what) {
      int root = static_cast<int>(count % world);
      buffer in{type, count};
      buffer out{type, rank == root ? count * world : 0};
      fill_tagged(in, rank);
      col::gather(in.view(), out.view(), "moves",
                  col::gather_options{{}, root});
      if (rank == root)
        for (int src = 0; src < world; ++src)
          expect_block(out, src * count, count, src, 0, failures,
                       "gather " + what);
    });
  }
}

TEST_CASE("scatter hands block r of the root's tensor to rank r") {
  for (int world : worlds) {
    INFO("world size " << world);
    for_each_case(world, [world](int rank, col::dtype type, size_t count,
                                 auto& failures, const std::string& what) {
      int root = world - 1;
      buffer in{type, rank == root ? count * world : 0};
      buffer out{type, count};
      fill_tagged(in, rank);
      col::scatter(in.view(), out.view(), "moves",
                   col::scatter_options{{}, root});
      expect_block(out, 0, count, root, rank * count, failures,
                   "scatter " + what);
    });
  }
}

TEST_CASE("alltoall sends block j to rank j") {
  for (int world : worlds) {
    INFO("world size " << world);
    for_each_case(world, [world](int rank, col::dtype type, size_t count,
                                 auto& failures, const std::string& what) {
      buffer in{type, count * world};
      buffer out{type, count * world};
      fill_tagged(in, rank);
      col::alltoall(in.view(), out.view(), "moves");
      for (int src = 0; src < world; ++src)
        expect_block(out, src * count, count, src, rank * count, failures,
                     "alltoall " + what);
    });
  }
}

TEST_CASE("alltoallv exchanges uneven blocks, zeros included") {
  for (int world : worlds) {
    INFO("world size " << world);
    for_each_case(world, [world](int rank, col::dtype type, size_t count,
                                 auto& failures, const std::string& what) {
      // Rank s sends (s + d) % 3 * count / 4 + (s == d) elements to rank d.
      auto amount = [count](int s, int d) {
        return static_cast<size_t>((s + d) % 3) * count / 4 + (s == d);
      };
      col::alltoallv_options opts;
      for (int peer = 0; peer < world; ++peer) {
        opts.send_counts.push_back(amount(rank, peer));
        opts.recv_counts.push_back(amount(peer, rank));
      }
      auto sum = [](const std::vector<size_t>& xs) {
        return std::accumulate(xs.begin(), xs.end(), size_t{0});
      };
      buffer in{type, sum(opts.send_counts)};
      buffer out{type, sum(opts.recv_counts)};
      // The block for rank d starts at offset sum(send_counts[0..d)).
      fill_tagged(in, rank);
      col::alltoallv(in.view(), out.view(), "moves", opts);
      size_t first = 0;
      for (int src = 0; src < world; ++src) {
        size_t src_offset = 0;
        for (int d = 0; d < rank; ++d)
          src_offset += amount(src, d);
        expect_block(out, first, opts.recv_counts[src], src, src_offset,
                     failures, "alltoallv " + what);
        first += opts.recv_counts[src];
      }
    });
  }
}

TEST_CASE("send and recv pass tensors around a ring without deadlock") {
  for (int world : {2, 3, 4, 7}) {
    INFO("world size " << world);
    for_each_case(world, [world](int rank, col::dtype type, size_t count,
                                 auto& failures, const std::string& what) {
      buffer out{type, count};
      buffer in{type, count};
      fill_tagged(out, rank);
      auto sent = col::send_async(out.view(), (rank + 1) % world, "moves");
      col::recv(in.view(), (rank + world - 1) % world, "moves");
      if (auto err = sent.wait())
        failures.push_back("send failed: " + col::render(err));
      expect_block(in, 0, count, (rank + world - 1) % world, 0, failures,
                   "send/recv " + what);
    });
  }
}

TEST_CASE("send and recv carry user tags") {
  check_outcomes(run_ranks(2, "tags", [](int rank, auto& failures) {
    std::vector<int32_t> a(3, 1), b(5, 2);
    col::send_options seven;
    seven.tag = 7;
    col::send_options nine;
    nine.tag = 9;
    col::recv_options recv_seven;
    recv_seven.tag = 7;
    col::recv_options recv_nine;
    recv_nine.tag = 9;
    if (rank == 0) {
      auto w1 = col::send_async(col::view_of(a), 1, "tags", seven);
      auto w2 = col::send_async(col::view_of(b), 1, "tags", nine);
      col::throw_if(w1.wait());
      col::throw_if(w2.wait());
    } else {
      // Sends of one group complete in issue order, so receives follow it.
      std::vector<int32_t> x(3), y(5);
      col::recv(col::view_of(x), 0, "tags", recv_seven);
      col::recv(col::view_of(y), 0, "tags", recv_nine);
      if (x != a || y != b) failures.push_back("tagged messages arrived wrong");
    }
  }));
}

TEST_CASE("barrier lets no rank pass before every rank arrived") {
  for (int world : worlds) {
    INFO("world size " << world);
    std::atomic<int> arrived{0};
    check_outcomes(run_ranks(world, "fence", [&](int rank, auto& failures) {
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds{50});
      arrived.fetch_add(1);
      col::barrier("fence");
      if (arrived.load() != world)
        failures.push_back(describe("left the barrier with ", arrived.load(),
                                    " of ", world, " arrived"));
    }));
  }
}
