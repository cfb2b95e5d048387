#include "rank_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <new>

#include "caf_collective/api.hpp"

#include "data_pattern.hpp"
#include "direct_path.hpp"
#include "driver_path.hpp"
#include "gloo_session.hpp"
#include "raw_gloo_path.hpp"
#include "report.hpp"

namespace caf_collective::bench {

namespace {

using clock_type = std::chrono::steady_clock;

constexpr auto gloo_timeout = std::chrono::seconds{60};

bool is_driver(const std::string& path) {
  return path == "driver" || path == "driver-overlap";
}

// 64-byte aligned, allocated once for the largest size and touched once:
// fresh pages are slow here and must not land in any timed loop.
struct aligned_buffer {
  explicit aligned_buffer(size_t bytes)
    : data(static_cast<std::byte*>(::operator new (std::max<size_t>(bytes, 64),
                                                   std::align_val_t{64})),
           deleter{}) {
    std::memset(data.get(), 0, std::max<size_t>(bytes, 64));
  }
  struct deleter {
    void operator()(std::byte* p) const {
      ::operator delete (p, std::align_val_t{64});
    }
  };
  std::unique_ptr<std::byte, deleter> data;
};

class rank_runner {
 public:
  rank_runner(const perf_options& opts, const rank_env& env)
    : opts_(opts), env_(env) {
    control_ = std::make_unique<control_channel>(connect(env, "control"));
  }

  int run() {
    connect_paths();
    auto max_bytes = opts_.max_bytes + 64;
    aligned_buffer in{max_bytes};
    aligned_buffer out{max_bytes};
    std::vector<result_row> all;
    for (auto op : opts_.ops) {
      std::vector<result_row> rows;
      if (is_root()) print_header(std::cout, op, opts_);
      for (auto bytes : op_sizes(opts_, op)) {
        for (auto& path : paths_) {
          if (!path->supports(op, false)) continue;
          for (auto& row :
               measure(*path, op, bytes, in.data.get(), out.data.get())) {
            if (is_root()) print_row(std::cout, row, opts_);
            rows.push_back(std::move(row));
          }
        }
      }
      if (rows.empty() && is_root())
        std::cout << "# no path of this run implements " << to_string(op)
                  << "\n";
      if (is_root()) print_footer(std::cout, rows, opts_);
      all.insert(all.end(), rows.begin(), rows.end());
    }
    size_t wrong = 0;
    for (auto& row : all)
      wrong += row.out_of_place.wrong + row.in_place.wrong;
    bool written = !is_root() || write_outputs(all);
    control_->barrier();
    // A run that timed nothing must not pass for a measurement.
    if (all.empty()) {
      if (is_root())
        std::cerr << "caf_collective_perf: nothing measured: no path of "
                     "--path implements an op of --op\n";
      return 2;
    }
    if (!written) return 2;
    return wrong > 0 ? 1 : 0;
  }

 private:
  bool is_root() const noexcept { return env_.rank == 0; }

  std::shared_ptr<gloo::Context> connect(const rank_env& env,
                                         const std::string& prefix) {
    return connect_gloo(*env.gloo_store, prefix, env.rank, opts_.ranks,
                        gloo_timeout);
  }

  void connect_paths() {
    for (auto& name : opts_.paths) {
      if (name == "raw-gloo" || name == "raw-gloo-best") {
        auto ctx = connect(env_, name);
        if (opts_.raw_warm_up) warm_up_pairs(*ctx, backend_warm_up_bytes);
        paths_.push_back(name == "raw-gloo" ? make_raw_gloo_path(ctx)
                                            : make_raw_gloo_best_path(ctx));
      } else if (name == "direct" || name == "shm" ||
                 name == "shm-persistent") {
        auto backend = name == "direct" ? opts_.backend : std::string{"shm"};
        paths_.push_back(make_direct_path(name, backend, env_.rank, opts_.ranks,
                                          env_.store, opts_.direct_algorithm,
                                          name == "shm-persistent"));
      } else if (is_driver(name) && driver_path_available()) {
        paths_.push_back(make_driver_path(
          env_.rank, opts_.ranks, opts_.caf_scheduler, opts_.backend,
          name == "driver-overlap" ? opts_.window : 1));
      } else if (is_driver(name) && is_root()) {
        std::cout << "# path " << name
                  << ": not available (this build has no actor layer with a "
                     "driver API); skipped\n";
      }
    }
  }

  // One row per size: the fastest variant of the path (by mean time;
  // wrong results of every variant count), preceded by one row per variant
  // ("gloo:<algorithm>") with --variants.
  std::vector<result_row> measure(bench_path& path, bench_op op, size_t bytes,
                                  std::byte* in, std::byte* out) {
    result_row base{op,    std::string{path.name()},    {},
                    bytes, bytes / size_of(opts_.type), {},
                    {}};
    op_args args;
    args.op = op;
    args.type = opts_.type;
    args.redop = opts_.redop;
    args.root = opts_.root;
    args.rank = env_.rank;
    args.ranks = opts_.ranks;
    args.total = base.count;
    args.in = in;
    args.out = out;
    auto n = path.variants(op);
    std::vector<result_row> rows(static_cast<size_t>(n), base);
    for (int v = 0; v < n; ++v)
      rows[v].out_of_place = measure_one(path, args, v);
    if (path.supports(op, true) && op != bench_op::barrier) {
      args.in = out;
      for (int v = 0; v < n; ++v)
        rows[v].in_place = measure_one(path, args, v);
    }
    std::string oop_algo;
    std::string ip_algo;
    for (int v = 0; v < n; ++v) {
      auto& row = rows[v];
      row.algo = path.variant_name(op, v);
      if (n > 1) row.path = "gloo:" + row.algo;
      derive_bandwidth(row.out_of_place, op, bytes, opts_.ranks);
      derive_bandwidth(row.in_place, op, bytes, opts_.ranks);
      keep_faster(base.out_of_place, row.out_of_place, oop_algo, row.algo);
      keep_faster(base.in_place, row.in_place, ip_algo, row.algo);
    }
    base.algo = ip_algo.empty() || ip_algo == oop_algo
                  ? oop_algo
                  : oop_algo + "/" + ip_algo;
    if (!opts_.show_variants || n == 1) rows.clear();
    rows.push_back(std::move(base));
    return rows;
  }

  static void keep_faster(timing& best, const timing& t, std::string& algo,
                          const std::string& name) {
    if (!t.valid) return;
    auto wrong = best.wrong + t.wrong;
    if (!best.valid || t.time_us < best.time_us) {
      best = t;
      algo = name;
    }
    best.wrong = wrong;
  }

  timing measure_one(bench_path& path, const op_args& args, int variant) {
    path.prepare(args, variant);
    control_->barrier();
    double wrong = 0;
    if (opts_.check && args.op != bench_op::barrier) {
      wrong = static_cast<double>(path.check(args));
    }
    auto bytes = args.total * size_of(args.type);
    for (int i = 0, n = warmup_iters_at(opts_, bytes); i < n; ++i)
      path.run(args);
    timing t;
    for (int r = 0; r < opts_.repeat; ++r) {
      // Outside the timed window: check_timed must see what the timed ops
      // wrote, not check()'s or an earlier series' result.
      if (opts_.check) poison_output(args);
      auto series = time_series(path, args);
      if (!t.valid || series.time_us < t.time_us) t = series;
    }
    // The timed ops too, not only the one check() ran alone: a defect that
    // shows only when ops follow each other closely must count.
    if (opts_.check && args.op != bench_op::barrier)
      wrong += static_cast<double>(path.check_timed(args));
    path.finish();
    t.wrong = static_cast<size_t>(control_->sum(wrong));
    return t;
  }

  // One timed series of opts_.iters calls; every rank takes part.
  timing time_series(bench_path& path, const op_args& args) {
    control_->barrier();
    auto iters = iters_at(opts_, args.total * size_of(args.type));
    std::vector<double> samples;
    samples.reserve(static_cast<size_t>(iters));
    auto start = clock_type::now();
    auto last = start;
    double per_run = path.ops_per_run();
    for (int i = 0; i < iters; ++i) {
      path.run(args);
      auto now = clock_type::now();
      samples.push_back(
        std::chrono::duration<double, std::micro>(now - last).count() /
        per_run);
      last = now;
    }
    auto total =
      std::chrono::duration<double, std::micro>(last - start) / per_run;
    std::sort(samples.begin(), samples.end());
    // The slowest rank defines the time of a collective.
    std::vector<double> stats{total.count() / iters,
                              samples[samples.size() / 2], samples.back()};
    control_->max(stats);
    timing t;
    t.valid = true;
    t.mean_us = stats[0];
    t.median_us = stats[1];
    t.max_us = stats[2];
    t.time_us = opts_.median_time ? t.median_us : t.mean_us;
    return t;
  }

  // Returns false when the CSV could not be written (the parser already
  // opened it once, so this is a full disk or the like).
  bool write_outputs(const std::vector<result_row>& rows) {
    bool ok = true;
    if (!opts_.csv_file.empty() && !write_csv(opts_.csv_file, rows, opts_)) {
      std::cerr << "caf_collective_perf: writing " << opts_.csv_file
                << " failed\n";
      ok = false;
    }
    if (!opts_.plot_file.empty() && !write_plot(opts_.plot_file, rows, opts_))
      std::cerr << "caf_collective_perf: gnuplot failed (install "
                   "gnuplot-nox)\n";
    return ok;
  }

  const perf_options& opts_;
  const rank_env& env_;
  std::unique_ptr<control_channel> control_;
  std::vector<bench_path_ptr> paths_;
};

} // namespace

int run_rank(const perf_options& opts, const rank_env& env) {
  try {
    member_scope scope;
    rank_runner runner{opts, env};
    return runner.run();
  } catch (const std::exception& ex) {
    std::cerr << "caf_collective_perf: rank " << env.rank
              << " failed: " << ex.what() << "\n";
    return 2;
  }
}

} // namespace caf_collective::bench
