// A parameter server: one server actor holds a linear model's parameters in
// shards, N worker actors hold the data. Each step the driver broadcasts
// every parameter shard from the server to the workers (pull), the workers
// compute gradients on their data, and the driver reduces every gradient
// shard onto the server (push), which applies the update. Before the actors
// start, the run's configuration (a struct, not a tensor) reaches every
// rank with broadcast_object. Checks: every rank got the server's config,
// the loss falls below a threshold, and the parameters match a
// single-process run.
//
// Usage: 03_parameter_server [--workers N] [--steps N] [--features N]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/messages.hpp>
#include <caf_collective/object_collectives.hpp>
#include <caf_collective/read.hpp>

namespace col = caf_collective;
using namespace std::chrono_literals;

using grad_atom = caf::atom_constant<caf::atom("grad")>;
using apply_atom = caf::atom_constant<caf::atom("apply")>;
using refs_atom = caf::atom_constant<caf::atom("refs")>;

// What the server decides and every rank must know: any type with inspect.
struct ps_config {
  std::string model = "linear";
  double lr = 0.2;
  int32_t steps = 30;
  int32_t features = 16;
  std::vector<int32_t> shard_sizes; // parameters per shard, bias last
  bool operator==(const ps_config&) const = default;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, ps_config& x) {
  return f(caf::meta::type_name("ps_config"), x.model, x.lr, x.steps,
           x.features, x.shard_sizes);
}

namespace {

constexpr int rows_per_worker = 512;

struct dataset {
  std::vector<double> x, y; // row-major, features columns
};

dataset make_data(int rows, int features) {
  dataset d;
  std::mt19937 gen{3};
  std::normal_distribution<double> normal{0.0, 1.0};
  for (int i = 0; i < rows; ++i) {
    double y = 0.5; // the bias
    for (int j = 0; j < features; ++j) {
      d.x.push_back(normal(gen));
      y += d.x.back() * std::sin(j + 1.0);
    }
    d.y.push_back(y + 0.05 * normal(gen));
  }
  return d;
}

// Loss and gradient over rows [first, last); params = weights then bias.
double gradient(const dataset& d, int first, int last,
                const std::vector<double>& p, std::vector<double>& g) {
  size_t f = p.size() - 1;
  g.assign(p.size(), 0.0);
  double loss = 0;
  for (int i = first; i < last; ++i) {
    double err = p[f] - d.y[static_cast<size_t>(i)];
    for (size_t j = 0; j < f; ++j)
      err += p[j] * d.x[static_cast<size_t>(i) * f + j];
    loss += err * err;
    for (size_t j = 0; j < f; ++j)
      g[j] += 2 * err * d.x[static_cast<size_t>(i) * f + j];
    g[f] += 2 * err;
  }
  return loss;
}

// One rank's tensors in the node's store: a parameter and a gradient
// tensor per shard (float32). Flattens and splits them by shard.
struct shards {
  std::vector<col::object_ref> params, grads;
  col::object_store_ptr store;

  shards(caf::actor_system& sys, const ps_config& cfg)
    : store(col::local_store(sys)) {
    for (auto n : cfg.shard_sizes) {
      std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
      params.push_back(checked(store->put(col::tensor::from_vector(zeros))));
      grads.push_back(checked(store->put(col::tensor::from_vector(zeros))));
    }
  }
  ~shards() {
    for (auto* refs : {&params, &grads})
      for (auto& r : *refs)
        store->release(r);
  }
  std::vector<double> read(const std::vector<col::object_ref>& refs) const {
    std::vector<double> xs;
    for (auto& r : refs) {
      auto v = checked(col::read_vector<float>(*store, r));
      xs.insert(xs.end(), v.begin(), v.end());
    }
    return xs;
  }
  void write(const std::vector<col::object_ref>& refs,
             const std::vector<double>& xs) const {
    size_t at = 0;
    for (auto& r : refs) {
      auto v = checked(store->get(r));
      for (size_t i = 0; i < v.numel(); ++i)
        v.data_as<float>()[i] = static_cast<float>(xs[at++]);
    }
  }

  // A store that refuses (out of memory, a stale ref) ends the example with
  // its words instead of dereferencing an error.
  template<class T>
  static T checked(caf::expected<T> x) {
    if (!x) throw std::runtime_error{"object store: " + col::render(x.error())};
    return std::move(*x);
  }
};

// Rank 0: the server. Others: workers with rows_per_worker rows each.
caf::behavior ps_rank(caf::event_based_actor* self, int32_t rank,
                      std::shared_ptr<const std::vector<ps_config>> configs,
                      std::shared_ptr<const dataset> data) {
  auto cfg = (*configs)[static_cast<size_t>(rank)]; // what this rank received
  auto mine = std::make_shared<shards>(self->system(), cfg);
  int workers = static_cast<int>(configs->size()) - 1;
  caf::message_handler common{
    [=](refs_atom) { return std::make_tuple(mine->params, mine->grads); },
    [=](caf::get_atom) { return mine->read(mine->params); },
  };
  if (rank == 0) // the gradient shards hold the workers' sum
    return caf::behavior{common.or_else(caf::behavior{[=](apply_atom) {
      auto p = mine->read(mine->params), g = mine->read(mine->grads);
      for (size_t j = 0; j < p.size(); ++j)
        p[j] -= cfg.lr * g[j] / (workers * rows_per_worker);
      mine->write(mine->params, p);
      mine->write(mine->grads, std::vector<double>(g.size(), 0.0));
      return true;
    }})};
  return caf::behavior{common.or_else(caf::behavior{[=](grad_atom) {
    std::vector<double> g;
    int first = (rank - 1) * rows_per_worker;
    double loss = gradient(*data, first, first + rows_per_worker,
                           mine->read(mine->params), g);
    mine->write(mine->grads, g);
    return loss / rows_per_worker;
  }})};
}

// Every rank (as a thread here; a process per rank in a deployment) joins
// an imperative group and receives rank 0's config with broadcast_object.
std::vector<ps_config> share_config(int world, const ps_config& decided) {
  std::vector<ps_config> got(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        col::member_scope scope;
        col::init_collective_group(world, r, "auto", "ps-config");
        ps_config cfg = r == 0 ? decided : ps_config{"?", 0, 0, 0, {}};
        col::broadcast_object(cfg, 0, "ps-config");
        got[static_cast<size_t>(r)] = cfg;
        col::destroy_collective_group("ps-config");
      } catch (const std::exception& e) { // the check in main reports it
        std::printf("rank %d: config broadcast failed: %s\n", r, e.what());
      }
    });
  for (auto& t : threads)
    t.join();
  return got;
}

} // namespace

int main(int argc, char** argv) {
  int workers = 3, rc = 0;
  ps_config decided;
  std::map<std::string, int*> ints{{"--workers", &workers},
                                   {"--steps", &decided.steps},
                                   {"--features", &decided.features}};
  // A misspelt flag or a value such as "4k" is refused, not run as the
  // default or as 4.
  bool args_ok = argc % 2 == 1; // flags come with a value each
  for (int i = 1; args_ok && i + 1 < argc; i += 2) {
    char* end = nullptr;
    long value = std::strtol(argv[i + 1], &end, 10);
    args_ok = ints.count(argv[i]) > 0 && end != argv[i + 1] && *end == '\0' &&
              value >= 0 && value <= 1000000;
    if (args_ok) *ints[argv[i]] = static_cast<int>(value);
  }
  if (!args_ok || workers < 1 || decided.steps < 1 || decided.features < 2)
    return std::fprintf(stderr, "bad arguments: flags are --workers N >= 1, "
                                "--steps N >= 1, --features N >= 2\n"),
           2;
  // Two shards: the first half of the weights; the rest and the bias.
  decided.shard_sizes = {decided.features / 2,
                         decided.features - decided.features / 2 + 1};
  int world = workers + 1;
  auto configs = std::make_shared<const std::vector<ps_config>>(
    share_config(world, decided));
  int agree = 0;
  for (auto& c : *configs)
    agree += c == decided ? 1 : 0;
  std::printf("parameter server: 1 server + %d workers, %d features in %zu "
              "shards, %d steps; config '%s' received by %d of %d ranks\n",
              workers, decided.features, decided.shard_sizes.size(),
              decided.steps, decided.model.c_str(), agree, world);
  if (agree != world) return std::printf("FAILED: config differs\n"), 1;
  auto data = std::make_shared<const dataset>(
    make_data(workers * rows_per_worker, decided.features));
  caf::actor_system_config sys_cfg;
  col::add_message_types(sys_cfg);
  caf::actor_system sys{sys_cfg};
  auto driver = col::spawn_driver(sys);
  auto ranks = col::spawn_group(sys, driver, "ps", world, "auto", 10000,
                                ps_rank, configs, data);
  caf::scoped_actor self{sys};
  auto fail = [&](const std::string& what) {
    std::printf("FAILED: %s\n", what.c_str());
    rc = 1;
  };
  if (auto err = col::await_group(self, driver, "ps", 15s))
    fail("group formation: " + col::render(err));
  // refs[k][r]: shard k's parameter (pull) and gradient (push) ref of rank r.
  size_t nshards = decided.shard_sizes.size();
  std::vector<std::vector<col::object_ref>> pull(nshards), push(nshards);
  for (auto& r : ranks)
    self->request(r, 5s, refs_atom::value)
      .receive(
        [&](std::vector<col::object_ref>& p, std::vector<col::object_ref>& g) {
          for (size_t k = 0; k < nshards; ++k) {
            pull[k].push_back(p[k]);
            push[k].push_back(g[k]);
          }
        },
        [&](caf::error& e) { fail("refs: " + col::render(e)); });
  auto run = [&](col::op_kind op, const std::vector<col::object_ref>& refs) {
    col::op_request req{"ps", op, refs, {}}; // root 0 = the server
    req.params.op = col::reduce_op::sum;
    if (auto res = col::run_op(self, driver, req, 10s); !res)
      fail(std::string{col::to_string(op)} + ": " + col::render(res.error()));
  };
  std::vector<double> losses;
  for (int step = 0; rc == 0 && step <= decided.steps; ++step) {
    for (size_t k = 0; k < nshards; ++k)
      run(col::op_kind::broadcast, pull[k]);
    if (step == decided.steps) break; // the last pull: for the final check
    double loss = 0;
    for (int r = 1; r < world; ++r)
      self->request(ranks[static_cast<size_t>(r)], 5s, grad_atom::value)
        .receive([&](double l) { loss += l / workers; },
                 [&](caf::error& e) { fail("gradient: " + col::render(e)); });
    losses.push_back(loss);
    for (size_t k = 0; k < nshards; ++k)
      run(col::op_kind::reduce, push[k]);
    self->request(ranks[0], 5s, apply_atom::value)
      .receive([](bool) {},
               [&](caf::error& e) { fail("apply: " + col::render(e)); });
  }
  // Single-process reference: the same updates on all rows at once.
  std::vector<double> ref(static_cast<size_t>(decided.features) + 1, 0.0), g;
  for (int step = 0; step < decided.steps; ++step) {
    gradient(*data, 0, workers * rows_per_worker, ref, g);
    for (size_t j = 0; j < ref.size(); ++j)
      ref[j] -= decided.lr * g[j] / (workers * rows_per_worker);
  }
  std::printf("\n%6s %12s\n", "step", "loss");
  for (size_t i = 0; i < losses.size(); ++i)
    if (i % std::max<size_t>(1, losses.size() / 8) == 0 ||
        i + 1 == losses.size())
      std::printf("%6zu %12.6f\n", i, losses[i]);
  double diff = 0, spread = 0;
  std::vector<std::vector<double>> params;
  for (auto& r : ranks)
    self->request(r, 5s, caf::get_atom::value)
      .receive([&](std::vector<double>& p) { params.push_back(p); },
               [&](caf::error& e) { fail("params: " + col::render(e)); });
  for (auto& p : params)
    for (size_t j = 0; j < p.size() && j < ref.size(); ++j) {
      diff = std::max(diff, std::fabs(p[j] - ref[j]));
      spread = std::max(spread, std::fabs(p[j] - params[0][j]));
    }
  double final_loss = losses.empty() ? INFINITY : losses.back();
  std::printf("\nfinal loss %.6f (must be < 0.01)\n", final_loss);
  std::printf("workers pulled the server's parameters: max diff %g (must be "
              "0)\nvs single process: max |p - p_ref| = %.3g (must be < "
              "1e-4)\n",
              spread, diff);
  if (rc == 0 && !(final_loss < 0.01)) fail("loss too high");
  // Sizes first: the loops above compare only the elements both have.
  bool sizes_ok = params.size() == ranks.size();
  for (auto& p : params)
    sizes_ok = sizes_ok && p.size() == ref.size();
  if (rc == 0 && !sizes_ok) fail("parameters missing from some ranks");
  if (rc == 0 && spread != 0) fail("ranks' parameters differ");
  if (rc == 0 && !(diff < 1e-4)) fail("parameters differ from the reference");
  for (auto& r : ranks)
    self->send_exit(r, caf::exit_reason::user_shutdown);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  std::printf(rc == 0 ? "OK\n" : "FAILED\n");
  return rc;
}
