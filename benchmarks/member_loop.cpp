// caf_collective_member_loop: the actor paths against the imperative API,
// in one run. N threads each call allreduce `iters` times on the backend
// (imperative); N members each start `iters` allreduces back to back from
// their own handlers, each .then starting the next (member); a client
// actor asks the driver for `iters` allreduces of N members, one after the
// other (driver: the round trip client -> driver -> members -> driver ->
// client, all inside the actor system). Prints the median and 90th
// percentile time per op of each and their difference to the imperative
// API (issue 11's goals at 8 B: member within 10 us, driver within 50 us).
//
//   caf_collective_member_loop [--ranks 4] [--iters 2000] [--bytes 8]
//                              [--backend shm|gloo]
//                              [--caf-scheduler stealing|sharing|
//                                               stealing-sleep[/N workers]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "caf_collective/api.hpp"
#include "caf_collective/client.hpp"
#include "caf_collective/client_ops.hpp"
#include "caf_collective/driver.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/member.hpp"
#include "caf_collective/member_ops.hpp"
#include "caf_collective/object_store.hpp"

#include "caf_scheduler.hpp"

namespace col = caf_collective;
using clock_type = std::chrono::steady_clock;
using go_atom = caf::atom_constant<caf::atom("go")>;

namespace {

struct settings {
  int ranks = 4;
  int iters = 2000;
  size_t bytes = 8;
  std::string backend = "shm";
  std::string scheduler = "stealing";
};

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    std::string value = argv[i + 1];
    if (key == "--ranks")
      s.ranks = std::stoi(value);
    else if (key == "--iters")
      s.iters = std::stoi(value);
    else if (key == "--bytes")
      s.bytes = std::stoul(value);
    else if (key == "--backend")
      s.backend = value;
    else if (key == "--caf-scheduler" && col::bench::is_caf_scheduler(value))
      s.scheduler = value;
    else {
      std::fprintf(stderr, "unknown option or value: %s %s\n", key.c_str(),
                   value.c_str());
      std::exit(2);
    }
  }
  return s;
}

// Per-op durations in microseconds.
using samples = std::vector<double>;

double percentile(samples xs, double p) {
  std::sort(xs.begin(), xs.end());
  return xs[static_cast<size_t>(p * static_cast<double>(xs.size() - 1))];
}

// Sends the requests of `start()` (an actor's requests) one after the other,
// each answer starting the next, and delivers the `iters` durations to `rp`.
template<class Result, class Start>
void time_back_to_back(int32_t iters, caf::typed_response_promise<samples> rp,
                       Start start) {
  auto times = std::make_shared<samples>();
  auto next = std::make_shared<std::function<void()>>();
  *next = [=]() mutable {
    if (static_cast<int32_t>(times->size()) == iters) {
      rp.deliver(std::move(*times));
      *next = nullptr;
      return;
    }
    auto t0 = clock_type::now();
    start().then(
      [=](Result&) mutable {
        std::chrono::duration<double, std::micro> dt = clock_type::now() - t0;
        times->push_back(dt.count());
        (*next)();
      },
      [=](caf::error& err) mutable {
        rp.deliver(std::move(err));
        *next = nullptr;
      });
  };
  (*next)();
}

// A member that, on (go, iters, elements), runs `iters` allreduces of its
// own, one after the other, and answers each op's duration.
caf::behavior looping(caf::event_based_actor* self, int32_t) {
  return {
    [=](go_atom, int32_t iters, int32_t elements) -> caf::result<samples> {
      auto rp = self->make_response_promise<samples>();
      auto ref =
        col::put(self,
                 col::tensor::from_vector(std::vector<float>(elements, 1.0f)))
          .value();
      time_back_to_back<col::object_ref>(iters, rp, [=] {
        return col::collectives(self, "loop").allreduce(ref);
      });
      return rp;
    },
  };
}

// An actor system with a driver and a formed group "loop" of members
// running `member_fn`; the members and the driver exit with it.
struct actor_world {
  template<class MemberFn>
  actor_world(const settings& s, col::op_source ops_from, MemberFn member_fn)
    : sys(configure(cfg, s)), self(sys), driver(col::spawn_driver(sys)) {
    col::group_spec spec;
    spec.name = "loop";
    spec.world_size = s.ranks;
    spec.backend = s.backend;
    spec.ops_from = ops_from;
    members = col::spawn_group(sys, driver, spec, member_fn);
    if (auto err =
          col::await_group(self, driver, "loop", std::chrono::seconds{30}))
      throw std::runtime_error(col::render(err));
  }

  ~actor_world() {
    for (auto& m : members)
      self->send_exit(m, caf::exit_reason::user_shutdown);
    self->send_exit(driver, caf::exit_reason::user_shutdown);
  }

  static caf::actor_system_config& configure(caf::actor_system_config& cfg,
                                             const settings& s) {
    col::add_message_types(cfg);
    col::bench::use_caf_scheduler(cfg, s.scheduler);
    return cfg;
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  col::driver_actor driver;
  std::vector<col::member_actor> members;
};

// Warm-up: the first tenth of a series is dropped.
void keep_after_warm_up(samples& all, const samples& xs) {
  all.insert(all.end(), xs.begin() + xs.size() / 10, xs.end());
}

samples member_path(const settings& s, int elements) {
  actor_world world{s, col::op_source::members, looping};
  auto& self = world.self;
  for (auto& m : world.members)
    self->send(m, go_atom::value, int32_t{s.iters}, int32_t{elements});
  samples all;
  int answered = 0;
  self->receive_for(answered, s.ranks)(
    [&](samples& xs) { keep_after_warm_up(all, xs); },
    [&](caf::error& err) { throw std::runtime_error(col::render(err)); });
  return all;
}

// A client actor that, on (go, iters), asks the driver for `iters`
// allreduces of `refs`, one after the other, and answers their durations.
caf::behavior driving(caf::event_based_actor* self, col::driver_api driver,
                      std::vector<col::object_ref> refs) {
  return {
    [=](go_atom, int32_t iters) -> caf::result<samples> {
      auto rp = self->make_response_promise<samples>();
      time_back_to_back<col::op_result>(
        iters, rp, [=] { return col::allreduce(self, driver, "loop", refs); });
      return rp;
    },
  };
}

samples driver_path(const settings& s, int elements) {
  actor_world world{
    s, col::op_source::driver,
    [](caf::event_based_actor*, int32_t) { return caf::behavior{}; }};
  auto store = col::local_store(world.sys);
  std::vector<col::object_ref> refs;
  for (int r = 0; r < s.ranks; ++r)
    refs.push_back(
      store->put(col::tensor::from_vector(std::vector<float>(elements, 1.0f)))
        .value());
  auto client = world.sys.spawn(driving, col::typed_driver(world.driver), refs);
  samples all;
  world.self->request(client, caf::infinite, go_atom::value, int32_t{s.iters})
    .receive(
      [&](samples& xs) { keep_after_warm_up(all, xs); },
      [&](caf::error& err) { throw std::runtime_error(col::render(err)); });
  for (auto& ref : refs)
    store->release(ref);
  world.self->send_exit(client, caf::exit_reason::user_shutdown);
  return all;
}

samples imperative_path(const settings& s, int elements) {
  std::vector<samples> per_rank(static_cast<size_t>(s.ranks));
  std::vector<std::thread> threads;
  auto store = col::make_in_process_store();
  for (int r = 0; r < s.ranks; ++r)
    threads.emplace_back([&, r] {
      col::member_scope scope;
      col::init_options opts;
      opts.store = store;
      col::init_collective_group(s.ranks, r, s.backend, "loop", opts);
      std::vector<float> xs(static_cast<size_t>(elements), 1.0f);
      auto view = col::tensor_view{xs.data(), col::dtype::float32, xs.size()};
      auto& mine = per_rank[static_cast<size_t>(r)];
      for (int i = 0; i < s.iters; ++i) {
        auto start = clock_type::now();
        col::allreduce(view, "loop");
        std::chrono::duration<double, std::micro> dt =
          clock_type::now() - start;
        if (i >= s.iters / 10) mine.push_back(dt.count());
      }
      col::destroy_collective_group("loop");
    });
  for (auto& t : threads)
    t.join();
  samples all;
  for (auto& xs : per_rank)
    all.insert(all.end(), xs.begin(), xs.end());
  return all;
}

} // namespace

int main(int argc, char** argv) {
  auto s = parse(argc, argv);
  auto elements = static_cast<int>(std::max<size_t>(s.bytes / 4, 1));
  std::printf("# %d ranks, %d allreduces of %zu B each, backend %s, CAF "
              "scheduler %s\n",
              s.ranks, s.iters, static_cast<size_t>(elements) * 4,
              s.backend.c_str(), s.scheduler.c_str());
  try {
    auto imperative = imperative_path(s, elements);
    auto member = member_path(s, elements);
    auto driver = driver_path(s, elements);
    auto im50 = percentile(imperative, 0.5);
    auto me50 = percentile(member, 0.5);
    auto dr50 = percentile(driver, 0.5);
    std::printf("%-12s %10s %10s\n", "path", "median_us", "p90_us");
    std::printf("%-12s %10.2f %10.2f\n", "imperative", im50,
                percentile(imperative, 0.9));
    std::printf("%-12s %10.2f %10.2f\n", "member", me50,
                percentile(member, 0.9));
    std::printf("%-12s %10.2f %10.2f\n", "driver", dr50,
                percentile(driver, 0.9));
    std::printf("member - imperative (median): %.2f us\n", me50 - im50);
    std::printf("driver - imperative (median): %.2f us\n", dr50 - im50);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "member_loop: %s\n", ex.what());
    return 1;
  }
  return 0;
}
