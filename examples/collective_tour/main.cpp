// A tour of the imperative API: four members (threads of this process) form
// a group on backend "auto" (shm, since they share this host; gloo when
// members are spread over hosts), run every collective once, check every
// result and print what each took. Exits non-zero if any result is wrong.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <caf_collective/all.hpp>

namespace col = caf_collective;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int world = 4;
constexpr size_t count = 1 << 16; // elements per rank

struct row {
  std::string op;
  size_t bytes;
  double micros;
  bool ok;
};

std::mutex rows_mtx;
std::vector<row> rows;      // filled by rank 0
std::string backend_in_use; // set by rank 0 once the group is formed

// Runs `step` (returns whether this rank's result is right), times it on
// rank 0 and records the row.
void run(int rank, const char* op, size_t bytes,
         const std::function<bool()>& step, bool& all_ok) {
  col::barrier("tour"); // start together so the time is the op's own
  auto start = clock_type::now();
  bool ok = step();
  auto micros =
    std::chrono::duration<double, std::micro>(clock_type::now() - start)
      .count();
  all_ok = all_ok && ok;
  if (rank == 0) {
    std::lock_guard<std::mutex> guard{rows_mtx};
    rows.push_back({op, bytes, micros, ok});
  }
}

bool member(int rank, const col::rendezvous_store_ptr& store) {
  col::member_scope scope;
  col::init_options opts;
  opts.store = store;
  col::init_collective_group(world, rank, "auto", "tour", opts);
  if (rank == 0) {
    std::lock_guard<std::mutex> guard{rows_mtx};
    backend_in_use = col::get_group("tour")->backend_in_use();
  }
  bool ok = true;
  auto bytes = count * sizeof(float);

  std::vector<float> grads(count, rank + 1.0f);
  run(
    rank, "allreduce", bytes,
    [&] {
      col::allreduce(col::view_of(grads), "tour");
      return grads[count - 1] == 10.0f; // 1 + 2 + 3 + 4
    },
    ok);

  std::vector<float> weights(count, rank == 2 ? 0.5f : 0.0f);
  run(
    rank, "broadcast", bytes,
    [&] {
      col::broadcast(col::view_of(weights), 2, "tour");
      return weights[0] == 0.5f;
    },
    ok);

  std::vector<float> local(count, float(rank)), total(count);
  run(
    rank, "reduce", bytes,
    [&] {
      col::reduce(col::view_of(local), col::view_of(total), "tour",
                  col::reduce_options{{}, 0, col::reduce_op::max});
      return rank != 0 || total[7] == 3.0f;
    },
    ok);

  std::vector<float> gathered(count * world);
  run(
    rank, "allgather", bytes,
    [&] {
      col::allgather(col::view_of(local), col::view_of(gathered), "tour");
      return gathered[3 * count] == 3.0f;
    },
    ok);

  std::vector<float> shard(count);
  run(
    rank, "reduce_scatter", bytes * world,
    [&] {
      col::reduce_scatter(col::view_of(gathered), col::view_of(shard), "tour");
      return shard[0] == 4.0f * rank; // every rank contributed block r = r
    },
    ok);

  std::vector<int32_t> sendbuf(count * world), recvbuf(count * world);
  std::iota(sendbuf.begin(), sendbuf.end(), rank * 1000000);
  run(
    rank, "alltoall", bytes * world,
    [&] {
      col::alltoall(col::view_of(sendbuf), col::view_of(recvbuf), "tour");
      // Block 1 came from rank 1: its elements [rank * count, ...).
      return recvbuf[count] == 1000000 + static_cast<int32_t>(rank * count);
    },
    ok);

  std::vector<int32_t> all_at_root(rank == 0 ? count * world : 0);
  run(
    rank, "gather", bytes,
    [&] {
      col::gather(col::view_of(sendbuf).slice(0, count),
                  col::view_of(all_at_root), "tour");
      return rank != 0 || all_at_root[2 * count] == 2000000;
    },
    ok);

  std::vector<int32_t> mine(count);
  run(
    rank, "scatter", bytes,
    [&] {
      col::scatter(col::view_of(sendbuf), col::view_of(mine), "tour",
                   col::scatter_options{{}, 1});
      return mine[0] == 1000000 + static_cast<int32_t>(rank * count);
    },
    ok);

  std::vector<float> inbox(count);
  run(
    rank, "send/recv", bytes,
    [&] {
      auto sent =
        col::send_async(col::view_of(grads), (rank + 1) % world, "tour");
      try {
        col::recv(col::view_of(inbox), (rank + world - 1) % world, "tour");
      } catch (...) {
        // The send reads grads until it ends: wait before they can go.
        (void)sent.wait();
        throw;
      }
      return !sent.wait() && inbox[5] == 10.0f;
    },
    ok);

  run(
    rank, "barrier", 0,
    [&] {
      col::barrier("tour");
      return true;
    },
    ok);

  col::destroy_collective_group("tour");
  return ok;
}

} // namespace

int main() {
  auto store = col::make_in_process_store();
  std::vector<char> results(world, 0);
  std::vector<std::thread> members;
  for (int rank = 0; rank < world; ++rank)
    members.emplace_back([&, rank] {
      try {
        results[rank] = member(rank, store);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "rank %d: %s\n", rank, ex.what());
      }
    });
  for (auto& t : members)
    t.join();
  std::printf("caf-collective tour: %d members, group 'tour' formed on %s "
              "(asked for auto)\n",
              world,
              backend_in_use.empty() ? "nothing" : backend_in_use.c_str());
  std::printf("%-16s %12s %12s  %s\n", "op", "bytes", "time (us)", "check");
  for (const auto& r : rows)
    std::printf("%-16s %12zu %12.1f  %s\n", r.op.c_str(), r.bytes, r.micros,
                r.ok ? "ok" : "WRONG");
  bool all_ok = std::all_of(results.begin(), results.end(),
                            [](char ok) { return ok != 0; });
  std::printf("%s\n", all_ok ? "all results verified" : "SOME RESULTS WRONG");
  return all_ok ? 0 : 1;
}
