// caf_collective_perf: nccl-tests-style measurements of our collectives
// beside raw Gloo. Ranks run as threads of this process, or (--procs) as
// forked processes that meet through file stores in a fresh temp dir.
// Before the ranks start, two threads measure the machine's copy bandwidth
// (copy_model.hpp).
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>

#include "perf_options.hpp"
#include "rank_runner.hpp"
#include "report.hpp"

using namespace caf_collective;
using namespace caf_collective::bench;

namespace {

int run_threads(const perf_options& opts) {
  auto gloo_store = std::make_shared<gloo::rendezvous::HashStore>();
  auto store = make_in_process_store();
  std::vector<rank_env> envs;
  for (int r = 0; r < opts.ranks; ++r)
    envs.push_back(rank_env{r, gloo_store, store});
  std::vector<int> status(static_cast<size_t>(opts.ranks), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < opts.ranks; ++r)
    threads.emplace_back(
      [&, r] { status[static_cast<size_t>(r)] = run_rank(opts, envs[r]); });
  for (auto& t : threads)
    t.join();
  int worst = 0;
  for (auto s : status)
    worst = std::max(worst, s);
  return worst;
}

int run_procs(const perf_options& opts) {
  // Forked before any thread exists (CAF and Gloo start threads).
  char tmpl[] = "/tmp/caf_collective_perf.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  std::filesystem::path dir{tmpl};
  std::filesystem::create_directories(dir / "gloo");
  std::filesystem::create_directories(dir / "caf");
  std::cout.flush();
  std::vector<pid_t> children;
  for (int r = 0; r < opts.ranks; ++r) {
    auto pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 2;
    }
    if (pid == 0) {
      rank_env env{
        r,
        std::make_shared<gloo::rendezvous::FileStore>((dir / "gloo").string()),
        make_file_store((dir / "caf").string())};
      auto status = run_rank(opts, env);
      std::cout.flush();
      std::_Exit(status);
    }
    children.push_back(pid);
  }
  int worst = 0;
  for (auto pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    auto code = WIFEXITED(status) ? WEXITSTATUS(status) : 2;
    worst = std::max(worst, code);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return worst;
}

} // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  auto opts = parse_perf_options(argc, argv, exit_code);
  if (!opts) return exit_code;
  print_notes(std::cout, *opts);
  // Measured before any rank exists: nothing else of ours runs meanwhile.
  if (opts->copy_model) {
    opts->copy = measure_copy_bandwidth(copy_threads_for(opts->ranks));
    print_copy_model(std::cout, *opts);
  }
  auto status = opts->procs ? run_procs(*opts) : run_threads(*opts);
  // Again after the sweep: shows how much the machine's load moved.
  if (opts->copy_model) {
    auto after = measure_copy_bandwidth(opts->copy.threads, opts->copy.bytes,
                                        opts->copy.reps);
    std::cout << "# copy bandwidth after the sweep: " << std::fixed
              << std::setprecision(2) << after.total_gbs
              << " GB/s together (%copy used " << opts->copy.total_gbs << ")\n";
  }
  if (status == 1) std::cerr << "caf_collective_perf: wrong results\n";
  return status;
}
