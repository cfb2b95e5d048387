// Pipeline parallelism: a two-layer network split over two member actors.
// Stage 0 holds the hidden layer, stage 1 the output layer and the loss.
// Each step the driver moves the activations from stage 0 to stage 1 and
// the gradient of the activations back, both with send/recv between the
// members on object refs; the stages update their own weights. Checks: the
// loss falls below a threshold and both stages' weights match a
// single-process run of the same math.
//
// Usage: 04_pipeline [--steps N] [--batch N] [--hidden N] [--lr X]
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

using fwd_atom = caf::atom_constant<caf::atom("forward")>;
using bwd_atom = caf::atom_constant<caf::atom("backward")>;

namespace {

constexpr int inputs = 4;
constexpr int samples = 512;

struct settings {
  int steps = 120, batch = 32, hidden = 16;
  double lr = 0.1;
  double loss_ratio = 0.2;         // final loss must be < 0.2 x initial loss
  double weight_tolerance = 1e-12; // the same math, bytes moved exactly
};

// y = tanh(x . a): a smooth target the small network can fit.
struct dataset {
  std::vector<double> x, y;
};

dataset make_data() {
  dataset d;
  std::mt19937 gen{7};
  std::normal_distribution<double> normal{0.0, 1.0};
  double a[inputs] = {0.8, -0.5, 0.3, 1.1};
  for (int i = 0; i < samples; ++i) {
    double dot = 0;
    for (int j = 0; j < inputs; ++j) {
      d.x.push_back(normal(gen));
      dot += a[j] * d.x.back();
    }
    d.y.push_back(std::tanh(dot));
  }
  return d;
}

// Weights: W1 is hidden x inputs (row-major), W2 is 1 x hidden; no biases.
using weights = std::vector<double>;

weights init_weights(int rows, int cols, unsigned seed) {
  weights w;
  std::mt19937 gen{seed};
  std::normal_distribution<double> normal{0.0, 1.0 / std::sqrt(cols)};
  for (int i = 0; i < rows * cols; ++i)
    w.push_back(normal(gen));
  return w;
}

// The math of both stages. The actors and the single-process run call the
// same functions, so their results agree to the last bit. Step `step` uses
// the rows [first, first + batch), first = step * batch mod samples.

// Stage 0 forward: h = tanh(W1 x).
std::vector<double> hidden_forward(const weights& w1, const dataset& d,
                                   int first, int batch) {
  std::vector<double> h;
  int hidden = static_cast<int>(w1.size()) / inputs;
  for (int i = first; i < first + batch; ++i)
    for (int k = 0; k < hidden; ++k) {
      double z = 0;
      for (int j = 0; j < inputs; ++j)
        z += w1[k * inputs + j] * d.x[i * inputs + j];
      h.push_back(std::tanh(z));
    }
  return h;
}

// Stage 1: y = W2 h, MSE loss; returns dLoss/dh and updates W2.
std::vector<double> output_step(weights& w2, const dataset& d, int first,
                                const std::vector<double>& h, double lr,
                                double& loss) {
  int n = static_cast<int>(w2.size()), batch = static_cast<int>(h.size()) / n;
  std::vector<double> grad_h(h.size()), gw(w2.size(), 0.0);
  loss = 0;
  for (int i = 0; i < batch; ++i) {
    double y = 0;
    for (int k = 0; k < n; ++k)
      y += w2[k] * h[i * n + k];
    double err = y - d.y[first + i];
    loss += err * err / batch;
    for (int k = 0; k < n; ++k) {
      gw[k] += 2 * err / batch * h[i * n + k];
      grad_h[i * n + k] = 2 * err / batch * w2[k]; // weights before update
    }
  }
  for (size_t k = 0; k < gw.size(); ++k)
    w2[k] -= lr * gw[k];
  return grad_h;
}

// Stage 0 backward through tanh; updates W1.
void hidden_backward(weights& w1, const dataset& d, int first,
                     const std::vector<double>& h,
                     const std::vector<double>& grad_h, double lr) {
  std::vector<double> gw(w1.size(), 0.0);
  int hidden = static_cast<int>(w1.size()) / inputs;
  for (size_t at = 0; at < h.size(); ++at) {
    int i = static_cast<int>(at) / hidden, k = static_cast<int>(at) % hidden;
    double dz = grad_h[at] * (1 - h[at] * h[at]);
    for (int j = 0; j < inputs; ++j)
      gw[k * inputs + j] += dz * d.x[(first + i) * inputs + j];
  }
  for (size_t k = 0; k < gw.size(); ++k)
    w1[k] -= lr * gw[k];
}

// Rank 0 is the hidden stage, rank 1 the output stage. Tensors that arrive
// are read and released at once.
caf::behavior stage(caf::event_based_actor* self, int32_t rank,
                    std::shared_ptr<const dataset> data, settings s) {
  auto w =
    std::make_shared<weights>(rank == 0 ? init_weights(s.hidden, inputs, 1)
                                        : init_weights(1, s.hidden, 2));
  auto h = std::make_shared<std::vector<double>>(); // stage 0: step in flight
  auto store = col::local_store(self->system());
  auto take = [store](const col::object_ref& ref) {
    auto v = store->get(ref);
    std::vector<double> xs;
    if (v) xs.assign(v->data_as<double>(), v->data_as<double>() + v->numel());
    store->release(ref);
    return xs;
  };
  auto put = [store](const std::vector<double>& xs) {
    return store->put(col::tensor::from_vector(xs));
  };
  if (rank == 0)
    return {
      [=](fwd_atom, int step) -> caf::result<col::object_ref> {
        *h = hidden_forward(*w, *data, step * s.batch % samples, s.batch);
        auto ref = put(*h);
        if (!ref) return ref.error();
        return *ref;
      },
      [=](bwd_atom, int step, const col::object_ref& grad_ref) {
        hidden_backward(*w, *data, step * s.batch % samples, *h, take(grad_ref),
                        s.lr);
        return *w;
      },
    };
  return {
    [=](fwd_atom, int step,
        const col::object_ref& h_ref) -> caf::result<col::object_ref, double> {
      double loss = 0;
      auto ref = put(output_step(*w, *data, step * s.batch % samples,
                                 take(h_ref), s.lr, loss));
      if (!ref) return ref.error();
      return {*ref, loss};
    },
    [=](caf::get_atom) { return *w; },
  };
}

settings parse(int argc, char** argv) {
  settings s;
  std::map<std::string, int*> ints{
    {"--steps", &s.steps}, {"--batch", &s.batch}, {"--hidden", &s.hidden}};
  bool ok = argc % 2 == 1; // flags come with a value each
  for (int i = 1; ok && i + 1 < argc; i += 2) {
    // Only whole values: atoi would run "4k" as 4 and "x" as 0.
    std::string arg = argv[i];
    char* end = nullptr;
    if (ints.count(arg) > 0) {
      long value = std::strtol(argv[i + 1], &end, 10);
      *ints[arg] = value > 0 && value <= 1000000 ? static_cast<int>(value) : 0;
    } else if (arg == "--lr") {
      s.lr = std::strtod(argv[i + 1], &end);
    }
    ok = end != nullptr && end != argv[i + 1] && *end == '\0';
  }
  if (!ok || s.steps < 1 || s.hidden < 1 || s.batch < 1 ||
      samples % s.batch != 0 || !(s.lr > 0) || !std::isfinite(s.lr)) {
    std::fprintf(stderr,
                 "bad arguments: flags are --steps N --batch N --hidden N "
                 "--lr X, each with a positive value; batch must divide %d\n",
                 samples);
    std::exit(2);
  }
  return s;
}

} // namespace

int main(int argc, char** argv) {
  auto s = parse(argc, argv);
  auto data = std::make_shared<const dataset>(make_data());
  caf::actor_system_config cfg;
  col::add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto driver = col::spawn_driver(sys);
  auto stages =
    col::spawn_group(sys, driver, "pipe", 2, "auto", 10000, stage, data, s);
  caf::scoped_actor self{sys};
  int rc = 0;
  auto fail = [&](const std::string& what) {
    std::printf("FAILED: %s\n", what.c_str());
    rc = 1;
  };
  // Moves a tensor from rank `from` to the other rank; returns its new ref.
  auto move = [&](int from, const col::object_ref& ref) {
    col::op_request req{"pipe", col::op_kind::send, {{}, {}}, {}};
    req.refs[static_cast<size_t>(from)] = ref;
    req.params.root = from;
    req.params.peer = 1 - from;
    auto res = col::run_op(self, driver, req, 10s);
    if (!res) fail("send/recv: " + col::render(res.error()));
    return res ? res->refs[static_cast<size_t>(1 - from)] : col::object_ref{};
  };
  std::printf("pipeline: 2 stages (%d -> %d tanh | %d -> 1), batch %d, "
              "%d steps, lr %g\n",
              inputs, s.hidden, s.hidden, s.batch, s.steps, s.lr);
  if (auto err = col::await_group(self, driver, "pipe", 15s))
    fail("group formation: " + col::render(err));
  std::vector<double> losses, w1;
  for (int step = 0; rc == 0 && step < s.steps; ++step) {
    col::object_ref h0, g1;
    self->request(stages[0], 5s, fwd_atom::value, step)
      .receive([&](col::object_ref& r) { h0 = r; },
               [&](caf::error& e) { fail("forward 0: " + col::render(e)); });
    auto h1 = rc == 0 ? move(0, h0) : col::object_ref{};
    if (rc == 0)
      self->request(stages[1], 5s, fwd_atom::value, step, h1)
        .receive(
          [&](col::object_ref& r, double loss) {
            g1 = r;
            losses.push_back(loss);
          },
          [&](caf::error& e) { fail("stage 1: " + col::render(e)); });
    auto g0 = rc == 0 ? move(1, g1) : col::object_ref{};
    if (rc == 0)
      self->request(stages[0], 5s, bwd_atom::value, step, g0)
        .receive([&](std::vector<double>& w) { w1 = w; },
                 [&](caf::error& e) { fail("backward 0: " + col::render(e)); });
    // The sender keeps its tensor: release it once the receiver has it.
    col::local_store(sys)->release(h0);
    col::local_store(sys)->release(g1);
  }
  std::vector<double> w2;
  self->request(stages[1], 5s, caf::get_atom::value)
    .receive([&](std::vector<double>& w) { w2 = w; },
             [&](caf::error& e) { fail("weights: " + col::render(e)); });
  // The same steps in one process.
  auto l1 = init_weights(s.hidden, inputs, 1),
       l2 = init_weights(1, s.hidden, 2);
  std::vector<double> ref_losses;
  for (int step = 0; step < s.steps; ++step) {
    int first = step * s.batch % samples;
    auto h = hidden_forward(l1, *data, first, s.batch);
    double loss = 0;
    auto grad_h = output_step(l2, *data, first, h, s.lr, loss);
    hidden_backward(l1, *data, first, h, grad_h, s.lr);
    ref_losses.push_back(loss);
  }
  std::printf("\n%6s %16s %16s\n", "step", "loss (pipeline)", "loss (single)");
  for (size_t i = 0; i < losses.size(); ++i)
    if (i % std::max<size_t>(1, losses.size() / 10) == 0 ||
        i + 1 == losses.size())
      std::printf("%6zu %16.6f %16.6f\n", i, losses[i], ref_losses[i]);
  double diff = w1.size() == l1.size() && w2.size() == l2.size() &&
                    losses.size() == ref_losses.size()
                  ? 0
                  : 1;
  for (auto [got, want] : {std::pair{&w1, &l1}, std::pair{&w2, &l2},
                           std::pair{&losses, &ref_losses}})
    for (size_t k = 0; k < got->size() && k < want->size(); ++k)
      diff = std::max(diff, std::fabs((*got)[k] - (*want)[k]));
  // Mean over the last pass through the data against the first step.
  size_t per_pass = samples / static_cast<size_t>(s.batch);
  double first_loss = losses.empty() ? 0 : losses.front(), final_loss = 0;
  size_t tail = std::min(per_pass, losses.size());
  for (size_t i = losses.size() - tail; i < losses.size(); ++i)
    final_loss += losses[i] / static_cast<double>(tail);
  std::printf("\nloss %.6f -> %.6f over the last %zu steps (must be < %g x)\n",
              first_loss, final_loss, tail, s.loss_ratio);
  std::printf("vs single process: max |w - w_ref|, |loss - loss_ref| = %.3g "
              "(must be < %g)\n",
              diff, s.weight_tolerance);
  if (rc == 0 && !(final_loss < s.loss_ratio * first_loss))
    fail("loss did not fall enough");
  if (rc == 0 && !(diff < s.weight_tolerance))
    fail("weights or losses differ from the single-process run");
  for (auto& st : stages)
    self->send_exit(st, caf::exit_reason::user_shutdown);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  std::printf(rc == 0 ? "OK\n" : "FAILED\n");
  return rc;
}
