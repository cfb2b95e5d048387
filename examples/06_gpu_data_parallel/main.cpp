// Example 01 on CUDA tensors through NCCL: one worker per GPU (at most
// --workers), each computing its gradient on the host, copying it into a
// CUDA tensor in its node's store; the driver runs allreduce(avg) on those
// device refs over a group formed on the "nccl" backend, and each worker
// copies the average back and applies it. Same checks as example 01: the
// loss falls below the threshold, every worker ends with the same weights,
// and they match a single-process run. Without a CUDA device it says so and
// exits 77 (CTest: skipped).
//
// Usage: 06_gpu_data_parallel [--steps N] [--samples N] [--features N]
//                             [--workers N] [--lr X] [--plot loss.png]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <caf/all.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/driver.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/interfaces.hpp>
#include <caf_collective/member.hpp>

#include "sgd_driver.hpp"
#include "sgd_problem.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

using sgd::apply_atom;
using sgd::grad_atom;

namespace {

int gpu_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError(); // clear it: no driver or no device
    return 0;
  }
  return count;
}

caf::error cuda_error(const char* what, cudaError_t rc) {
  return col::make_error(col::errc::backend_error,
                         std::string{what} + ": " + cudaGetErrorString(rc));
}

// A worker on CUDA device `rank`: its gradient goes to the store as a
// device tensor; the average comes back the same way.
caf::behavior worker(caf::event_based_actor* self, int32_t rank,
                     std::shared_ptr<const sgd::dataset> data,
                     const sgd::settings& s) {
  auto w =
    std::make_shared<std::vector<double>>(static_cast<size_t>(data->cols), 0.0);
  auto [first, last] = sgd::shard_of(s, rank);
  auto store = col::local_store(self->system());
  return {
    [=](grad_atom) -> caf::result<col::object_ref, double> {
      std::vector<double> grad;
      double loss = sgd::loss_and_gradient(*data, first, last, *w, grad);
      std::vector<float> host(grad.begin(), grad.end());
      auto t = col::tensor::empty(col::dtype::float32,
                                  {static_cast<int64_t>(host.size())},
                                  col::device::cuda(rank));
      if (!t) return t.error();
      auto rc = cudaMemcpy(t->data(), host.data(), host.size() * sizeof(float),
                           cudaMemcpyHostToDevice);
      if (rc != cudaSuccess) return cuda_error("copy to the device", rc);
      auto ref = store->put(std::move(*t));
      if (!ref) return ref.error();
      return {*ref, loss};
    },
    [=](apply_atom, const col::object_ref& ref) -> caf::result<bool> {
      auto view = store->get(ref);
      if (!view) return view.error();
      std::vector<float> mean(view->numel());
      auto rc = cudaMemcpy(mean.data(), view->data(),
                           mean.size() * sizeof(float), cudaMemcpyDeviceToHost);
      store->release(ref);
      if (rc != cudaSuccess) return cuda_error("copy to the host", rc);
      sgd::apply_gradient(*w, mean, s.lr);
      return true;
    },
    [=](caf::get_atom) { return *w; },
  };
}

} // namespace

int main(int argc, char** argv) {
  auto s = sgd::parse(argc, argv);
  auto gpus = gpu_count();
  if (gpus == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  // NCCL runs one rank per device: as many workers as GPUs, at most the
  // number asked for (the data set is split accordingly).
  s.workers = std::min(s.workers, gpus);
  while (s.samples % s.workers != 0) // equal shards, as in example 01
    --s.workers;
  auto data = std::make_shared<const sgd::dataset>(sgd::make_data(s));
  caf::actor_system_config cfg;
  col::add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto driver = col::spawn_driver(sys);
  col::group_spec spec;
  spec.name = "gpu-dp";
  spec.world_size = s.workers;
  spec.backend = "nccl";
  spec.timeout = 30s;
  for (int32_t d = 0; d < s.workers; ++d)
    spec.cuda_devices.push_back(d);
  auto workers = col::spawn_group(sys, driver, spec, worker, data, s);
  auto typed = col::typed_driver(driver);
  caf::scoped_actor self{sys};
  bool ok = true;
  auto fail = [&](const std::string& what) {
    std::printf("FAILED: %s\n", what.c_str());
    ok = false;
  };
  std::printf("data-parallel SGD on %d GPU(s) through NCCL: %d samples x %d "
              "features, %d steps, lr %g\n",
              s.workers, s.samples, s.features, s.steps, s.lr);
  if (auto err = col::await_group(self, driver, "gpu-dp", 60s))
    fail("group formation: " + col::render(err));
  // Nothing to train if the group did not form.
  auto run =
    ok ? sgd::train_by_driver(self, typed, "gpu-dp", workers, s, 10s, fail)
       : sgd::outcome{};
  if (ok) ok = sgd::check(s, run, sgd::single_process_run(*data, s));
  if (!s.plot.empty()) sgd::plot(s.plot, run.losses);
  for (auto& w : workers)
    self->send_exit(w, caf::exit_reason::user_shutdown);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  std::printf(ok ? "OK\n" : "FAILED\n");
  return ok ? 0 : 1;
}
