// The training problem the data-parallel examples share (01, 02, 05, 06): a
// linear model fit by SGD to a synthetic data set, the command line, a run
// on one process to compare with, and the final report and checks. Each
// example only says how its workers average their gradients.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace sgd {

struct settings {
  int steps = 40, samples = 4096, features = 8, workers = 4;
  double lr = 0.1;
  std::string plot;
  // What must hold at the end (stated in the output).
  double loss_threshold = 0.02;   // noise alone gives about 0.01
  double weight_tolerance = 1e-5; // float32 gradients vs a float64 run
};

/// Where the number of workers comes from.
enum class worker_count {
  flag,     // --workers N (default 4): the example spawns that many
  launcher, // the launcher's ranks, known after parse: see fit_to_world
};

namespace detail {

// A whole number in [1, INT_MAX], or 0 for anything else ("4k", "-3", "").
inline int positive_int(const std::string& text) {
  int value = 0;
  auto [end, ec] =
    std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc{} && end == text.data() + text.size() && value > 0
           ? value
           : 0;
}

[[noreturn]] inline void usage_error(const std::string& why,
                                     worker_count from) {
  bool flag = from == worker_count::flag;
  std::fprintf(stderr,
               "bad arguments: %s\nflags: --steps N --samples N --features "
               "N%s --lr X --plot file.png, each with a value%s\n",
               why.c_str(), flag ? " --workers N" : " [--workers N]",
               flag ? "; --samples must be a multiple of --workers"
                    : "; the workers are the launcher's ranks, --samples "
                      "must be a multiple of them");
  std::exit(2);
}

} // namespace detail

/// Flags: --steps N --samples N --features N --workers N --lr X
/// --plot file.png. Exits with status 2 on a bad command line. With
/// worker_count::launcher, --workers is optional (0 when left out) and the
/// samples are checked against the real world size by fit_to_world, since
/// a default worker count would refuse splits the launcher's ranks allow.
inline settings parse(int argc, char** argv,
                      worker_count from = worker_count::flag) {
  settings s;
  if (from == worker_count::launcher) s.workers = 0;
  std::map<std::string, int*> ints{{"--steps", &s.steps},
                                   {"--samples", &s.samples},
                                   {"--features", &s.features},
                                   {"--workers", &s.workers}};
  if (argc % 2 == 0)
    detail::usage_error(std::string{argv[argc - 1]} + " has no value", from);
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i], value = argv[i + 1];
    if (ints.count(arg) > 0) {
      *ints[arg] = detail::positive_int(value);
      if (*ints[arg] == 0)
        detail::usage_error(arg + " " + value + " is not a positive integer",
                            from);
    } else if (arg == "--lr") {
      // Garbage would read as 0 and train nothing: only a full number.
      char* end = nullptr;
      s.lr = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(s.lr) || s.lr <= 0)
        detail::usage_error("--lr " + value + " is not a positive number",
                            from);
    } else if (arg == "--plot") {
      s.plot = value;
    } else {
      detail::usage_error("unknown flag " + arg, from);
    }
  }
  if (from == worker_count::flag && s.samples % s.workers != 0)
    detail::usage_error("--samples " + std::to_string(s.samples) +
                          " is not a multiple of --workers " +
                          std::to_string(s.workers),
                        from);
  return s;
}

/// For worker_count::launcher: makes the launcher's `world` ranks the
/// workers. Returns why they cannot be (the samples do not split into
/// `world` equal shards, or --workers names another count), else empty.
inline std::string fit_to_world(settings& s, int world) {
  if (s.workers != 0 && s.workers != world)
    return "--workers " + std::to_string(s.workers) + " is not the " +
           std::to_string(world) +
           " ranks the launcher started (the ranks are the workers: "
           "leave --workers out or pass -n " +
           std::to_string(s.workers) + " to the launcher)";
  if (s.samples % world != 0)
    return "--samples " + std::to_string(s.samples) +
           " is not a multiple of the " + std::to_string(world) + " ranks";
  s.workers = world;
  return {};
}

// y = X w_true + noise, rows in order: worker r owns rows [r*n, (r+1)*n).
struct dataset {
  int rows = 0, cols = 0;
  std::vector<double> x, y;
};

/// The same data in every process and every run (fixed seed).
inline dataset make_data(const settings& s) {
  dataset d{s.samples, s.features, {}, {}};
  std::mt19937 gen{42};
  std::normal_distribution<double> normal{0.0, 1.0};
  std::vector<double> w_true(static_cast<size_t>(s.features));
  for (size_t j = 0; j < w_true.size(); ++j)
    w_true[j] = 1.0 - 0.25 * static_cast<double>(j);
  for (int i = 0; i < d.rows; ++i) {
    double target = 0;
    for (int j = 0; j < d.cols; ++j) {
      d.x.push_back(normal(gen));
      target += d.x.back() * w_true[static_cast<size_t>(j)];
    }
    d.y.push_back(target + 0.1 * normal(gen));
  }
  return d;
}

/// The rows [first, last) worker `rank` trains on.
inline std::pair<int, int> shard_of(const settings& s, int rank) {
  int n = s.samples / s.workers;
  return {rank * n, (rank + 1) * n};
}

/// Mean squared error and its gradient over rows [first, last) at `w`.
inline double loss_and_gradient(const dataset& d, int first, int last,
                                const std::vector<double>& w,
                                std::vector<double>& grad) {
  grad.assign(w.size(), 0.0);
  double loss = 0;
  for (int i = first; i < last; ++i) {
    const double* row = &d.x[static_cast<size_t>(i) * w.size()];
    double err = -d.y[static_cast<size_t>(i)];
    for (size_t j = 0; j < w.size(); ++j)
      err += row[j] * w[j];
    loss += err * err;
    for (size_t j = 0; j < w.size(); ++j)
      grad[j] += 2 * err * row[j];
  }
  double n = last - first;
  for (auto& g : grad)
    g /= n;
  return loss / n;
}

/// One SGD step with an averaged float32 gradient (its first w.size()
/// elements; an example may carry more, e.g. the loss, behind them).
inline void apply_gradient(std::vector<double>& w,
                           const std::vector<float>& grad, double lr) {
  for (size_t j = 0; j < w.size(); ++j)
    w[j] -= lr * static_cast<double>(grad[j]);
}

/// What a training run produced: the mean loss per step and each worker's
/// final weights.
struct outcome {
  std::vector<double> losses;
  std::vector<std::vector<double>> weights;
};

/// The same training on one process over all rows, in float64.
inline outcome single_process_run(const dataset& d, const settings& s) {
  outcome out;
  std::vector<double> w(static_cast<size_t>(s.features), 0.0), grad;
  for (int step = 0; step < s.steps; ++step) {
    out.losses.push_back(loss_and_gradient(d, 0, s.samples, w, grad));
    for (size_t j = 0; j < w.size(); ++j)
      w[j] -= s.lr * grad[j];
  }
  out.weights.push_back(std::move(w));
  return out;
}

/// The loss curve as a PNG through gnuplot, as the benchmark tool plots.
inline void plot(const std::string& file, const std::vector<double>& losses) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    std::printf("gnuplot not found: no plot (apt-get install gnuplot-nox)\n");
    return;
  }
  auto* gp = popen("gnuplot", "w");
  if (gp == nullptr) return;
  std::fprintf(gp,
               "set terminal png size 800,500 noenhanced\nset output '%s'\n"
               "set title 'data-parallel SGD'\nset logscale y\nset grid\n"
               "set xlabel 'step'\nset ylabel 'MSE'\n"
               "plot '-' using 1:2 with linespoints title 'loss'\n",
               file.c_str());
  for (size_t i = 0; i < losses.size(); ++i)
    std::fprintf(gp, "%zu %.9g\n", i, losses[i]);
  std::fprintf(gp, "e\n");
  bool ok = pclose(gp) == 0;
  std::printf(ok ? "loss curve written to %s\n" : "gnuplot failed for %s\n",
              file.c_str());
}

/// Compares a distributed run with the single-process one: the loss falls
/// below the threshold, every worker holds the same weights and they match
/// the single-process weights within the tolerance. Prints the loss table
/// and the verdicts when `verbose`, failures always. Returns whether all
/// checks hold.
inline bool check(const settings& s, const outcome& run, const outcome& single,
                  bool verbose = true) {
  const auto& ref_w = single.weights.front();
  if (verbose) {
    std::printf("\n%6s %14s %14s\n", "step", "loss (workers)", "loss (single)");
    size_t every = std::max<size_t>(1, run.losses.size() / 10);
    for (size_t i = 0; i < run.losses.size() && i < single.losses.size(); ++i)
      if (i % every == 0 || i + 1 == run.losses.size())
        std::printf("%6zu %14.6f %14.6f\n", i, run.losses[i], single.losses[i]);
  }
  double final_loss = run.losses.empty() ? INFINITY : run.losses.back();
  double max_diff = 0, spread = 0;
  for (auto& w : run.weights)
    for (size_t j = 0;
         j < w.size() && j < ref_w.size() && j < run.weights[0].size(); ++j) {
      max_diff = std::max(max_diff, std::fabs(w[j] - ref_w[j]));
      spread = std::max(spread, std::fabs(w[j] - run.weights[0][j]));
    }
  if (verbose) {
    std::printf("\nfinal loss %.6f (must be < %g)\n", final_loss,
                s.loss_threshold);
    std::printf("workers agree: max |w_r - w_0| = %g (must be 0)\n", spread);
    std::printf("vs single process: max |w - w_ref| = %.3g (must be < %g)\n",
                max_diff, s.weight_tolerance);
  }
  std::vector<std::string> failures;
  if (!(final_loss < s.loss_threshold)) failures.emplace_back("loss too high");
  // A run that stopped early may still end on a low loss.
  if (run.losses.size() != static_cast<size_t>(s.steps))
    failures.emplace_back("losses missing for some steps");
  if (run.weights.size() != static_cast<size_t>(s.workers))
    failures.emplace_back("weights missing from some workers");
  for (auto& w : run.weights)
    if (w.size() != ref_w.size())
      failures.emplace_back("a worker's weights have the wrong size");
  if (spread != 0) failures.emplace_back("workers' weights differ");
  if (!(max_diff < s.weight_tolerance))
    failures.emplace_back("weights differ from the single-process run");
  for (auto& what : failures)
    std::printf("FAILED: %s\n", what.c_str());
  return failures.empty();
}

} // namespace sgd
