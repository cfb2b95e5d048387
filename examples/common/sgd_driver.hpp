// The driver-path training loop of the data-parallel examples (01 on CPU
// tensors, 06 on CUDA tensors): each step asks every worker for its gradient
// ref and loss, has the driver average the refs, and hands each worker its
// result; then collects every worker's weights. The workers answer
// (grad) -> (ref, loss), (apply, ref) -> bool and (get) -> weights.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include <caf_collective/client_ops.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/interfaces.hpp>
#include <caf_collective/messages.hpp>

#include "sgd_problem.hpp"

namespace sgd {

namespace col = caf_collective;

using grad_atom = caf::atom_constant<caf::atom("sgd_grad")>;
using apply_atom = caf::atom_constant<caf::atom("sgd_apply")>;

/// Trains `s.steps` steps of group `group` through the driver; reports each
/// failure to `fail` and stops at the first one.
inline outcome train_by_driver(caf::scoped_actor& self,
                               const col::driver_api& typed,
                               const std::string& group,
                               const std::vector<col::member_actor>& workers,
                               const settings& s,
                               std::chrono::milliseconds timeout,
                               const std::function<void(std::string)>& fail) {
  outcome run;
  bool ok = true;
  auto failed = [&](const std::string& what) {
    ok = false;
    fail(what);
  };
  col::allreduce_options avg;
  avg.op = col::reduce_op::avg;
  for (int step = 0; ok && step < s.steps; ++step) {
    std::vector<col::object_ref> refs;
    double loss = 0;
    for (auto& w : workers)
      self->request(w, timeout, grad_atom::value)
        .receive(
          [&](const col::object_ref& ref, double l) {
            refs.push_back(ref);
            loss += l / s.workers; // equal shards: the mean is the loss
          },
          [&](caf::error& e) { failed("gradient: " + col::render(e)); });
    run.losses.push_back(loss);
    if (!ok) break;
    auto result = col::allreduce(self, typed, group, refs, avg);
    if (!result) {
      failed("allreduce: " + col::render(result.error()));
      break;
    }
    for (size_t r = 0; r < workers.size(); ++r)
      self->request(workers[r], timeout, apply_atom::value, result->refs[r])
        .receive([](bool) {},
                 [&](caf::error& e) { failed("apply: " + col::render(e)); });
  }
  // Every worker's weights, to compare with a single-process run.
  for (auto& w : workers)
    self->request(w, timeout, caf::get_atom::value)
      .receive([&](std::vector<double>& x) { run.weights.push_back(x); },
               [&](caf::error& e) { failed("weights: " + col::render(e)); });
  return run;
}

} // namespace sgd
