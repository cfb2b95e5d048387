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
//                              [--backend shm|gloo|auto]
//                              [--caf-scheduler stealing|sharing|
//                                               stealing-sleep[/N workers]]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
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
#include "caf_scheduler_names.hpp"
#include "strict_number.hpp"

namespace col = caf_collective;
using clock_type = std::chrono::steady_clock;
using go_atom = caf::atom_constant<caf::atom("go")>;

namespace {

// Each rank is a thread and a member actor of this process.
constexpr int max_ranks = 1024;

struct settings {
  int ranks = 4;
  int iters = 2000;
  size_t bytes = 8;
  std::string backend = "shm";
  std::string scheduler = "stealing";
};

// Refuses what would hang or crash later, before any actor or thread
// exists: no ranks (the group never forms: a 30 s wait), no iterations
// (nothing to take a percentile of), a backend the library lacks (thrown
// inside the rank threads).
settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; i += 2) {
    std::string key = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(key + " needs a value");
    std::string value = argv[i + 1];
    if (key == "--ranks")
      s.ranks = col::bench::parse_int(key, value, 1, max_ranks);
    else if (key == "--iters")
      s.iters = col::bench::parse_int(key, value, 1, INT32_MAX);
    else if (key == "--bytes")
      s.bytes = col::bench::parse_byte_count(key, value);
    else if (key == "--backend")
      s.backend = value;
    else if (key == "--caf-scheduler")
      s.scheduler = value;
    else
      throw std::invalid_argument("unknown option " + key);
  }
  if (s.backend != "shm" && s.backend != "gloo" && s.backend != "auto")
    throw std::invalid_argument("--backend must be shm, gloo or auto, not '" +
                                s.backend + "'");
  if (!col::bench::is_caf_scheduler(s.scheduler))
    throw std::invalid_argument(std::string{"--caf-scheduler must be "} +
                                col::bench::caf_scheduler_names);
  // The members take their element count as an int32_t.
  if (s.bytes / 4 > static_cast<size_t>(INT32_MAX))
    throw std::invalid_argument("--bytes must be below 8G");
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

// One rank of the imperative path: `iters` blocking allreduces, the times
// after the first tenth into `mine`.
void run_imperative_rank(const settings& s, int r, int elements,
                         const col::rendezvous_store_ptr& store,
                         samples& mine) {
  col::member_scope scope;
  col::init_options opts;
  opts.store = store;
  col::init_collective_group(s.ranks, r, s.backend, "loop", opts);
  std::vector<float> xs(static_cast<size_t>(elements), 1.0f);
  auto view = col::tensor_view{xs.data(), col::dtype::float32, xs.size()};
  for (int i = 0; i < s.iters; ++i) {
    auto start = clock_type::now();
    col::allreduce(view, "loop");
    std::chrono::duration<double, std::micro> dt = clock_type::now() - start;
    if (i >= s.iters / 10) mine.push_back(dt.count());
  }
  col::destroy_collective_group("loop");
}

samples imperative_path(const settings& s, int elements) {
  std::vector<samples> per_rank(static_cast<size_t>(s.ranks));
  // What each rank threw: an exception leaving a std::thread terminates
  // the process without a word.
  std::vector<std::string> failures(static_cast<size_t>(s.ranks));
  std::vector<std::thread> threads;
  auto store = col::make_in_process_store();
  for (int r = 0; r < s.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        run_imperative_rank(s, r, elements, store,
                            per_rank[static_cast<size_t>(r)]);
      } catch (const std::exception& ex) {
        failures[static_cast<size_t>(r)] = ex.what();
      }
    });
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < s.ranks; ++r)
    if (auto& what = failures[static_cast<size_t>(r)]; !what.empty())
      throw std::runtime_error("imperative path, rank " + std::to_string(r) +
                               ": " + what);
  samples all;
  for (auto& xs : per_rank)
    all.insert(all.end(), xs.begin(), xs.end());
  return all;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 2 &&
      (std::string{argv[1]} == "--help" || std::string{argv[1]} == "-h")) {
    std::printf("usage: caf_collective_member_loop [--ranks 4] [--iters 2000] "
                "[--bytes 8]\n"
                "         [--backend shm|gloo|auto] [--caf-scheduler %s]\n"
                "Times 8 B allreduces through the imperative API, from "
                "members' handlers and\nthrough the driver, and prints each "
                "path's median and 90th percentile.\n",
                col::bench::caf_scheduler_names);
    return 0;
  }
  settings s;
  try {
    s = parse(argc, argv);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "member_loop: %s\n", ex.what());
    return 2;
  }
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
