// One rank of the object-collective process tests: joins a Gloo group
// through a file store and runs every object op on objects whose size
// differs per rank.
//
// Usage: collective_object_rank_process <world> <rank> <store dir> <mode>
//   mode "ok":  every op, results checked; exit 0, or 1 on a wrong result.
//   mode "die": the last rank exits (code 7) in the middle of an
//               allgather_object, after the headers and before the
//               payloads; the others exit 3 when the op failed with a lost
//               peer naming the op (its death closed the connections: a
//               timeout would mean nobody noticed), 1 otherwise.
//   mode "oom": the last rank limits its address space so that it cannot
//               hold the others' large objects, then all allgather_object:
//               it exits 3 when it failed with out_of_memory, the others
//               exit 3 when they failed with a lost peer or an abort (not
//               a timeout: they must learn at once); 1 otherwise.
//   mode "oom-read": rank 0 broadcasts a 64 MiB string that the last rank
//               can receive but not read into a string (address-space
//               limit): every rank exits 3 when all failed with
//               out_of_memory naming that reader and a barrier then
//               still worked; 1 otherwise.
//   mode "msg": caf::message through each process's own actor system;
//               rank 0's system alone does not register shard_plan, so the
//               second allgather (of a shard_plan) fails on every rank:
//               exit 3 when the first worked and the second failed as
//               expected, 1 otherwise.
//   mode "actors": each process spawns an actor and allgathers its handle,
//               then a caf::message holding it, through a system without a
//               middleman: both fail on every rank with mismatch naming the
//               actor handle rule (exit 3), where they used to come back as
//               handles to this process's own actor of the same number.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <caf_collective/object_collectives.hpp>

namespace col = caf_collective;

namespace {

struct shard_plan {
  std::string owner;
  std::vector<int64_t> rows;
  std::map<std::string, double> weights;

  bool operator==(const shard_plan&) const = default;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_plan& x) {
  return f(caf::meta::type_name("shard_plan"), x.owner, x.rows, x.weights);
}

shard_plan plan_of(int rank) {
  shard_plan p;
  p.owner = "rank-" + std::to_string(rank);
  for (int i = 0; i < 1000 * rank + 3; ++i)
    p.rows.push_back(int64_t{i} * (rank + 1));
  for (int i = 0; i <= rank; ++i)
    p.weights["w" + std::to_string(i)] = 0.5 * i + rank;
  return p;
}

int failures = 0;

void expect(bool cond, const std::string& what, int rank) {
  if (!cond) {
    std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
    ++failures;
  }
}

void run_every_op(int world, int rank) {
  auto all = col::allgather_object(plan_of(rank), "objs");
  expect(all.size() == static_cast<size_t>(world), "allgather size", rank);
  for (int r = 0; r < world && r < static_cast<int>(all.size()); ++r)
    expect(all[static_cast<size_t>(r)] == plan_of(r),
           "allgather object of rank " + std::to_string(r), rank);
  auto root_plan = rank == world - 1 ? plan_of(9) : shard_plan{};
  col::broadcast_object(root_plan, world - 1, "objs");
  expect(root_plan == plan_of(9), "broadcast", rank);
  auto gathered = col::gather_object(plan_of(rank), 0, "objs");
  if (rank == 0)
    for (int r = 0; r < world; ++r)
      expect(static_cast<int>(gathered.size()) == world &&
               gathered[static_cast<size_t>(r)] == plan_of(r),
             "gather object of rank " + std::to_string(r), rank);
  std::vector<shard_plan> parts;
  if (rank == 0)
    for (int r = 0; r < world; ++r)
      parts.push_back(plan_of(world - r));
  expect(col::scatter_object(parts, 0, "objs") == plan_of(world - rank),
         "scatter", rank);
  if (world > 1) {
    if (rank == 0) col::send_object(plan_of(5), world - 1, "objs");
    if (rank == world - 1)
      expect(col::recv_object<shard_plan>(0, "objs") == plan_of(5), "recv",
             rank);
  }
}

// Every rank's message of built-in types arrives; then a message holding a
// type rank 0 cannot name fails on every rank: invalid_argument where rank 0
// could not serialize its own (it is rank 0's contribution).
int run_messages(int world, int rank) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 1);
  if (rank != 0) cfg.add_message_type<shard_plan>("shard_plan");
  caf::actor_system sys{cfg};
  auto all = col::allgather_message(
    sys,
    caf::make_message(std::string(static_cast<size_t>(rank) * 100, 'm'),
                      int32_t{rank}),
    "objs");
  for (int r = 0; r < world; ++r) {
    auto& m = all[static_cast<size_t>(r)];
    expect(m.match_elements<std::string, int32_t>() &&
             m.get_as<std::string>(0).size() == static_cast<size_t>(r) * 100 &&
             m.get_as<int32_t>(1) == r,
           "message of rank " + std::to_string(r), rank);
  }
  if (failures > 0) return 1;
  try {
    col::allgather_message(sys, caf::make_message(plan_of(rank)), "objs");
  } catch (const col::collective_error& e) {
    std::string text = e.what();
    bool expected = e.code() == col::errc::invalid_argument &&
                    text.find("rank(s) [0]") != std::string::npos &&
                    text.find("shard_plan") != std::string::npos;
    std::fprintf(stderr, "rank %d: %s\n", rank, text.c_str());
    return expected ? 3 : 1;
  }
  std::fprintf(stderr, "rank %d: an unregistered type went through\n", rank);
  return 1;
}

// Each rank's actor handle, alone and inside a caf::message: both must fail
// on every rank, since a handle cannot name an actor of another process
// here. Returns 3 when both did, 1 otherwise.
int run_actor_handles(int rank) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 1);
  caf::actor_system sys{cfg};
  auto mine = sys.spawn([]() -> caf::behavior { return {[](int32_t) {}}; });
  col::object_options opts;
  opts.system = &sys;
  auto fails_as_foreign = [&](const char* what, auto call) {
    try {
      call();
      std::fprintf(stderr, "rank %d: %s of actor handles went through\n", rank,
                   what);
      return false;
    } catch (const col::collective_error& e) {
      std::string text = e.what();
      std::fprintf(stderr, "rank %d: %s\n", rank, text.c_str());
      return e.code() == col::errc::mismatch &&
             text.find("another process") != std::string::npos &&
             text.find("actor handle") != std::string::npos;
    }
  };
  bool alone = fails_as_foreign(
    "allgather_object", [&] { col::allgather_object(mine, "objs", opts); });
  bool in_message = fails_as_foreign("allgather_message", [&] {
    col::allgather_message(sys, caf::make_message(mine, int32_t{rank}), "objs");
  });
  caf::anon_send_exit(mine, caf::exit_reason::user_shutdown);
  return alone && in_message ? 3 : 1;
}

// The process's mapped address space now, in bytes (/proc/self/statm).
size_t address_space_in_use() {
  unsigned long pages = 0;
  if (auto* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Marks that this rank has its outcome (a file in the store's directory).
void mark_done(const std::string& dir, int rank) {
  auto path = dir + "/oom-done-" + std::to_string(rank);
  if (auto* f = std::fopen(path.c_str(), "w")) std::fclose(f);
}

// Waits (up to 60 s) until every other rank marked that it has its outcome:
// a process that lives on after its error, as a real program does, so that
// its peers cannot learn of it from its exit.
void wait_for_peers(const std::string& dir, int world, int rank) {
  for (int tries = 0; tries < 600; ++tries) {
    bool all = true;
    for (int r = 0; r < world; ++r)
      if (r != rank &&
          access((dir + "/oom-done-" + std::to_string(r)).c_str(), F_OK) != 0)
        all = false;
    if (all) return;
    usleep(100 * 1000);
  }
}

int out_of_memory_outcome(int world, int rank) {
  bool starved = rank == world - 1;
  // The others send 64 MiB each; the starved rank has 32 MiB to spare.
  std::string mine(starved ? 16 : size_t{64} << 20, char('a' + rank));
  if (starved) {
    rlimit limit{};
    limit.rlim_cur = address_space_in_use() + (size_t{32} << 20);
    limit.rlim_max = RLIM_INFINITY;
    if (setrlimit(RLIMIT_AS, &limit) != 0) {
      std::fprintf(stderr, "rank %d: setrlimit failed\n", rank);
      return 1;
    }
  }
  try {
    col::allgather_object(mine, "objs");
  } catch (const col::collective_error& e) {
    std::string text = e.what();
    std::fprintf(stderr, "rank %d: %s\n", rank, text.c_str());
    bool named = text.find("allgather_object") != std::string::npos;
    if (starved) return e.code() == col::errc::out_of_memory && named ? 3 : 1;
    return (e.code() == col::errc::peer_lost ||
            e.code() == col::errc::aborted) &&
               named
             ? 3
             : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: not a collective_error: %s\n", rank,
                 e.what());
    return 1;
  }
  std::fprintf(stderr, "rank %d: allgather_object succeeded\n", rank);
  return 1;
}

// Rank 0 broadcasts a 64 MiB string; the last rank can hold the bytes but
// not the string read from them. Every rank must fail with out_of_memory
// naming the reader, and the group must stay usable.
int read_out_of_memory(int world, int rank) {
  bool starved = rank == world - 1;
  std::string obj(rank == 0 ? size_t{64} << 20 : 0, 'r');
  if (starved) {
    rlimit limit{};
    limit.rlim_cur = address_space_in_use() + (size_t{96} << 20);
    limit.rlim_max = RLIM_INFINITY;
    if (setrlimit(RLIMIT_AS, &limit) != 0) return 1;
  }
  int rc = 1;
  try {
    col::broadcast_object(obj, 0, "objs");
    std::fprintf(stderr, "rank %d: broadcast_object succeeded\n", rank);
  } catch (const col::collective_error& e) {
    std::string text = e.what();
    std::fprintf(stderr, "rank %d: %s\n", rank, text.c_str());
    auto reader =
      "rank(s) [" + std::to_string(world - 1) + "] ran out of memory";
    if (e.code() == col::errc::out_of_memory &&
        text.find("broadcast_object") != std::string::npos &&
        text.find(reader) != std::string::npos)
      rc = 3;
  }
  if (starved) {
    // Room again for the barrier's own needs.
    rlimit limit{RLIM_INFINITY, RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &limit);
  }
  col::barrier("objs"); // the group is still usable: throws otherwise
  return rc;
}

int run_out_of_memory(int world, int rank, const std::string& dir) {
  int rc = out_of_memory_outcome(world, rank);
  if (rank == world - 1)
    wait_for_peers(dir, world, rank);
  else
    mark_done(dir, rank);
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: %s <world> <rank> <store dir> "
                 "<ok|die|oom|oom-read|msg|actors>\n",
                 argv[0]);
    return 2;
  }
  int world = std::atoi(argv[1]);
  int rank = std::atoi(argv[2]);
  std::string mode = argv[4];
  col::init_options opts;
  opts.store = col::make_file_store(argv[3]);
  opts.timeout = std::chrono::seconds{20};
  try {
    col::init_collective_group(world, rank, "gloo", "objs", opts);
    if (mode == "ok") {
      run_every_op(world, rank);
      col::barrier("objs");
      col::destroy_collective_group("objs");
      return failures == 0 ? 0 : 1;
    }
    if (mode == "oom") return run_out_of_memory(world, rank, argv[3]);
    if (mode == "oom-read") {
      int rc = read_out_of_memory(world, rank);
      col::destroy_collective_group("objs");
      return rc;
    }
    if (mode == "msg") {
      int rc = run_messages(world, rank);
      col::destroy_collective_group("objs");
      return rc;
    }
    if (mode == "actors") {
      int rc = run_actor_handles(rank);
      col::destroy_collective_group("objs");
      return rc;
    }
    if (rank == world - 1)
      col::detail::test_hooks().between_phases = [] { _exit(7); };
    col::allgather_object(plan_of(rank), "objs");
    std::fprintf(stderr,
                 "rank %d: allgather_object succeeded without rank %d\n", rank,
                 world - 1);
    return 1;
  } catch (const col::collective_error& e) {
    std::string text = e.what();
    bool expected = mode == "die" && e.code() == col::errc::peer_lost &&
                    text.find("allgather_object") != std::string::npos;
    std::fprintf(stderr, "rank %d: %s\n", rank, text.c_str());
    return expected ? 3 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}
