// Data-parallel SGD where the workers average their gradients themselves:
// the training of example 01, but each worker, from its own handler,
// allreduces (avg) its gradient with its group (member-initiated
// collectives, member_ops.hpp) and takes the next step when the result
// arrives as a response. After the group formed, the driver is out of the
// loop: main only starts the workers and collects their results. Checks: the
// loss falls below a threshold, every worker ends with the same weights, and
// they match a single-process run.
//
// Usage: 02_members_allreduce [--steps N] [--samples N] [--features N]
//                             [--workers N] [--lr X] [--plot loss.png]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/member.hpp>
#include <caf_collective/member_ops.hpp>
#include <caf_collective/read.hpp>

#include "sgd_problem.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

using train_atom = caf::atom_constant<caf::atom("sgd_train")>;
using step_atom = caf::atom_constant<caf::atom("sgd_step")>;

namespace {

// A worker's answer to train: its rank, the mean loss per step, its
// final weights.
using trained = caf::typed_response_promise<int32_t, std::vector<double>,
                                            std::vector<double>>;

// One worker's training state, shared by its handlers (the member protocol
// owns the actor type, so the state lives behind a pointer).
struct trainer {
  std::vector<double> w;
  std::vector<double> losses;
  int step = 0;
  trained done;
};

caf::behavior worker(caf::event_based_actor* self, int32_t rank,
                     std::shared_ptr<const sgd::dataset> data,
                     const sgd::settings& s) {
  auto st = std::make_shared<trainer>();
  st->w.assign(static_cast<size_t>(data->cols), 0.0);
  auto [first, last] = sgd::shard_of(s, rank);
  auto store = col::local_store(self->system());
  col::allreduce_options avg;
  avg.op = col::reduce_op::avg;
  return {
    // Trains for s.steps steps, then answers (rank, losses, weights).
    [=](train_atom)
      -> caf::result<int32_t, std::vector<double>, std::vector<double>> {
      st->done = self->make_response_promise<int32_t, std::vector<double>,
                                             std::vector<double>>();
      self->send(self, step_atom::value);
      return st->done;
    },
    // One step: gradient and loss at the current weights into the store,
    // averaged with the other workers' in place. The loss rides behind the
    // gradient, so the same allreduce yields the mean loss over all shards.
    // Each step is a message to itself: other messages run in between.
    [=](step_atom) {
      if (st->step == s.steps) {
        st->done.deliver(rank, st->losses, st->w);
        return;
      }
      std::vector<double> grad;
      double loss = sgd::loss_and_gradient(*data, first, last, st->w, grad);
      std::vector<float> msg(grad.begin(), grad.end());
      msg.push_back(static_cast<float>(loss));
      auto ref = store->put(col::tensor::from_vector(msg));
      if (!ref) {
        st->done.deliver(ref.error());
        return;
      }
      col::collectives(self, "dp")
        .allreduce(*ref, avg)
        .then(
          [=](col::object_ref& out) {
            auto mean = col::read_vector<float>(*store, out);
            store->release(out);
            if (!mean) {
              st->done.deliver(mean.error());
              return;
            }
            st->losses.push_back(mean->back());
            sgd::apply_gradient(st->w, *mean, s.lr);
            ++st->step;
            self->send(self, step_atom::value);
          },
          [=](caf::error& err) { st->done.deliver(std::move(err)); });
    },
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
  // The members, not the driver, start this group's ops.
  col::group_spec spec;
  spec.name = "dp";
  spec.world_size = s.workers;
  spec.timeout = 10s;
  spec.ops_from = col::op_source::members;
  auto workers = col::spawn_group(sys, driver, spec, worker, data, s);
  caf::scoped_actor self{sys};
  bool ok = true;
  auto fail = [&](const std::string& what) {
    std::printf("FAILED: %s\n", what.c_str());
    ok = false;
  };
  std::printf("data-parallel SGD, members allreduce: %d workers, %d samples "
              "x %d features, %d steps, lr %g\n",
              s.workers, s.samples, s.features, s.steps, s.lr);
  sgd::outcome run;
  if (auto err = col::await_group(self, driver, "dp", 15s)) {
    fail("group formation: " + col::render(err));
  } else {
    if (auto st = col::status_of(self, driver, "dp", 5s))
      std::printf("group 'dp' formed on %s\n", st->backend.c_str());
    // All at once: each worker's first allreduce waits for the others.
    for (auto& w : workers)
      self->send(w, train_atom::value);
    run.weights.resize(workers.size());
    int answers = 0;
    self->receive_for(answers, s.workers)(
      [&](int32_t rank, std::vector<double>& losses, std::vector<double>& w) {
        if (rank == 0) run.losses = std::move(losses);
        run.weights[static_cast<size_t>(rank)] = std::move(w);
      },
      [&](caf::error& err) { fail("training: " + col::render(err)); },
      caf::after(60s) >> [&] { fail("workers silent for 60 s"); });
  }
  if (ok) ok = sgd::check(s, run, sgd::single_process_run(*data, s));
  if (!s.plot.empty()) sgd::plot(s.plot, run.losses);
  for (auto& w : workers)
    self->send_exit(w, caf::exit_reason::user_shutdown);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  std::printf(ok ? "OK\n" : "FAILED\n");
  return ok ? 0 : 1;
}
