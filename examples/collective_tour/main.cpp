// A tour of the imperative API: four members (threads of this process) form
// a group on backend "auto" (shm, since they share this host; gloo when
// members are spread over hosts), run every collective once, check every
// element of every result on every rank and print what each took. Exits
// non-zero, naming the op and the rank, if any result is wrong.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf_collective/all.hpp>

namespace col = caf_collective;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int world = 4;
constexpr size_t count = 1 << 16;      // elements per rank
constexpr size_t span = count * world; // elements of a per-rank block set

// Element j of rank r's input: different for every rank and every element
// (r * span + j + 1, never 0), so a block from the wrong rank, a shifted or
// reordered element, a dropped rank or an untouched buffer all show. The
// values and any sum of `world` of them stay below 2^24, so float holds
// them and their sums exactly whatever order a backend adds in.
int32_t value(int r, size_t j) {
  return static_cast<int32_t>(static_cast<size_t>(r) * span + j + 1);
}

template<class T>
std::vector<T> inputs_of(int r, size_t n) {
  std::vector<T> xs(n);
  for (size_t j = 0; j < n; ++j)
    xs[j] = static_cast<T>(value(r, j));
  return xs;
}

// Compares every element of `got` with `want(j)`, computed from value()
// alone, never from what a collective returned. Reports a wrong size or the
// first wrong element and how many there are, with the op and the rank.
template<class T, class Want>
bool expect(int rank, const char* op, const std::vector<T>& got, size_t n,
            const Want& want) {
  if (got.size() != n) {
    std::fprintf(stderr, "rank %d: %s: %zu elements, expected %zu\n", rank, op,
                 got.size(), n);
    return false;
  }
  size_t wrong = 0, first = 0;
  for (size_t j = 0; j < n; ++j)
    if (got[j] != static_cast<T>(want(j)) && wrong++ == 0) first = j;
  if (wrong > 0)
    std::fprintf(stderr,
                 "rank %d: %s: %zu of %zu elements wrong, the first at [%zu]: "
                 "%.17g, expected %.17g\n",
                 rank, op, wrong, n, first, static_cast<double>(got[first]),
                 static_cast<double>(want(first)));
  return wrong == 0;
}

struct row {
  std::string op;
  size_t bytes;
  double micros; // rank 0's
  bool ok;       // on every rank
};

std::mutex rows_mtx;
std::vector<row> rows;      // in the order the ops ran (the same on all ranks)
std::string backend_in_use; // set by rank 0 once the group is formed

// Runs `step` (returns whether this rank's result is right), times it on
// rank 0 and records the row; the row is ok only if it is on every rank.
void run(int rank, const char* op, size_t bytes,
         const std::function<bool()>& step, bool& all_ok) {
  col::barrier("tour"); // start together so the time is the op's own
  auto start = clock_type::now();
  bool ok = step();
  auto micros =
    std::chrono::duration<double, std::micro>(clock_type::now() - start)
      .count();
  all_ok = all_ok && ok;
  std::lock_guard<std::mutex> guard{rows_mtx};
  auto it = std::find_if(rows.begin(), rows.end(),
                         [&](const row& r) { return r.op == op; });
  if (it == rows.end()) it = rows.insert(rows.end(), row{op, bytes, 0.0, true});
  it->ok = it->ok && ok;
  if (rank == 0) it->micros = micros;
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

  auto grads = inputs_of<float>(rank, count);
  run(
    rank, "allreduce", bytes,
    [&] {
      col::allreduce(col::view_of(grads), "tour");
      return expect(rank, "allreduce", grads, count, [](size_t i) {
        int64_t sum = 0;
        for (int r = 0; r < world; ++r)
          sum += value(r, i);
        return sum;
      });
    },
    ok);

  // Off the root the buffer starts at 0, which value() never is.
  auto weights =
    rank == 2 ? inputs_of<float>(2, count) : std::vector<float>(count, 0.0f);
  run(
    rank, "broadcast", bytes,
    [&] {
      col::broadcast(col::view_of(weights), 2, "tour");
      return expect(rank, "broadcast", weights, count,
                    [](size_t i) { return value(2, i); });
    },
    ok);

  // Max: element i of rank r holds rank (r + i) % world's value, so each
  // rank holds the maximum of a quarter of the elements and one left out
  // shows.
  std::vector<float> local(count), total(count);
  for (size_t i = 0; i < count; ++i)
    local[i] =
      static_cast<float>(value((rank + static_cast<int>(i)) % world, i));
  run(
    rank, "reduce", bytes,
    [&] {
      col::reduce(col::view_of(local), col::view_of(total), "tour",
                  col::reduce_options{{}, 0, col::reduce_op::max});
      // Only the root's output is defined.
      return rank != 0 || expect(rank, "reduce", total, count,
                                 [](size_t i) { return value(world - 1, i); });
    },
    ok);

  auto mine = inputs_of<float>(rank, count);
  std::vector<float> gathered(span);
  run(
    rank, "allgather", bytes,
    [&] {
      col::allgather(col::view_of(mine), col::view_of(gathered), "tour");
      return expect(rank, "allgather", gathered, span, [](size_t j) {
        return value(static_cast<int>(j / count), j % count);
      });
    },
    ok);

  // Rank r's shard: block r of every rank's input, summed.
  auto blocks = inputs_of<float>(rank, span);
  std::vector<float> shard(count);
  run(
    rank, "reduce_scatter", bytes * world,
    [&] {
      col::reduce_scatter(col::view_of(blocks), col::view_of(shard), "tour");
      return expect(rank, "reduce_scatter", shard, count, [rank](size_t i) {
        int64_t sum = 0;
        for (int r = 0; r < world; ++r)
          sum += value(r, static_cast<size_t>(rank) * count + i);
        return sum;
      });
    },
    ok);

  // Block s of rank r's output is block r of rank s's input.
  auto sendbuf = inputs_of<int32_t>(rank, span);
  std::vector<int32_t> recvbuf(span);
  run(
    rank, "alltoall", bytes * world,
    [&] {
      col::alltoall(col::view_of(sendbuf), col::view_of(recvbuf), "tour");
      return expect(rank, "alltoall", recvbuf, span, [rank](size_t j) {
        return value(static_cast<int>(j / count),
                     static_cast<size_t>(rank) * count + j % count);
      });
    },
    ok);

  std::vector<int32_t> all_at_root(rank == 0 ? span : 0);
  run(
    rank, "gather", bytes,
    [&] {
      col::gather(col::view_of(sendbuf).slice(0, count),
                  col::view_of(all_at_root), "tour");
      return rank != 0 ||
             expect(rank, "gather", all_at_root, span, [](size_t j) {
               return value(static_cast<int>(j / count), j % count);
             });
    },
    ok);

  // Root 1 sends block r of its input to rank r.
  std::vector<int32_t> piece(count);
  run(
    rank, "scatter", bytes,
    [&] {
      col::scatter(col::view_of(sendbuf), col::view_of(piece), "tour",
                   col::scatter_options{{}, 1});
      return expect(rank, "scatter", piece, count, [rank](size_t i) {
        return value(1, static_cast<size_t>(rank) * count + i);
      });
    },
    ok);

  // A ring: each rank sends its own values to the next and so must
  // receive exactly the previous rank's.
  auto outbox = inputs_of<float>(rank, count);
  std::vector<float> inbox(count);
  int prev = (rank + world - 1) % world;
  run(
    rank, "send/recv", bytes,
    [&] {
      auto sent =
        col::send_async(col::view_of(outbox), (rank + 1) % world, "tour");
      try {
        col::recv(col::view_of(inbox), prev, "tour");
      } catch (...) {
        // The send reads outbox until it ends: wait before it can go.
        (void)sent.wait();
        throw;
      }
      if (auto err = sent.wait()) {
        std::fprintf(stderr, "rank %d: send/recv: the send failed: %s\n", rank,
                     col::render(err).c_str());
        return false;
      }
      return expect(rank, "send/recv", inbox, count,
                    [prev](size_t i) { return value(prev, i); });
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
