// Data-parallel SGD across processes: the training of example 01 with each
// worker in its own process, one rank each, started by the project's
// launcher (or mpirun, srun, torchrun: the rank and the rendezvous store
// come from the environment). Each rank trains on its shard and averages
// its gradient with the others' through allreduce(avg) on the imperative
// API's group, prepared once as a persistent op and run every step on the
// same buffer; the shard's loss rides behind the gradient, so the same op
// yields the mean loss. At the end the ranks allgather their weights, and every
// rank checks: the loss falls below a threshold, all ranks hold the same
// weights, and they match a single-process run. Rank 0 prints the table.
//
// Usage: caf_collective_run -n 4 path/to/example_05_multi_process [--steps N]
//          [--samples N] [--features N] [--lr X] [--plot loss.png]
// (the number of workers is the launcher's number of ranks; --samples must
// be a multiple of it, and --workers, if given, must equal it)
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <caf_collective/all.hpp>

#include "sgd_problem.hpp"

namespace col = caf_collective;

namespace {

// Trains on rank `rank`'s shard; returns the mean loss per step and this
// rank's final weights (in `run.weights[0]`).
sgd::outcome train(const sgd::settings& s, const sgd::dataset& data, int rank) {
  sgd::outcome run;
  std::vector<double> w(static_cast<size_t>(s.features), 0.0), grad;
  auto [first, last] = sgd::shard_of(s, rank);
  col::allreduce_options avg;
  avg.op = col::reduce_op::avg;
  // One message buffer for every step (the gradient, then the loss), so
  // the allreduce is checked and bound to it once.
  std::vector<float> msg(w.size() + 1);
  auto average = col::get_group("dp")->prepare_allreduce(
    col::view_of(msg), col::view_of(msg), avg);
  if (!average) throw col::collective_error{average.error()};
  for (int step = 0; step < s.steps; ++step) {
    double loss = sgd::loss_and_gradient(data, first, last, w, grad);
    std::copy(grad.begin(), grad.end(), msg.begin());
    msg.back() = static_cast<float>(loss);
    if (auto err = average->run()) throw col::collective_error{err};
    run.losses.push_back(msg.back());
    sgd::apply_gradient(w, msg, s.lr);
  }
  run.weights.push_back(std::move(w));
  return run;
}

// Every rank's weights, in rank order (`w` by value: views need mutable
// memory).
std::vector<std::vector<double>> allgather_weights(std::vector<double> w,
                                                   int world) {
  std::vector<double> all(w.size() * static_cast<size_t>(world));
  col::allgather(col::view_of(w), col::view_of(all), "dp");
  std::vector<std::vector<double>> result;
  for (size_t r = 0; r < static_cast<size_t>(world); ++r)
    result.emplace_back(all.begin() + static_cast<long>(r * w.size()),
                        all.begin() + static_cast<long>((r + 1) * w.size()));
  return result;
}

} // namespace

int main(int argc, char** argv) {
  auto s = sgd::parse(argc, argv, sgd::worker_count::launcher);
  int rank = -1;
  try {
    // Rank, world size and the store come from the launcher. The arguments
    // are checked against them before any group forms: every rank refuses
    // alike, and none waits for the others.
    auto place = col::read_launch_environment();
    if (!place) throw col::collective_error{place.error()};
    if (auto why = sgd::fit_to_world(s, place->world_size); !why.empty()) {
      std::printf("rank %d: FAILED: %s\n", place->rank, why.c_str());
      return 2;
    }
    // "auto" runs on shared memory when every rank is on this host, else
    // on Gloo.
    col::init_collective_group_from_env("auto", "dp");
    rank = col::get_rank("dp");
    if (rank == 0)
      std::printf("data-parallel SGD across %d processes on %s: %d samples x "
                  "%d features, %d steps, lr %g\n",
                  s.workers, col::get_group("dp")->backend_in_use().c_str(),
                  s.samples, s.features, s.steps, s.lr);
    // Every process builds the same data set (fixed seed) and trains on
    // its own rows only.
    auto data = sgd::make_data(s);
    auto run = train(s, data, rank);
    run.weights = allgather_weights(run.weights.front(), s.workers);
    col::destroy_collective_group("dp");
    bool ok = sgd::check(s, run, sgd::single_process_run(data, s), rank == 0);
    if (rank == 0 && !s.plot.empty()) sgd::plot(s.plot, run.losses);
    std::printf("rank %d: %s\n", rank, ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("rank %d: FAILED: %s\n", rank, e.what());
    return 1;
  }
}
