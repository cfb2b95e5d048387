// Data-parallel SGD: a linear model trained by 4 worker actors, each on its
// own shard of a synthetic data set. The workers are group members from the
// moment they are spawned; each step they put their gradient into the
// node's object store, the driver averages the gradients in place
// (allreduce avg on the refs) and every worker applies the average to its
// own copy of the weights. Main asks the driver through its typed view
// (col::allreduce on col::typed_driver) and workers read results back with
// col::read_vector. Checks: the loss falls below a threshold, every
// worker ends with the same weights, and they match a single-process run.
//
// Usage: 01_data_parallel_sgd [--steps N] [--samples N] [--features N]
//                             [--workers N] [--lr X] [--plot loss.png]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/interfaces.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/read.hpp>

#include "sgd_driver.hpp"
#include "sgd_problem.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

using sgd::apply_atom;
using sgd::grad_atom;

namespace {

// One worker: owns shard `rank` of the data and a copy of the weights.
caf::behavior worker(caf::event_based_actor* self, int32_t rank,
                     std::shared_ptr<const sgd::dataset> data,
                     const sgd::settings& s) {
  // The actor's state: the member protocol owns the actor type, so the
  // handlers share the weights through this pointer.
  auto w =
    std::make_shared<std::vector<double>>(static_cast<size_t>(data->cols), 0.0);
  auto [first, last] = sgd::shard_of(s, rank);
  auto store = col::local_store(self->system());
  return {
    // Gradient at the current weights, as a float32 tensor in the store.
    [=](grad_atom) -> caf::result<col::object_ref, double> {
      std::vector<double> grad;
      double loss = sgd::loss_and_gradient(*data, first, last, *w, grad);
      auto ref = store->put(
        col::tensor::from_vector(std::vector<float>(grad.begin(), grad.end())));
      if (!ref) return ref.error();
      return {*ref, loss};
    },
    // The averaged gradient is back in the same object: apply it.
    [=](apply_atom, const col::object_ref& ref) -> caf::result<bool> {
      auto grad = col::read_vector<float>(*store, ref);
      store->release(ref);
      if (!grad) return grad.error();
      sgd::apply_gradient(*w, *grad, s.lr);
      return true;
    },
    [=](caf::get_atom) { return *w; },
  };
}

} // namespace

int main(int argc, char** argv) {
  auto s = sgd::parse(argc, argv);
  auto data = std::make_shared<const sgd::dataset>(sgd::make_data(s));
  caf::actor_system_config cfg;
  col::add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto driver = col::spawn_driver(sys);
  col::group_spec spec;
  spec.name = "dp";
  spec.world_size = s.workers;
  spec.timeout = 10s;
  auto workers = col::spawn_group(sys, driver, spec, worker, data, s);
  // The driver's typed view: a request it does not understand won't compile.
  auto typed = col::typed_driver(driver);
  caf::scoped_actor self{sys};
  bool ok = true;
  auto fail = [&](const std::string& what) {
    std::printf("FAILED: %s\n", what.c_str());
    ok = false;
  };
  std::printf("data-parallel SGD: %d workers, %d samples x %d features, "
              "%d steps, lr %g\n",
              s.workers, s.samples, s.features, s.steps, s.lr);
  if (auto err = col::await_group(self, driver, "dp", 15s))
    fail("group formation: " + col::render(err));
  else if (auto st = col::status_of(self, driver, "dp", 5s))
    std::printf("group 'dp' formed on %s\n", st->backend.c_str());
  // Nothing to train if the group did not form.
  auto run = ok ? sgd::train_by_driver(self, typed, "dp", workers, s, 5s, fail)
                : sgd::outcome{};
  if (ok) ok = sgd::check(s, run, sgd::single_process_run(*data, s));
  if (!s.plot.empty()) sgd::plot(s.plot, run.losses);
  for (auto& w : workers)
    self->send_exit(w, caf::exit_reason::user_shutdown);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  std::printf(ok ? "OK\n" : "FAILED\n");
  return ok ? 0 : 1;
}
