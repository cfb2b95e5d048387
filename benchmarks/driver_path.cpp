#include "driver_path.hpp"

#include <chrono>
#include <stdexcept>
#include <vector>

#include <caf/all.hpp>

#include "caf_collective/client.hpp"
#include "caf_collective/driver.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/member.hpp"
#include "caf_collective/messages.hpp"

#include "caf_scheduler.hpp"
#include "data_pattern.hpp"

namespace caf_collective::bench {

namespace {

constexpr const char* group_name = "bench-driver";
constexpr auto timeout = std::chrono::seconds{60};

op_kind kind_of(bench_op op) {
  switch (op) {
    case bench_op::allreduce: return op_kind::allreduce;
    case bench_op::reduce: return op_kind::reduce;
    case bench_op::broadcast: return op_kind::broadcast;
    case bench_op::allgather: return op_kind::allgather;
    case bench_op::reduce_scatter: return op_kind::reduce_scatter;
    case bench_op::alltoall: return op_kind::alltoall;
    case bench_op::gather: return op_kind::gather;
    case bench_op::scatter: return op_kind::scatter;
    default: return op_kind::barrier;
  }
}

[[noreturn]] void fail(const std::string& what, const caf::error& err) {
  throw std::runtime_error("driver path: " + what + ": " + render(err));
}

// The actor system and everything in it; exists on rank 0 only.
struct driver_world {
  explicit driver_world(const std::string& scheduler)
    : sys(init_cfg(cfg, scheduler)), self(sys) {
    driver = spawn_driver(sys);
  }

  static caf::actor_system_config& init_cfg(caf::actor_system_config& cfg,
                                            const std::string& scheduler) {
    add_message_types(cfg);
    use_caf_scheduler(cfg, scheduler);
    return cfg;
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  driver_actor driver;
  std::vector<member_actor> members;
};

class driver_path : public bench_path {
 public:
  driver_path(int rank, int ranks, const std::string& scheduler,
              const std::string& backend, int window)
    : rank_(rank), ranks_(ranks), window_(window) {
    if (rank_ != 0) return;
    world_ = std::make_unique<driver_world>(scheduler);
    // Membership at spawn: one member actor per rank, all in this process.
    world_->members = spawn_group(
      world_->sys, world_->driver, group_name, ranks_, backend, 30000,
      [](caf::event_based_actor*, int32_t) { return caf::behavior{}; });
    if (auto err = await_group(world_->self, world_->driver, group_name,
                               std::chrono::seconds{30}))
      fail("group formation", err);
    store_ = local_store(world_->sys);
  }

  ~driver_path() override {
    if (!world_) return;
    release_inputs();
    for (auto& m : world_->members)
      world_->self->send_exit(m, caf::exit_reason::user_shutdown);
    world_->self->send_exit(world_->driver, caf::exit_reason::user_shutdown);
  }

  std::string_view name() const override {
    return window_ > 1 ? "driver-overlap" : "driver";
  }

  int ops_per_run() const override { return window_; }

  bool supports(bench_op op, bool in_place) const override {
    // Results are new objects in the store: no in-place form.
    return !in_place && op != bench_op::sendrecv;
  }

  // Inputs live in the store for the whole size, one object per rank.
  void prepare(const op_args& a, int) override {
    if (!world_) return;
    release_inputs();
    if (a.op == bench_op::barrier) return;
    auto count = counts_of(a.op, a.total, a.ranks).in;
    for (int r = 0; r < ranks_; ++r) {
      auto t = tensor::zeros(a.type, {static_cast<int64_t>(count)});
      if (!t) fail("allocating an input", t.error());
      auto ref = store_->put(std::move(*t));
      if (!ref) fail("storing an input", ref.error());
      inputs_.push_back(*ref);
    }
  }

  void finish() override { release_inputs(); }

  void run(const op_args& a) override {
    if (!world_) return;
    if (window_ == 1) {
      release(call(a));
      return;
    }
    // Every request goes out before the first answer is read.
    std::vector<caf::error> failures(static_cast<size_t>(window_));
    std::vector<std::vector<object_ref>> results(static_cast<size_t>(window_));
    // A request timeout, unlike the blocking helper's: several answers are
    // awaited at once.
    std::vector<decltype(world_->self->request(world_->driver, timeout,
                                               request_of(a)))>
      pending;
    for (int i = 0; i < window_; ++i)
      pending.push_back(
        world_->self->request(world_->driver, timeout, request_of(a)));
    for (size_t i = 0; i < pending.size(); ++i)
      pending[i].receive(
        [&](op_result& r) { results[i] = std::move(r.refs); },
        [&](caf::error& err) { failures[i] = std::move(err); });
    for (size_t i = 0; i < pending.size(); ++i) {
      if (failures[i]) fail(std::string{to_string(a.op)}, failures[i]);
      release(results[i]);
    }
  }

  size_t check(const op_args& a) override {
    if (!world_) return 0;
    for (int r = 0; r < ranks_; ++r) {
      auto view = store_->get(inputs_[static_cast<size_t>(r)]);
      if (!view) fail("reading an input", view.error());
      auto args = for_rank(a, r, view->data(), view->data());
      fill_inputs(args);
    }
    auto results = call(a);
    size_t wrong = 0;
    for (int r = 0; r < ranks_; ++r) {
      auto idx = static_cast<size_t>(r);
      auto out = idx < results.size() && results[idx].valid()
                   ? store_->get(results[idx])
                   : caf::expected<tensor_view>{tensor_view{}};
      if (!out) fail("reading a result", out.error());
      // A result of the wrong size is wrong in every element.
      auto want = counts_of(a.op, a.total, a.ranks).out;
      auto args = for_rank(a, r, nullptr, out->data());
      if (out->numel() != want && count_wrong_possible(args))
        wrong += want;
      else if (out->numel() == want)
        wrong += count_wrong(args);
    }
    release(results);
    return wrong;
  }

  // The timed ops' results are released as they come: only check() sees
  // one.
  size_t check_timed(const op_args&) override { return 0; }

 private:
  static bool count_wrong_possible(const op_args& a) {
    // Off the root, reduce and gather define no result.
    return !((a.op == bench_op::reduce || a.op == bench_op::gather) &&
             a.rank != a.root);
  }

  static op_args for_rank(const op_args& a, int r, void* in, void* out) {
    auto args = a;
    args.rank = r;
    args.in = in;
    args.out = out;
    return args;
  }

  op_request request_of(const op_args& a) const {
    op_request req;
    req.group = group_name;
    req.op = kind_of(a.op);
    req.refs = inputs_;
    req.params.root = a.root;
    req.params.op = a.redop;
    return req;
  }

  std::vector<object_ref> call(const op_args& a) {
    auto res = run_op(world_->self, world_->driver, request_of(a), timeout);
    if (!res) fail(std::string{to_string(a.op)}, res.error());
    return std::move(res->refs);
  }

  // Drops result objects that are not our inputs.
  void release(const std::vector<object_ref>& refs) {
    for (auto& ref : refs) {
      if (!ref.valid()) continue;
      bool is_input = false;
      for (auto& in : inputs_)
        is_input = is_input || in == ref;
      if (!is_input) store_->release(ref);
    }
  }

  void release_inputs() {
    for (auto& ref : inputs_)
      store_->release(ref);
    inputs_.clear();
  }

  int rank_;
  int ranks_;
  int window_; // requests in flight per run
  std::unique_ptr<driver_world> world_;
  object_store_ptr store_;
  std::vector<object_ref> inputs_;
};

} // namespace

bool driver_path_available() noexcept {
  return true;
}

bench_path_ptr make_driver_path(int rank, int ranks,
                                const std::string& scheduler,
                                const std::string& backend, int window) {
  return std::make_unique<driver_path>(rank, ranks, scheduler, backend, window);
}

} // namespace caf_collective::bench
