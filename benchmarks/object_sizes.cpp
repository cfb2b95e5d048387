// caf_collective_object_sizes: what gather_object and scatter_object cost
// when one rank's object is far larger than the others' (a checkpoint shard
// among small status records): seconds per op on rank 0 and the process's
// peak resident memory. Ranks are threads of this process; each run forms
// one group, so run one op per process to read its peak memory alone.
//
// Rank world-1's object (or, for scatter, the root's part for it) is a
// string of --wide-mib MiB; every other object is 64 bytes. Rank 0 is the
// root. Every result is checked.
//
// usage: caf_collective_object_sizes --op gather|scatter [--backend B]
//                                    [--ranks N] [--wide-mib M] [--rounds R]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include <caf_collective/all.hpp>
#include <caf_collective/object_collectives.hpp>

namespace col = caf_collective;

namespace {

struct settings {
  std::string op;
  std::string backend = "gloo";
  int ranks = 4;
  size_t wide_mib = 64;
  int rounds = 3;
};

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    std::string value = argv[i + 1];
    if (flag == "--op")
      s.op = value;
    else if (flag == "--backend")
      s.backend = value;
    else if (flag == "--ranks")
      s.ranks = std::stoi(value);
    else if (flag == "--wide-mib")
      s.wide_mib = std::stoul(value);
    else if (flag == "--rounds")
      s.rounds = std::stoi(value);
    else
      throw std::invalid_argument("unknown flag " + flag);
  }
  if ((s.op != "gather" && s.op != "scatter") || s.ranks < 2 || s.rounds < 1)
    throw std::invalid_argument(
      "usage: caf_collective_object_sizes --op gather|scatter [--backend B] "
      "[--ranks N>=2] [--wide-mib M] [--rounds R>=1]");
  return s;
}

// The object of rank `r`: 64 bytes, or `wide` bytes for the last rank.
std::string object_of(int r, const settings& s) {
  auto size = r == s.ranks - 1 ? s.wide_mib << 20 : size_t{64};
  return std::string(size, static_cast<char>('a' + r % 26));
}

// Runs the ops on rank `rank`; returns seconds per op.
double run_rank(int rank, const settings& s) {
  col::member_scope scope;
  col::init_options init;
  init.timeout = std::chrono::seconds{120};
  col::init_collective_group(s.ranks, rank, s.backend, "objects", init);
  col::object_options opts;
  opts.timeout = std::chrono::seconds{120};
  auto mine = object_of(rank, s);
  std::vector<std::string> parts;
  if (rank == 0)
    for (int r = 0; r < s.ranks; ++r)
      parts.push_back(object_of(r, s));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < s.rounds; ++i) {
    if (s.op == "gather") {
      auto got = col::gather_object(mine, 0, "objects", opts);
      // Against the objects built before the loop: a fresh wide object per
      // round would be timed (and counted in the peak) with the op.
      if (rank == 0)
        for (int r = 0; r < s.ranks; ++r)
          if (got[static_cast<size_t>(r)] != parts[static_cast<size_t>(r)])
            throw std::runtime_error("gathered object " + std::to_string(r) +
                                     " differs");
    } else {
      if (col::scatter_object(parts, 0, "objects", opts) != mine)
        throw std::runtime_error("rank " + std::to_string(rank) +
                                 " got the wrong part");
    }
  }
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  col::destroy_collective_group("objects");
  return took.count() / s.rounds;
}

} // namespace

int main(int argc, char** argv) {
  try {
    auto s = parse(argc, argv);
    std::vector<double> seconds(static_cast<size_t>(s.ranks));
    std::vector<std::string> failures(static_cast<size_t>(s.ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < s.ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          seconds[static_cast<size_t>(r)] = run_rank(r, s);
        } catch (const std::exception& e) {
          failures[static_cast<size_t>(r)] = e.what();
        }
      });
    for (auto& t : threads)
      t.join();
    for (int r = 0; r < s.ranks; ++r)
      if (!failures[static_cast<size_t>(r)].empty()) {
        std::fprintf(stderr, "rank %d: %s\n", r,
                     failures[static_cast<size_t>(r)].c_str());
        return 1;
      }
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    std::printf("%s_object on %s, %d ranks, one object of %zu MiB among "
                "64 B ones: %.1f us per op (rank 0), peak RSS %ld MiB\n",
                s.op.c_str(), s.backend.c_str(), s.ranks, s.wide_mib,
                seconds[0] * 1e6, usage.ru_maxrss / 1024);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
