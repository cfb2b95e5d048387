// One process of the stress test (test_stress.cpp): joins up to three Gloo
// groups through a file store and runs its share of a mixed sequence of
// operations, several in flight per group, checking every result.
//
// Groups over 4 processes:
//   stress-a   processes {0, 1, 2, 3}, rank = process
//   stress-b   processes {0, 1, 2, 3}, rank = process (another name)
//   stress-sub processes {1, 2, 3},    rank = process - 1
// Every process derives the same op sequence per group from the shared seed,
// submits it in batches of 1-8 operations with the _async API (the batches
// of all its groups are in flight together; every third allreduce of a
// process is a persistent op, started once), then waits for the batch and
// checks every rank's output.
//
// Usage: collective_stress_process <process> <store dir> <seed> <total ops>
//                                  [deadline ms]
// Exits 0 when every operation succeeded with the right values, 1 on any
// error or wrong value, 2 on bad usage, 3 when the deadline passed.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>

namespace col = caf_collective;

namespace {

constexpr int world = 4;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return mix(a ^ mix(b ^ mix(c ^ mix(d))));
}

enum class kind : uint8_t {
  allreduce,
  allreduce_large,
  allgather,
  broadcast,
  reduce_scatter,
  alltoall,
  barrier,
  ring,  // every rank sends to rank + shift, receives from rank - shift
  pairs, // ranks 2k and 2k + 1 exchange
};

constexpr const char* kind_names[] = {
  "allreduce", "allreduce (large)", "allgather",
  "broadcast", "reduce_scatter",    "alltoall",
  "barrier",   "send/recv ring",    "send/recv pairs",
};

struct op_spec {
  kind what = kind::barrier;
  col::dtype type = col::dtype::int32;
  size_t count = 0; // elements per rank (block size for the n-block ops)
  int root = 0;
  int shift = 1;
  uint32_t tag = 0;
  col::reduce_op rop = col::reduce_op::sum;
  bool in_place = false;
};

struct group_plan {
  std::string name;
  int id = 0;
  std::vector<int> members; // processes, by rank
  std::vector<op_spec> ops;
  std::vector<size_t> batch_sizes;
};

// -- the shared op sequence -------------------------------------------------

op_spec draw_op(std::mt19937_64& gen, int n) {
  auto below = [&](uint64_t k) { return gen() % k; };
  op_spec op;
  auto k = below(100);
  op.what = k < 30   ? kind::allreduce
            : k < 34 ? kind::allreduce_large
            : k < 46 ? kind::allgather
            : k < 58 ? kind::broadcast
            : k < 68 ? kind::reduce_scatter
            : k < 78 ? kind::alltoall
            : k < 84 ? kind::barrier
            : k < 92 ? kind::ring
                     : kind::pairs;
  const col::dtype reduce_types[] = {col::dtype::int32, col::dtype::int64,
                                     col::dtype::float32, col::dtype::float64};
  const col::dtype move_types[] = {col::dtype::uint8, col::dtype::float16,
                                   col::dtype::int32, col::dtype::float64};
  const col::reduce_op rops[] = {col::reduce_op::sum, col::reduce_op::sum,
                                 col::reduce_op::min, col::reduce_op::max};
  bool reduces = op.what == kind::allreduce ||
                 op.what == kind::allreduce_large ||
                 op.what == kind::reduce_scatter;
  op.type = reduces ? reduce_types[below(4)] : move_types[below(4)];
  op.rop = rops[below(4)];
  op.in_place = below(2) == 0;
  op.root = static_cast<int>(below(static_cast<uint64_t>(n)));
  op.shift = 1 + static_cast<int>(below(static_cast<uint64_t>(n - 1)));
  op.tag = static_cast<uint32_t>(below(4));
  auto width = col::size_of(op.type);
  switch (op.what) {
    case kind::allreduce: {
      // 8 B to 32 KiB: the legacy algorithms' range.
      auto bytes = 8 + below(32 * 1024 - 7);
      op.count = std::max<size_t>(1, bytes / width);
      break;
    }
    case kind::allreduce_large:
      op.count = (size_t{64} << 10) / width + below((size_t{1} << 20) / width);
      break;
    case kind::barrier: op.count = 0; break;
    default:
      op.count = below(10) == 0 ? 4096 + below(60000) : 1 + below(2048);
      break;
  }
  return op;
}

group_plan make_plan(uint64_t seed, int id, std::string name,
                     std::vector<int> members, size_t ops) {
  group_plan plan;
  plan.id = id;
  plan.name = std::move(name);
  plan.members = std::move(members);
  std::mt19937_64 gen{hash(seed, 0x57e55, static_cast<uint64_t>(id), 0)};
  auto n = static_cast<int>(plan.members.size());
  for (size_t i = 0; i < ops; ++i)
    plan.ops.push_back(draw_op(gen, n));
  for (size_t done = 0; done < ops;) {
    auto size = std::min<size_t>(1 + gen() % 8, ops - done);
    plan.batch_sizes.push_back(size);
    done += size;
  }
  return plan;
}

// -- values
// --------------------------------------------------------------------

/// A small integer of rank `r` at index `i` of op `op` of group `g`.
int64_t small_value(int g, size_t op, int r, size_t i) {
  auto h = hash(static_cast<uint64_t>(g), op, static_cast<uint64_t>(r), i);
  return static_cast<int64_t>(h % 1000) - 500;
}

/// Stores `v` (integers as is, floats as v / 4: exact in float32).
void store_value(col::dtype t, void* base, size_t i, int64_t v) {
  switch (t) {
    case col::dtype::int32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case col::dtype::int64: static_cast<int64_t*>(base)[i] = v; break;
    case col::dtype::float32:
      static_cast<float*>(base)[i] = static_cast<float>(v) / 4;
      break;
    default: static_cast<double*>(base)[i] = static_cast<double>(v) / 4; break;
  }
}

bool equal_value(col::dtype t, const void* base, size_t i, int64_t v) {
  switch (t) {
    case col::dtype::int32:
      return static_cast<const int32_t*>(base)[i] == static_cast<int32_t>(v);
    case col::dtype::int64: return static_cast<const int64_t*>(base)[i] == v;
    case col::dtype::float32:
      return static_cast<const float*>(base)[i] == static_cast<float>(v) / 4;
    default:
      return static_cast<const double*>(base)[i] == static_cast<double>(v) / 4;
  }
}

/// Raw bytes of rank `r`'s element `i` (data movement compares bytes).
void fill_bytes(const col::tensor_view& x, int g, size_t op, int r,
                size_t offset) {
  auto width = col::size_of(x.type());
  auto* p = static_cast<unsigned char*>(x.data());
  for (size_t i = 0; i < x.numel(); ++i) {
    auto h =
      hash(static_cast<uint64_t>(g), op, static_cast<uint64_t>(r), offset + i);
    std::memcpy(p + i * width, &h, width);
  }
}

/// Index of the first element of `x[first, first + count)` that differs
/// from rank `r`'s bytes at `offset`, or -1.
int64_t first_wrong_bytes(const col::tensor_view& x, size_t first, size_t count,
                          int g, size_t op, int r, size_t offset) {
  auto width = col::size_of(x.type());
  auto* p = static_cast<const unsigned char*>(x.data()) + first * width;
  for (size_t i = 0; i < count; ++i) {
    auto h =
      hash(static_cast<uint64_t>(g), op, static_cast<uint64_t>(r), offset + i);
    if (std::memcmp(p + i * width, &h, width) != 0)
      return static_cast<int64_t>(first + i);
  }
  return -1;
}

// -- one process
// ----------------------------------------------------------------

struct process {
  int self = 0; // process number
  int failures = 0;
  size_t checked = 0;

  void fail(const group_plan& plan, size_t index, const op_spec& op,
            const std::string& why) {
    if (++failures <= 10)
      std::fprintf(
        stderr,
        "stress process %d: group '%s' op %zu (%s, %s, %zu "
        "elements): %s\n",
        self, plan.name.c_str(), index, kind_names[static_cast<int>(op.what)],
        std::string{col::to_string(op.type)}.c_str(), op.count, why.c_str());
  }
};

col::tensor make(col::dtype t, size_t count) {
  auto x = col::tensor::empty(t, {static_cast<int64_t>(count)});
  if (!x) throw col::collective_error{x.error()};
  std::memset(x->data(), 0xa5, x->nbytes());
  return std::move(*x);
}

/// One submitted op: its buffers stay alive until its works completed.
struct in_flight {
  const group_plan* plan = nullptr;
  size_t index = 0;
  int rank = 0;
  col::tensor in;
  col::tensor out;
  std::vector<col::work> works;
};

in_flight submit(const group_plan& plan, size_t index, int rank) {
  const auto& op = plan.ops[index];
  auto n = static_cast<int>(plan.members.size());
  auto w = static_cast<size_t>(n);
  const auto& name = plan.name;
  in_flight f;
  f.plan = &plan;
  f.index = index;
  f.rank = rank;
  auto g = plan.id;
  switch (op.what) {
    case kind::allreduce:
    case kind::allreduce_large: {
      f.in = make(op.type, op.count);
      for (size_t i = 0; i < op.count; ++i)
        store_value(op.type, f.in.data(), i, small_value(g, index, rank, i));
      col::allreduce_options opts;
      opts.op = op.rop;
      if (!op.in_place) f.out = make(op.type, op.count);
      const auto& out = op.in_place ? f.in : f.out;
      // Every third allreduce of a rank is a persistent op started once
      // (rank-dependent, so ranks mix both forms in one op): both must
      // take the same sequence number and agree on the wire.
      if ((index + static_cast<size_t>(rank)) % 3 == 0) {
        auto prepared =
          col::get_group(name)->prepare_allreduce(f.in, out, opts);
        if (!prepared) throw col::collective_error{prepared.error()};
        f.works.push_back(prepared->start());
      } else if (op.in_place) {
        f.works.push_back(col::allreduce_async(f.in, name, opts));
      } else {
        f.works.push_back(col::allreduce_async(f.in, f.out, name, opts));
      }
      break;
    }
    case kind::reduce_scatter: {
      f.in = make(op.type, op.count * w);
      for (size_t i = 0; i < op.count * w; ++i)
        store_value(op.type, f.in.data(), i, small_value(g, index, rank, i));
      f.out = make(op.type, op.count);
      col::reduce_scatter_options opts;
      opts.op = op.rop;
      f.works.push_back(col::reduce_scatter_async(f.in, f.out, name, opts));
      break;
    }
    case kind::allgather:
      f.in = make(op.type, op.count);
      fill_bytes(f.in, g, index, rank, 0);
      f.out = make(op.type, op.count * w);
      f.works.push_back(col::allgather_async(f.in, f.out, name));
      break;
    case kind::broadcast:
      f.in = make(op.type, op.count);
      if (rank == op.root) fill_bytes(f.in, g, index, rank, 0);
      f.works.push_back(col::broadcast_async(f.in, op.root, name));
      break;
    case kind::alltoall:
      f.in = make(op.type, op.count * w);
      fill_bytes(f.in, g, index, rank, 0);
      f.out = make(op.type, op.count * w);
      f.works.push_back(col::alltoall_async(f.in, f.out, name));
      break;
    case kind::barrier: f.works.push_back(col::barrier_async(name)); break;
    case kind::ring:
    case kind::pairs: {
      int dst = op.what == kind::ring ? (rank + op.shift) % n : rank ^ 1;
      int src = op.what == kind::ring ? (rank - op.shift + n) % n : rank ^ 1;
      if (dst >= n) break; // the odd rank out of the pairs
      f.in = make(op.type, op.count);
      fill_bytes(f.in, g, index, rank, 0);
      f.out = make(op.type, op.count);
      col::send_options sopts;
      sopts.tag = op.tag;
      col::recv_options ropts;
      ropts.tag = op.tag;
      f.works.push_back(col::send_async(f.in, dst, name, sopts));
      f.works.push_back(col::recv_async(f.out, src, name, ropts));
      break;
    }
  }
  return f;
}

void check(process& proc, const in_flight& f) {
  const auto& plan = *f.plan;
  const auto& op = plan.ops[f.index];
  auto n = static_cast<int>(plan.members.size());
  auto g = plan.id;
  auto rank = f.rank;
  for (auto& w : f.works)
    if (auto err = w.wait()) {
      proc.fail(plan, f.index, op, col::render(err));
      return;
    }
  auto wrong_at = [&](int64_t at, int from) {
    if (at >= 0)
      proc.fail(plan, f.index, op,
                "wrong bytes at element " + std::to_string(at) +
                  " (block of rank " + std::to_string(from) + ")");
  };
  auto reduced = [&](size_t i) {
    int64_t acc = small_value(g, f.index, 0, i);
    for (int r = 1; r < n; ++r) {
      auto v = small_value(g, f.index, r, i);
      switch (op.rop) {
        case col::reduce_op::min: acc = std::min(acc, v); break;
        case col::reduce_op::max: acc = std::max(acc, v); break;
        default: acc += v; break;
      }
    }
    return acc;
  };
  switch (op.what) {
    case kind::allreduce:
    case kind::allreduce_large: {
      const auto& result = op.in_place ? f.in : f.out;
      for (size_t i = 0; i < op.count; ++i)
        if (!equal_value(op.type, result.data(), i, reduced(i))) {
          proc.fail(plan, f.index, op,
                    "wrong reduction at element " + std::to_string(i));
          break;
        }
      break;
    }
    case kind::reduce_scatter: {
      auto first = static_cast<size_t>(rank) * op.count;
      for (size_t i = 0; i < op.count; ++i)
        if (!equal_value(op.type, f.out.data(), i, reduced(first + i))) {
          proc.fail(plan, f.index, op,
                    "wrong reduction at element " + std::to_string(i));
          break;
        }
      break;
    }
    case kind::allgather:
      for (int r = 0; r < n; ++r)
        wrong_at(
          first_wrong_bytes(f.out, r * op.count, op.count, g, f.index, r, 0),
          r);
      break;
    case kind::broadcast:
      wrong_at(first_wrong_bytes(f.in, 0, op.count, g, f.index, op.root, 0),
               op.root);
      break;
    case kind::alltoall:
      // Block j of our output is block `rank` of rank j's input.
      for (int j = 0; j < n; ++j)
        wrong_at(first_wrong_bytes(f.out, j * op.count, op.count, g, f.index, j,
                                   rank * op.count),
                 j);
      break;
    case kind::barrier: break;
    case kind::ring:
    case kind::pairs: {
      if (f.works.empty()) break;
      int src = op.what == kind::ring ? (rank - op.shift + n) % n : rank ^ 1;
      wrong_at(first_wrong_bytes(f.out, 0, op.count, g, f.index, src, 0), src);
      break;
    }
  }
  ++proc.checked;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr,
                 "usage: %s <process 0-3> <store dir> <seed> <total ops> "
                 "[deadline ms]\n",
                 argv[0]);
    return 2;
  }
  process proc;
  proc.self = std::atoi(argv[1]);
  std::string dir = argv[2];
  auto seed = std::strtoull(argv[3], nullptr, 0);
  auto total = static_cast<size_t>(std::strtoull(argv[4], nullptr, 0));
  auto deadline_ms = argc == 6 ? std::atol(argv[5]) : 60000;
  if (proc.self < 0 || proc.self >= world) return 2;
  // A hang must not outlive the test: give up after the deadline.
  std::thread{[deadline_ms, self = proc.self] {
    std::this_thread::sleep_for(std::chrono::milliseconds{deadline_ms});
    std::fprintf(stderr, "stress process %d: deadline of %ld ms passed\n", self,
                 deadline_ms);
    std::fflush(stderr);
    _exit(3);
  }}.detach();
  auto start = std::chrono::steady_clock::now();
  // 40% of the ops on each full group, 20% on the subgroup.
  std::vector<group_plan> plans;
  plans.push_back(make_plan(seed, 1, "stress-a", {0, 1, 2, 3}, total * 2 / 5));
  plans.push_back(make_plan(seed, 2, "stress-b", {0, 1, 2, 3}, total * 2 / 5));
  plans.push_back(
    make_plan(seed, 3, "stress-sub", {1, 2, 3}, total - 2 * (total * 2 / 5)));
  struct membership {
    const group_plan* plan;
    int rank;
    size_t next_op = 0;
    size_t next_batch = 0;
  };
  std::vector<membership> mine;
  size_t my_ops = 0;
  try {
    col::init_options opts;
    opts.store = col::make_file_store(dir);
    opts.timeout = std::chrono::seconds{20};
    // The same order on every process: each init waits for its members.
    for (auto& plan : plans)
      for (size_t r = 0; r < plan.members.size(); ++r)
        if (plan.members[r] == proc.self) {
          col::init_collective_group(static_cast<int>(plan.members.size()),
                                     static_cast<int>(r), "gloo", plan.name,
                                     opts);
          mine.push_back({&plan, static_cast<int>(r)});
          my_ops += plan.ops.size();
        }
    // Each round submits the next batch of every group, then checks them
    // all: up to 8 ops per group and 3 groups in flight at once.
    for (;;) {
      std::vector<in_flight> batch;
      for (auto& m : mine) {
        if (m.next_batch == m.plan->batch_sizes.size()) continue;
        auto size = m.plan->batch_sizes[m.next_batch++];
        for (size_t k = 0; k < size; ++k)
          batch.push_back(submit(*m.plan, m.next_op++, m.rank));
      }
      if (batch.empty()) break;
      for (auto& f : batch)
        check(proc, f);
    }
    for (auto& m : mine)
      col::destroy_collective_group(m.plan->name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stress process %d: %s\n", proc.self, e.what());
    return 1;
  }
  auto secs =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
  std::printf("stress process %d: %zu ops in %zu groups, %zu checked, %d "
              "failures, %.1f s\n",
              proc.self, my_ops, mine.size(), proc.checked, proc.failures,
              secs);
  return proc.failures == 0 && proc.checked == my_ops ? 0 : 1;
}
