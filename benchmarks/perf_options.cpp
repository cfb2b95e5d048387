#include "perf_options.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "caf_scheduler_names.hpp"
#include "strict_number.hpp"

namespace caf_collective::bench {

namespace {

// Each rank is a thread or process of this machine with a connection to
// every other one; far more would only exhaust threads and sockets.
constexpr int max_ranks = 1024;

constexpr const char* usage = R"(usage: caf_collective_perf [options]
  --op NAME[,NAME]   allreduce|reduce|broadcast|allgather|reduce_scatter|
                     alltoall|gather|scatter|sendrecv|barrier|all (allreduce);
                     an op the run cannot measure (sendrecv at 1 rank, or
                     no size of -b..-e splits among the ranks) is left out
                     with a note; a run left with no op is refused
  -b BYTES           minimum size, suffixes K M G (8)
  -e BYTES           maximum size (64M)
  -f FACTOR          multiply the size by FACTOR per step (2)
  -n ITERS           timed iterations per size (20)
  -w ITERS           warm-up iterations per size (5)
  --repeat R         timed series per size; keep the fastest (1)
  --time mean|median time column: mean per iteration (nccl-tests) or the
                     median iteration of the slowest rank (mean)
  -c 0|1             check results on known data (1)
  -d DTYPE           int8 uint8 int32 int64 float32 float64 (float32)
  -o OP              sum prod min max (sum)
  -r ROOT            root of reduce, broadcast, gather, scatter (0)
  --ranks N          number of ranks, 1 to 1024 (2)
  --backend NAME     backend of the direct and driver paths: gloo shm
                     auto (gloo)
  --path LIST        raw-gloo,raw-gloo-best,direct,shm,shm-persistent,
                     driver,driver-overlap (raw-gloo,raw-gloo-best,direct);
                     shm: our API on backend shm, beside direct on
                     --backend; shm-persistent: the same ops prepared once
                     (group::prepare_*) and run each iteration;
                     driver-overlap: the driver path with --window
                     requests in flight, time per op
  --window W         requests in flight on driver-overlap, >= 2 (4)
  --iter-budget B    at most B / size timed and warm-up iterations per
                     size (at least 2 and 1; suffixes K M G; 0: -n, -w)
  --copy-model 0|1   measure the copy bandwidth first and print busbw as
                     a fraction of the copy model (%copy) (1)
  --direct-algo A    allreduce algorithm of the direct path: automatic ring
                     ring_chunked halving_doubling bcube ring_options_api
                     (automatic)
  --variants         also print a row per Gloo algorithm of raw-gloo-best
  --procs            ranks as processes (default: threads of one process)
  --raw-warmup 0|1   give raw Gloo our groups' 1 MiB warm-up per pair (1)
  --caf-scheduler S  CAF scheduler of the driver path: stealing (CAF's
                     default), sharing, or stealing-sleep (stealing
                     with sleep_idle_workers); /N after it: N workers
                     instead of one per core (stealing)
  --csv FILE         also write every row as CSV
  --plot FILE.png    plot busbw against size per path (gnuplot)
)";

std::vector<std::string> split(std::string_view list) {
  std::vector<std::string> result;
  std::stringstream in{std::string{list}};
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) result.push_back(item);
  return result;
}

std::vector<bench_op> parse_ops(std::string_view list) {
  std::vector<bench_op> result;
  for (auto& name : split(list)) {
    if (name == "all") {
      auto all = all_bench_ops();
      result.assign(all.begin(), all.end());
      continue;
    }
    auto op = parse_bench_op(name);
    if (!op) throw std::invalid_argument("unknown op " + name);
    result.push_back(*op);
  }
  if (result.empty())
    throw std::invalid_argument("--op names no op: '" + std::string{list} +
                                "'");
  return result;
}

void check_paths(const std::vector<std::string>& paths) {
  if (paths.empty()) throw std::invalid_argument("--path names no path");
  for (auto& p : paths)
    if (p != "raw-gloo" && p != "raw-gloo-best" && p != "direct" &&
        p != "shm" && p != "shm-persistent" && p != "driver" &&
        p != "driver-overlap")
      throw std::invalid_argument("unknown path " + p);
}

allreduce_algorithm parse_algorithm(std::string_view name) {
  constexpr std::pair<std::string_view, allreduce_algorithm> table[] = {
    {"automatic", allreduce_algorithm::automatic},
    {"ring", allreduce_algorithm::ring},
    {"ring_chunked", allreduce_algorithm::ring_chunked},
    {"halving_doubling", allreduce_algorithm::halving_doubling},
    {"bcube", allreduce_algorithm::bcube},
    {"ring_options_api", allreduce_algorithm::ring_options_api},
  };
  for (auto& [key, value] : table)
    if (key == name) return value;
  throw std::invalid_argument("unknown allreduce algorithm " +
                              std::string{name});
}

reduce_op parse_redop(std::string_view name) {
  if (name == "prod") return reduce_op::product;
  auto op = parse_reduce_op(name);
  if (!op || (*op != reduce_op::sum && *op != reduce_op::product &&
              *op != reduce_op::min && *op != reduce_op::max))
    throw std::invalid_argument("reduce op must be sum, prod, min or max");
  return *op;
}

// Why this run cannot measure `op` ("" when it can).
std::string unmeasurable(const perf_options& opts, bench_op op) {
  // Each rank would send to itself: raw Gloo's pair crashes on that and
  // our groups refuse it, so no path has a sendrecv to time.
  if (op == bench_op::sendrecv && opts.ranks < 2)
    return "sendrecv needs 2 or more ranks";
  if (!op_sizes(opts, op).empty()) return {};
  // The smallest size with a whole element per rank: one element, or
  // one per rank for the ops that split their buffer among the ranks.
  auto elem = size_of(opts.type);
  bool blocked = usable_count(op, 1, opts.ranks) == 0;
  auto need = blocked ? elem * static_cast<size_t>(opts.ranks) : elem;
  std::ostringstream why;
  why << to_string(op) << " needs at least " << need << " B ("
      << (blocked ? std::to_string(opts.ranks) + " " : "one ")
      << to_string(opts.type) << (blocked ? " elements" : " element")
      << "): no size of the sweep from -b " << opts.min_bytes << " to -e "
      << opts.max_bytes << " by -f " << opts.step_factor << " reaches that";
  return why.str();
}

// Leaves out the ops this run cannot measure, with a note each, and
// refuses a run that has none left: it would print empty tables and pass.
void settle_ops(perf_options& opts) {
  std::vector<bench_op> kept;
  std::string why_none;
  for (auto op : opts.ops) {
    auto why = unmeasurable(opts, op);
    if (why.empty()) {
      kept.push_back(op);
      continue;
    }
    opts.notes.push_back(why + "; " + std::string{to_string(op)} + " left out");
    why_none += (why_none.empty() ? "" : "; ") + why;
  }
  if (kept.empty())
    throw std::invalid_argument("nothing to measure: " + why_none);
  opts.ops = std::move(kept);
}

// Creates (truncates) the CSV file now: a sweep may take hours, and its
// rows must not be lost to a typo in the file name at the end.
void check_writable(const std::string& file) {
  if (file.empty()) return;
  std::ofstream out{file};
  if (!out)
    throw std::invalid_argument("--csv " + file +
                                ": cannot write it: " + std::strerror(errno));
}

} // namespace

std::vector<size_t> sweep_sizes(const perf_options& opts) {
  std::vector<size_t> result;
  for (auto size = static_cast<double>(opts.min_bytes);
       size <= static_cast<double>(opts.max_bytes); size *= opts.step_factor) {
    // A factor just above 1 repeats a size many times over.
    auto bytes = static_cast<size_t>(size);
    if (result.empty() || result.back() != bytes) result.push_back(bytes);
    if (opts.step_factor <= 1.0) break;
  }
  return result;
}

std::vector<size_t> op_sizes(const perf_options& opts, bench_op op) {
  if (op == bench_op::barrier) return {0};
  std::vector<size_t> result;
  auto elem = size_of(opts.type);
  for (auto bytes : sweep_sizes(opts)) {
    auto count = usable_count(op, bytes / elem, opts.ranks);
    if (count > 0 && (result.empty() || result.back() != count * elem))
      result.push_back(count * elem);
  }
  return result;
}

int iters_at(const perf_options& opts, size_t bytes) {
  if (opts.iter_budget == 0 || bytes == 0) return opts.iters;
  auto cap = std::max<size_t>(opts.iter_budget / bytes, 2);
  return static_cast<int>(std::min(static_cast<size_t>(opts.iters), cap));
}

int warmup_iters_at(const perf_options& opts, size_t bytes) {
  if (opts.iter_budget == 0 || bytes == 0) return opts.warmup_iters;
  auto cap = std::max<size_t>(opts.iter_budget / bytes, 1);
  return static_cast<int>(
    std::min(static_cast<size_t>(opts.warmup_iters), cap));
}

std::optional<perf_options> parse_perf_options(int argc, char** argv,
                                               int& exit_code) {
  perf_options opts;
  exit_code = 0;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string_view flag = argv[i];
      if (flag == "-h" || flag == "--help") {
        std::cout << usage;
        return std::nullopt;
      }
      if (flag == "--procs" || flag == "--variants") {
        (flag == "--procs" ? opts.procs : opts.show_variants) = true;
        continue;
      }
      if (i + 1 >= argc)
        throw std::invalid_argument("missing value after " + std::string{flag});
      std::string_view value = argv[++i];
      auto count = [&](int lo) { return parse_int(flag, value, lo, INT_MAX); };
      auto on_off = [&] { return parse_int(flag, value, 0, 1) == 1; };
      if (flag == "--op")
        opts.ops = parse_ops(value);
      else if (flag == "-b")
        opts.min_bytes = parse_byte_count(flag, value);
      else if (flag == "-e")
        opts.max_bytes = parse_byte_count(flag, value);
      else if (flag == "-f")
        opts.step_factor = parse_finite(flag, value, 1.0);
      else if (flag == "-n")
        opts.iters = count(1);
      else if (flag == "-w")
        opts.warmup_iters = count(0);
      else if (flag == "--time") {
        if (value != "mean" && value != "median")
          throw std::invalid_argument("--time must be mean or median");
        opts.median_time = value == "median";
      } else if (flag == "--repeat")
        opts.repeat = count(1);
      else if (flag == "-c")
        opts.check = on_off();
      else if (flag == "-d") {
        auto t = parse_dtype(value);
        if (!t || *t == dtype::float16 || *t == dtype::bfloat16)
          throw std::invalid_argument("unsupported dtype " +
                                      std::string{value});
        opts.type = *t;
      } else if (flag == "-o")
        opts.redop = parse_redop(value);
      else if (flag == "-r")
        opts.root = parse_int(flag, value, 0, max_ranks - 1);
      else if (flag == "--ranks")
        opts.ranks = parse_int(flag, value, 1, max_ranks);
      else if (flag == "--backend")
        opts.backend = value;
      else if (flag == "--path")
        opts.paths = split(value);
      else if (flag == "--direct-algo")
        opts.direct_algorithm = parse_algorithm(value);
      else if (flag == "--iter-budget")
        opts.iter_budget = parse_byte_count(flag, value);
      else if (flag == "--copy-model")
        opts.copy_model = on_off();
      else if (flag == "--raw-warmup")
        opts.raw_warm_up = on_off();
      else if (flag == "--window")
        // One request in flight is the driver path, under its own name.
        opts.window = count(2);
      else if (flag == "--caf-scheduler") {
        if (!is_caf_scheduler(value))
          throw std::invalid_argument(std::string{"--caf-scheduler must be "} +
                                      caf_scheduler_names);
        opts.caf_scheduler = value;
      } else if (flag == "--csv")
        opts.csv_file = value;
      else if (flag == "--plot")
        opts.plot_file = value;
      else
        throw std::invalid_argument("unknown flag " + std::string{flag});
    }
    check_paths(opts.paths);
    if (opts.backend != "gloo" && opts.backend != "shm" &&
        opts.backend != "auto")
      throw std::invalid_argument("--backend must be gloo, shm or auto");
    if (opts.root >= opts.ranks)
      throw std::invalid_argument("-r must be < --ranks");
    if (opts.min_bytes == 0 || opts.min_bytes > opts.max_bytes)
      throw std::invalid_argument("need 0 < -b <= -e");
    settle_ops(opts);
    check_writable(opts.csv_file);
  } catch (const std::exception& ex) {
    std::cerr << "caf_collective_perf: " << ex.what() << "\n" << usage;
    exit_code = 2;
    return std::nullopt;
  }
  return opts;
}

} // namespace caf_collective::bench
