// A rank program for the launcher tests, started by caf_collective_run.
//
//   every-op          forms a group from the environment, runs every
//                     operation, checks each result, prints
//                     "rank R: every op ok" (exit 0) or the first wrong
//                     result (exit 1)
//   fail <r> <code> <dir>
//                     writes its pid to <dir>/pid.<rank>; rank <r> exits
//                     with <code> once every rank wrote its pid, the
//                     others wait (up to 120 s) to be stopped
//   die <r> <dir>     like fail, but rank <r> kills itself with SIGKILL
//   trap <dir>        writes its pid to <dir>/pid.<rank>, waits for
//                     SIGTERM or SIGINT, prints "rank R got signal S"
//                     and exits 3
//   checkpoint <dir>  writes its pid to <dir>/pid.<rank>; on SIGUSR1
//                     prints "rank R got SIGUSR1" and goes on; on SIGTERM
//                     or SIGINT prints "rank R checkpointing", takes 1 s,
//                     prints "rank R checkpoint written" and exits 3
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <unistd.h>
#include <vector>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>

namespace col = caf_collective;

namespace {

constexpr const char* g = "launched";

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("wrong result: %s\n", what.c_str());
    ++failures;
  }
}

int rank_from_env() {
  const char* r = std::getenv("CAF_COLLECTIVE_RANK");
  return r != nullptr ? std::atoi(r) : -1;
}

// Written to a temporary name and renamed: a pid file that exists is
// complete. Written in place, a rank stopped between creating the file and
// flushing it left an empty file that every other rank took as "up", and
// the test never learnt that rank's pid.
void write_pid(const std::string& dir) {
  auto path = dir + "/pid." + std::to_string(rank_from_env());
  {
    std::ofstream out{path + ".tmp"};
    out << ::getpid();
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

void wait_for_every_pid(const std::string& dir) {
  const char* w = std::getenv("CAF_COLLECTIVE_WORLD_SIZE");
  int world = w != nullptr ? std::atoi(w) : 1;
  for (int i = 0; i < 6000; ++i) {
    int present = 0;
    for (int r = 0; r < world; ++r)
      present += std::ifstream{dir + "/pid." + std::to_string(r)}.good();
    if (present == world) return;
    ::usleep(10000);
  }
}

int every_op() {
  col::init_collective_group_from_env("gloo", g);
  int r = col::get_rank(g);
  int w = col::get_collective_group_size(g);
  using vec = std::vector<int64_t>;
  if (w > 1) { // send/recv around a ring
    vec out{int64_t{r} * 10};
    vec in{-1};
    auto sent = col::send_async(col::view_of(out), (r + 1) % w, g);
    col::recv(col::view_of(in), (r + w - 1) % w, g);
    col::throw_if(sent.wait());
    expect(in[0] == int64_t{(r + w - 1) % w} * 10, "send/recv");
  }
  vec b(5, r == w - 1 ? 7 : 0);
  col::broadcast(col::view_of(b), w - 1, g);
  expect(b == vec(5, 7), "broadcast");
  vec red{r + 1};
  col::reduce(col::view_of(red), 0, g);
  if (r == 0) expect(red[0] == int64_t{w} * (w + 1) / 2, "reduce");
  vec mx{r};
  col::allreduce_options max_op;
  max_op.op = col::reduce_op::max;
  col::allreduce(col::view_of(mx), g, max_op);
  expect(mx[0] == w - 1, "allreduce max");
  vec mine{r, 2 * r};
  vec all(2 * size_t(w), -1);
  col::allgather(col::view_of(mine), col::view_of(all), g);
  for (int j = 0; j < w; ++j)
    expect(all[2 * j] == j && all[2 * j + 1] == 2 * j, "allgather");
  vec some(size_t(r) + 1, r);
  vec every(size_t(w) * (w + 1) / 2, -1);
  col::allgatherv_options agv;
  for (int j = 0; j < w; ++j)
    agv.counts.push_back(size_t(j) + 1);
  col::allgatherv(col::view_of(some), col::view_of(every), g, agv);
  for (int j = 0, pos = 0; j < w; pos += j + 1, ++j)
    for (int k = 0; k <= j; ++k)
      expect(every[pos + k] == j, "allgatherv");
  int groot = 1 % w;
  vec one{r};
  vec gathered(size_t(w), -1);
  col::gather_options go;
  go.root = groot;
  col::gather(col::view_of(one), col::view_of(gathered), g, go);
  if (r == groot)
    for (int j = 0; j < w; ++j)
      expect(gathered[j] == j, "gather");
  vec source(2 * size_t(w));
  std::iota(source.begin(), source.end(), 0);
  vec piece(2, -1);
  col::scatter(col::view_of(source), col::view_of(piece), g);
  expect(piece == vec{2 * r, 2 * r + 1}, "scatter");
  vec contrib(3 * size_t(w), r + 1);
  vec block(3, -1);
  col::reduce_scatter(col::view_of(contrib), col::view_of(block), g);
  expect(block == vec(3, int64_t{w} * (w + 1) / 2), "reduce_scatter");
  vec to_each(static_cast<size_t>(w));
  for (int j = 0; j < w; ++j)
    to_each[j] = r * 100 + j;
  vec from_each(size_t(w), -1);
  col::alltoall(col::view_of(to_each), col::view_of(from_each), g);
  for (int j = 0; j < w; ++j)
    expect(from_each[j] == j * 100 + r, "alltoall");
  col::alltoallv_options av;
  vec sendv;
  for (int j = 0; j < w; ++j) {
    av.send_counts.push_back(size_t(j) + 1);
    av.recv_counts.push_back(size_t(r) + 1);
    sendv.insert(sendv.end(), size_t(j) + 1, r * 100 + j);
  }
  vec recvv(size_t(w) * (r + 1), -1);
  col::alltoallv(col::view_of(sendv), col::view_of(recvv), g, av);
  for (int j = 0; j < w; ++j)
    for (int k = 0; k <= r; ++k)
      expect(recvv[size_t(j) * (r + 1) + k] == j * 100 + r, "alltoallv");
  col::barrier(g);
  col::destroy_collective_group(g);
  if (failures > 0) return 1;
  std::printf("rank %d: every op ok\n", r);
  return 0;
}

std::atomic<int> caught{0};
std::atomic<int> messages{0};

int checkpoint(const std::string& dir) {
  std::signal(SIGUSR1, [](int) { ++messages; });
  for (int sig : {SIGTERM, SIGINT})
    std::signal(sig, [](int s) { caught = s; });
  write_pid(dir);
  int told = 0;
  for (int i = 0; i < 2400 && caught == 0; ++i) {
    for (; told < messages; ++told)
      std::printf("rank %d got SIGUSR1\n", rank_from_env());
    std::fflush(stdout);
    ::usleep(50000);
  }
  std::printf("rank %d checkpointing\n", rank_from_env());
  std::fflush(stdout);
  ::sleep(1); // a second stop signal meanwhile must not cut this short
  std::printf("rank %d checkpoint written\n", rank_from_env());
  return 3;
}

} // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "every-op") return every_op();
  } catch (const col::collective_error& ex) {
    std::printf("error: %s\n", ex.what());
    return 1;
  }
  if ((mode == "fail" && argc == 5) || (mode == "die" && argc == 4)) {
    write_pid(argv[argc - 1]);
    if (rank_from_env() == std::atoi(argv[2])) {
      // Fail only once every rank is up, so the test knows all their pids.
      wait_for_every_pid(argv[argc - 1]);
      std::printf("rank %d fails now\n", rank_from_env());
      std::fflush(stdout);
      if (mode == "die") std::raise(SIGKILL);
      return std::atoi(argv[3]);
    }
    for (int i = 0; i < 1200; ++i)
      ::usleep(100000);
    return 0;
  }
  if (mode == "checkpoint" && argc == 3) return checkpoint(argv[2]);
  if (mode == "trap" && argc == 3) {
    for (int sig : {SIGTERM, SIGINT})
      std::signal(sig, [](int s) { caught = s; });
    write_pid(argv[2]);
    for (int i = 0; i < 1200 && caught == 0; ++i)
      ::usleep(100000);
    std::printf("rank %d got signal %d\n", rank_from_env(), caught.load());
    return 3;
  }
  std::fprintf(stderr, "usage: see the comment at the top of %s\n", __FILE__);
  return 2;
}
