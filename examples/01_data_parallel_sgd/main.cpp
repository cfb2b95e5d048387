// Data-parallel SGD: a linear model trained by 4 worker actors, each on its
// own shard of a synthetic data set. The workers are group members from the
// moment they are spawned; each step they put their gradient into the
// node's object store, the driver averages the gradients in place
// (allreduce avg on the refs) and every worker applies the average to its
// own copy of the weights. Checks: the loss falls below a threshold, every
// worker ends with the same weights, and they match a single-process run.
//
// Usage: 01_data_parallel_sgd [--steps N] [--samples N] [--features N]
//                             [--workers N] [--lr X] [--plot loss.png]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/messages.hpp>

namespace col = caf_collective;
using namespace std::chrono_literals;

using grad_atom = caf::atom_constant<caf::atom("grad")>;
using apply_atom = caf::atom_constant<caf::atom("apply")>;

namespace {

struct settings {
  int steps = 40, samples = 4096, features = 8, workers = 4;
  double lr = 0.1;
  std::string plot;
  // What must hold at the end (stated in the output).
  double loss_threshold = 0.02;   // noise alone gives about 0.01
  double weight_tolerance = 1e-5; // float32 gradients vs a float64 run
};

// y = X w_true + noise, rows in order: worker r owns rows [r*n, (r+1)*n).
struct dataset {
  int rows = 0, cols = 0;
  std::vector<double> x, y;
};

dataset make_data(const settings& s) {
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

// Mean squared error and its gradient over rows [first, last) at `w`.
double loss_and_gradient(const dataset& d, int first, int last,
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

// One worker: owns shard `rank` of the data and a copy of the weights.
caf::behavior worker(caf::event_based_actor* self, int32_t rank,
                     std::shared_ptr<const dataset> data, int32_t workers,
                     double lr) {
  // The actor's state: the member protocol owns the actor type, so the
  // handlers share the weights through this pointer.
  auto w =
    std::make_shared<std::vector<double>>(static_cast<size_t>(data->cols), 0.0);
  int shard = data->rows / workers;
  auto store = col::local_store(self->system());
  return {
    // Gradient at the current weights, as a float32 tensor in the store.
    [=](grad_atom) -> caf::result<col::object_ref, double> {
      std::vector<double> grad;
      double loss =
        loss_and_gradient(*data, rank * shard, (rank + 1) * shard, *w, grad);
      auto ref = store->put(
        col::tensor::from_vector(std::vector<float>(grad.begin(), grad.end())));
      if (!ref) return ref.error();
      return {*ref, loss};
    },
    // The averaged gradient is back in the same object: apply it.
    [=](apply_atom, const col::object_ref& ref) -> caf::result<bool> {
      auto view = store->get(ref);
      if (!view) return view.error();
      auto* g = view->data_as<float>();
      for (size_t j = 0; j < w->size(); ++j)
        (*w)[j] -= lr * static_cast<double>(g[j]);
      store->release(ref);
      return true;
    },
    [=](caf::get_atom) { return *w; },
  };
}

settings parse(int argc, char** argv) {
  settings s;
  std::map<std::string, int*> ints{{"--steps", &s.steps},
                                   {"--samples", &s.samples},
                                   {"--features", &s.features},
                                   {"--workers", &s.workers}};
  bool ok = argc % 2 == 1; // flags come with a value each
  for (int i = 1; ok && i + 1 < argc; i += 2) {
    std::string arg = argv[i], value = argv[i + 1];
    if (ints.count(arg) > 0)
      *ints[arg] = std::atoi(value.c_str());
    else if (arg == "--lr")
      s.lr = std::atof(value.c_str());
    else if (arg == "--plot")
      s.plot = value;
    else
      ok = false;
  }
  if (!ok || s.steps < 1 || s.features < 1 || s.workers < 1 ||
      s.samples < s.workers || s.samples % s.workers != 0) {
    std::fprintf(stderr, "bad arguments (see the usage in main.cpp); samples "
                         "must be a multiple of workers\n");
    std::exit(2);
  }
  return s;
}

// The loss curve as a PNG through gnuplot, as the benchmark tool plots.
void plot(const std::string& file, const std::vector<double>& losses) {
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

} // namespace

int main(int argc, char** argv) {
  auto s = parse(argc, argv);
  auto data = std::make_shared<const dataset>(make_data(s));
  caf::actor_system_config cfg;
  col::add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto driver = col::spawn_driver(sys);
  auto workers = col::spawn_group(sys, driver, "dp", s.workers, "auto", 10000,
                                  worker, data, s.workers, s.lr);
  caf::scoped_actor self{sys};
  int rc = 0;
  auto fail = [&](const std::string& what) {
    std::printf("FAILED: %s\n", what.c_str());
    rc = 1;
  };
  std::vector<double> losses;
  std::printf("data-parallel SGD: %d workers, %d samples x %d features, "
              "%d steps, lr %g\n",
              s.workers, s.samples, s.features, s.steps, s.lr);
  if (auto err = col::await_group(self, driver, "dp", 15s))
    fail("group formation: " + col::render(err));
  else if (auto st = col::status_of(self, driver, "dp", 5s))
    std::printf("group 'dp' formed on %s\n", st->backend.c_str());
  for (int step = 0; rc == 0 && step < s.steps; ++step) {
    col::op_request req{"dp", col::op_kind::allreduce, {}, {}};
    req.params.op = col::reduce_op::avg;
    double loss = 0;
    for (auto& w : workers)
      self->request(w, 5s, grad_atom::value)
        .receive(
          [&](const col::object_ref& ref, double l) {
            req.refs.push_back(ref);
            loss += l / s.workers; // equal shards: the mean is the loss
          },
          [&](caf::error& e) { fail("gradient: " + col::render(e)); });
    losses.push_back(loss);
    if (rc != 0) break;
    auto result = col::run_op(self, driver, req, 10s);
    if (!result) {
      fail("allreduce: " + col::render(result.error()));
      break;
    }
    for (size_t r = 0; r < workers.size(); ++r)
      self->request(workers[r], 5s, apply_atom::value, result->refs[r])
        .receive([](bool) {},
                 [&](caf::error& e) { fail("apply: " + col::render(e)); });
  }
  // Every worker's weights, and a single-process run on all the data.
  std::vector<std::vector<double>> weights;
  for (auto& w : workers)
    self->request(w, 5s, caf::get_atom::value)
      .receive([&](std::vector<double>& x) { weights.push_back(x); },
               [&](caf::error& e) { fail("weights: " + col::render(e)); });
  std::vector<double> ref_w(static_cast<size_t>(s.features), 0.0), grad;
  std::vector<double> ref_losses;
  for (int step = 0; step < s.steps; ++step) {
    ref_losses.push_back(loss_and_gradient(*data, 0, s.samples, ref_w, grad));
    for (size_t j = 0; j < ref_w.size(); ++j)
      ref_w[j] -= s.lr * grad[j];
  }
  std::printf("\n%6s %14s %14s\n", "step", "loss (actors)", "loss (single)");
  for (size_t i = 0; i < losses.size(); ++i)
    if (i % std::max<size_t>(1, losses.size() / 10) == 0 ||
        i + 1 == losses.size())
      std::printf("%6zu %14.6f %14.6f\n", i, losses[i], ref_losses[i]);
  double final_loss = losses.empty() ? INFINITY : losses.back();
  double max_diff = 0, spread = 0;
  for (auto& w : weights)
    for (size_t j = 0; j < w.size() && j < ref_w.size(); ++j) {
      max_diff = std::max(max_diff, std::fabs(w[j] - ref_w[j]));
      spread = std::max(spread, std::fabs(w[j] - weights[0][j]));
    }
  std::printf("\nfinal loss %.6f (must be < %g)\n", final_loss,
              s.loss_threshold);
  std::printf("workers agree: max |w_r - w_0| = %g (must be 0)\n", spread);
  std::printf("vs single process: max |w - w_ref| = %.3g (must be < %g)\n",
              max_diff, s.weight_tolerance);
  if (rc == 0 && !(final_loss < s.loss_threshold)) fail("loss too high");
  if (rc == 0 && weights.size() != workers.size()) fail("missing weights");
  if (rc == 0 && spread != 0) fail("workers' weights differ");
  if (rc == 0 && !(max_diff < s.weight_tolerance))
    fail("weights differ from the single-process run");
  if (!s.plot.empty()) plot(s.plot, losses);
  for (auto& w : workers)
    self->send_exit(w, caf::exit_reason::user_shutdown);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  std::printf(rc == 0 ? "OK\n" : "FAILED\n");
  return rc;
}
