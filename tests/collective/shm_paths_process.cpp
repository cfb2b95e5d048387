// One rank of the tests of the shm backend's paths across processes
// (test_shm_paths.cpp).
//
// Usage: collective_shm_paths_process <mode> <world> <rank> <store dir>
//                                     <group> [argument]
//   paths E   forms "<group>-a" as the kernel allows (E: "single" or
//             "staged", the path the test expects there) and "<group>-b"
//             with single copy turned off in rank 0's environment; checks
//             the path each group logged, runs the same ops with the same
//             inputs on both and checks their results are bit-identical
//             (float sums in rank order) and, for data movement, right
//   matrix    allreduce, reduce and reduce_scatter of every dtype and
//             reduce op against the reference of test_support.hpp, at sizes
//             of the small path and of the large paths (single copy and
//             staged), at sizes that
//             take several staged rounds, and at sizes whose results are
//             streamed past the caches
//   victim    root of 8 MiB broadcasts (single copy) until it is killed
//   reader    takes the victim's broadcasts until one fails; exit 0 if it
//             failed with peer_lost naming the victim (the last rank)
// Failures go to stderr; exit 1 on any.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

// test_support.hpp speaks doctest; this process runs no test cases but
// needs doctest's definitions to link.
#define DOCTEST_CONFIG_IMPLEMENT
#include "test_support.hpp"

namespace col = caf_collective;

namespace {

int my_rank = -1;
int report_fd = 2; // stderr, or a copy of it when stderr goes to a file
test::rank_log checks;

void print_failures() {
  for (const auto& m : checks.messages())
    dprintf(report_fd, "rank %d: %s\n", my_rank, m.c_str());
}

col::init_options options(const std::string& dir, const std::string& group) {
  col::init_options opts;
  opts.store = col::make_file_store(dir + "/" + group);
  opts.timeout = std::chrono::seconds{30};
  return opts;
}

/// Whether an error text names `rank`: "rank 2 ..." or "ranks [0, 2]"
/// (when a survivor saw another survivor exit too).
bool names_rank(const std::string& text, int rank) {
  auto r = std::to_string(rank);
  for (auto at = text.find("rank " + r); at != std::string::npos;
       at = text.find("rank " + r, at + 1)) {
    auto end = at + 5 + r.size();
    if (end == text.size() ||
        !std::isdigit(static_cast<unsigned char>(text[end])))
      return true;
  }
  auto list = text.find("ranks [");
  if (list == std::string::npos) return false;
  auto close = text.find(']', list);
  std::string items = ", " + text.substr(list + 7, close - list - 7) + ",";
  return items.find(", " + r + ",") != std::string::npos ||
         items.find(" " + r + ",") != std::string::npos;
}

std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Arbitrary float32 values of many magnitudes: their sums round, so any
/// other order of the reduction would change bits.
void fill_rough(const col::tensor_view& x, int rank) {
  auto* p = static_cast<float*>(x.data());
  for (size_t i = 0; i < x.numel(); ++i) {
    auto h = test::hash(uint64_t(rank), i, 5);
    p[i] = float(int64_t(h % 2000001) - 1000000) / float(1 + h % 977);
  }
}

/// One result per op, run on `g`; paths compares them across groups.
std::vector<col::tensor> run_path_ops(int world, int rank,
                                      const std::string& g) {
  std::vector<col::tensor> results;
  auto w = size_t(world);
  // allreduce, float32, 1 Mi + 3 elements: two rounds of a staging area.
  auto a = test::make_tensor(col::dtype::float32, (size_t{1} << 20) + 3);
  fill_rough(a, rank);
  col::allreduce(a, g);
  results.push_back(std::move(a));
  // allreduce, float16 (reduced in float32, rounded once), and int64 avg
  // (exact in 128 bits).
  for (auto [type, op] : {std::pair{col::dtype::float16, col::reduce_op::sum},
                          std::pair{col::dtype::int64, col::reduce_op::avg}}) {
    auto x = test::make_tensor(type, 200003);
    test::fill_input(x, op, rank);
    col::allreduce_options opts;
    opts.op = op;
    col::allreduce(x, g, opts);
    results.push_back(std::move(x));
  }
  // reduce_scatter, float32, 70001 elements per rank.
  auto rs_in = test::make_tensor(col::dtype::float32, 70001 * w);
  fill_rough(rs_in, rank);
  auto rs_out = test::make_tensor(col::dtype::float32, 70001);
  col::reduce_scatter(rs_in, rs_out, g);
  results.push_back(std::move(rs_out));
  // reduce to rank 1, float32.
  col::reduce_options ropts;
  ropts.root = 1;
  // 300001 elements (staged on both groups) and 24001 (96 KB: single copy
  // where the kernel allows it, shm_backend.hpp's single_copy_range).
  for (size_t count : {size_t{300001}, size_t{24001}}) {
    auto r_in = test::make_tensor(col::dtype::float32, count);
    fill_rough(r_in, rank);
    auto r_out = test::make_tensor(col::dtype::float32, count);
    col::reduce(r_in, r_out, g, ropts);
    if (rank == 1) results.push_back(std::move(r_out));
  }
  // reduce_scatter of 96 KB inputs at 3 ranks: single copy where allowed.
  auto small_rs_in = test::make_tensor(col::dtype::float32, 8001 * w);
  fill_rough(small_rs_in, rank);
  auto small_rs_out = test::make_tensor(col::dtype::float32, 8001);
  col::reduce_scatter(small_rs_in, small_rs_out, g);
  results.push_back(std::move(small_rs_out));
  // Data movement, checked against the pattern too. allgather: 4.4 MB per
  // rank, two staged rounds of a 4 MiB area.
  constexpr size_t m = 1100007;
  auto mine = test::make_tensor(col::dtype::int32, m);
  test::fill_pattern(mine, rank);
  auto all = test::make_tensor(col::dtype::int32, m * w);
  col::allgather(mine, all, g);
  for (int r = 0; r < world; ++r) {
    auto want = test::make_tensor(col::dtype::int32, m);
    test::fill_pattern(want, r);
    checks.expect_equal(g + " allgather block " + std::to_string(r),
                        all.view().slice(size_t(r) * m, m), want);
  }
  results.push_back(std::move(all));
  // alltoall, 1.5 MiB blocks: staged, a window of every block per round
  // (a third of the 4 MiB area at 3 ranks), so two rounds, the second
  // partial; out of place and in place.
  constexpr size_t b = 196613;
  auto send = test::make_tensor(col::dtype::int64, b * w);
  test::fill_pattern(send, rank);
  auto recv = test::make_tensor(col::dtype::int64, b * w);
  test::poison(recv);
  auto both = test::make_tensor(col::dtype::int64, b * w);
  test::fill_pattern(both, rank);
  col::alltoall(send, recv, g);
  col::alltoall(both, both, g);
  for (int r = 0; r < world; ++r) {
    auto want = test::make_tensor(col::dtype::int64, b * w);
    test::fill_pattern(want, r);
    checks.expect_equal(g + " alltoall block from " + std::to_string(r),
                        recv.view().slice(size_t(r) * b, b),
                        want.view().slice(size_t(rank) * b, b));
    checks.expect_equal(g + " in-place alltoall block from " +
                          std::to_string(r),
                        both.view().slice(size_t(r) * b, b),
                        want.view().slice(size_t(rank) * b, b));
  }
  results.push_back(std::move(recv));
  auto bc = test::make_tensor(col::dtype::uint8, (size_t{5} << 20) + 1);
  test::fill_pattern(bc, world - 1);
  auto want_bc = test::make_tensor(col::dtype::uint8, bc.numel());
  test::fill_pattern(want_bc, world - 1);
  if (rank != world - 1) test::poison(bc);
  col::broadcast(bc, world - 1, g);
  checks.expect_equal(g + " broadcast", bc, want_bc);
  // allgatherv, counts (r + 1) * 40000.
  std::vector<size_t> counts(w);
  for (size_t r = 0; r < w; ++r)
    counts[r] = (r + 1) * 40000;
  auto vin = test::make_tensor(col::dtype::float64, counts[size_t(rank)]);
  test::fill_pattern(vin, rank);
  auto vout =
    test::make_tensor(col::dtype::float64,
                      std::accumulate(counts.begin(), counts.end(), size_t{0}));
  col::allgatherv_options vopts;
  vopts.counts = counts;
  col::allgatherv(vin, vout, g, vopts);
  size_t at = 0;
  for (int r = 0; r < world; ++r) {
    auto want = test::make_tensor(col::dtype::float64, counts[size_t(r)]);
    test::fill_pattern(want, r);
    checks.expect_equal(g + " allgatherv block " + std::to_string(r),
                        vout.view().slice(at, counts[size_t(r)]), want);
    at += counts[size_t(r)];
  }
  results.push_back(std::move(vout));
  return results;
}

void run_paths(int world, int rank, const std::string& dir,
               const std::string& g, const std::string& expected) {
  // The path a group takes shows in its log (level info): send it to a
  // file this rank reads back.
  auto log_path = dir + "/log-" + g + "-" + std::to_string(rank);
  report_fd = dup(2);
  int fd = open(log_path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
  auto ga = g + "-a";
  col::init_collective_group(world, rank, "shm", ga, options(dir, ga));
  auto log_a = read_file(log_path);
  auto want_a = expected == "single" ? "move by single copy (process_vm_readv)"
                                     : "move by staged copy";
  checks.expect(log_a.find(want_a) != std::string::npos,
                "group a did not log '" + std::string{want_a} + "': " + log_a);
  if (rank == 0) setenv("CAF_COLLECTIVE_SHM_SINGLE_COPY", "off", 1);
  auto gb = g + "-b";
  col::init_collective_group(world, rank, "shm", gb, options(dir, gb));
  auto log_b = read_file(log_path).substr(log_a.size());
  // Where the kernel allows single copy, rank 0 alone refused it; where it
  // does not, every rank did.
  std::vector<int> everyone(static_cast<size_t>(world));
  std::iota(everyone.begin(), everyone.end(), 0);
  auto refused =
    "ranks " +
    col::list_ranks(expected == "single" ? std::vector<int>{0} : everyone) +
    " refused";
  checks.expect(log_b.find("move by staged copy") != std::string::npos &&
                  log_b.find(refused) != std::string::npos,
                "group b, single copy off on rank 0, logged: " + log_b);
  auto on_a = run_path_ops(world, rank, ga);
  auto on_b = run_path_ops(world, rank, gb);
  for (size_t i = 0; i < on_a.size(); ++i)
    checks.expect_equal("result " + std::to_string(i) + " of both paths",
                        on_a[i], on_b[i]);
  col::destroy_collective_group(ga);
  col::destroy_collective_group(gb);
}

void run_matrix(int world, int rank, const std::string& g) {
  // 5: the small path (one step); 65537: staged (allreduce always, and
  // inputs of reduce and reduce_scatter over 128 KiB at 3 ranks); inputs
  // of 96 KiB + 3 elements: single copy for reduce and reduce_scatter
  // where the kernel allows it (shm_backend.hpp, single_copy_range).
  for (auto t : col::all_dtypes)
    for (size_t count :
         {size_t{5}, size_t{65537}, (size_t{32} << 10) / col::size_of(t) + 1})
      for (auto op : col::all_reduce_ops)
        if (col::is_defined(op, t))
          test::check_reductions(checks, world, rank, g, t, op, count);
  // reduce_scatter and reduce of 9 MiB inputs: staged whatever the kernel
  // allows (over 8 MiB) and over several rounds, the last one partial.
  // reduce_scatter moves a window of every block per round (at 3 ranks a
  // third of the 4 MiB area), so 3 MiB blocks take three rounds; reduce
  // takes three rounds of the area. (The 3 MiB allreduce here is one round;
  // run_paths' 4 MiB allreduce takes two staged rounds.)
  for (auto t : {col::dtype::float32, col::dtype::int64})
    test::check_reductions(checks, world, rank, g, t, col::reduce_op::sum,
                           (size_t{3} << 20) / col::size_of(t) + 7);
  // Results of 32 MiB and more are written past the caches (stream_copy):
  // straight from the kernel (float32 sum), after the division of avg, and
  // after the narrowing of float16 and of int32's int64 avg carrier. The
  // odd count leaves a tail after the last 64-byte run. Staged whatever the
  // kernel allows, so checked in the run with single copy off only (the
  // slowest part of the suite: 3 x 96 MiB inputs per case).
  auto* single_copy = std::getenv("CAF_COLLECTIVE_SHM_SINGLE_COPY");
  if (single_copy == nullptr || std::string{single_copy} != "off") return;
  for (auto [t, op] : {std::pair{col::dtype::float32, col::reduce_op::sum},
                       std::pair{col::dtype::float32, col::reduce_op::avg},
                       std::pair{col::dtype::float16, col::reduce_op::max},
                       std::pair{col::dtype::int32, col::reduce_op::avg}})
    test::check_reductions(checks, world, rank, g, t, op,
                           (size_t{32} << 20) / col::size_of(t) + 5);
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: %s <mode> <world> <rank> <store dir> <group> "
                 "[argument]\n",
                 argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  int world = std::atoi(argv[2]);
  my_rank = std::atoi(argv[3]);
  std::string dir = argv[4];
  std::string g = argv[5];
  try {
    if (mode == "paths" && argc == 7) {
      setenv("CAF_COLLECTIVE_LOG_LEVEL", "info", 1);
      run_paths(world, my_rank, dir, g, argv[6]);
    } else if (mode == "matrix") {
      col::init_collective_group(world, my_rank, "shm", g, options(dir, g));
      run_matrix(world, my_rank, g);
      col::destroy_collective_group(g);
    } else if (mode == "victim" || mode == "reader") {
      col::init_collective_group(world, my_rank, "shm", g, options(dir, g));
      // Tells the test the group formed: the victim dies only after that.
      std::ofstream{dir + "/formed-" + std::to_string(my_rank)} << "formed\n";
      auto big = test::make_tensor(col::dtype::uint8, size_t{8} << 20);
      for (;;) {
        try {
          col::broadcast(big, world - 1, g);
        } catch (const col::collective_error& e) {
          std::string text = e.what();
          std::printf("rank %d: %s\n", my_rank, text.c_str());
          checks.expect(e.code() == col::errc::peer_lost &&
                          names_rank(text, world - 1),
                        "expected peer_lost naming rank " +
                          std::to_string(world - 1) + ", got " + text);
          break;
        }
      }
      col::destroy_collective_group(g);
    } else {
      std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    checks.fail(e.what());
  }
  print_failures();
  return checks.failures() == 0 ? 0 : 1;
}
