// Rank, world size and store from launcher environments: the rules one by
// one (a lookup table as the environment), then separate processes started
// with torchrun-style and Slurm-style environments forming a group.
#include <chrono>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>
#include <caf_collective/launch.hpp>

#include "process_support.hpp"
#include "unused_port.hpp"

#include "../support/env_table.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

using env_table::lookup;
using env_table::vars;

col::launch_info read_ok(const vars& table) {
  auto info = col::read_launch_environment(lookup(table));
  if (!info) FAIL(col::render(info.error()));
  return *info;
}

std::string read_error(const vars& table) {
  auto info = col::read_launch_environment(lookup(table));
  REQUIRE_FALSE(info);
  CHECK(col::code_of(info.error()) == col::errc::invalid_argument);
  return col::render(info.error());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("torchrun's variables give rank, size, local rank and the store") {
  auto info = read_ok({{"RANK", "2"},
                       {"WORLD_SIZE", "4"},
                       {"LOCAL_RANK", "1"},
                       {"MASTER_ADDR", "10.0.0.7"},
                       {"MASTER_PORT", "29500"},
                       {"CAF_COLLECTIVE_SECRET", "x"},
                       {"TORCHELASTIC_RUN_ID", "job42"}});
  CHECK(info.launcher == "torchrun");
  CHECK(info.rank == 2);
  CHECK(info.world_size == 4);
  CHECK(info.local_rank == 1);
  CHECK(info.store.kind == col::store_address::kind_t::tcp);
  CHECK(info.store.host == "10.0.0.7");
  CHECK(info.store.port == 29500);
  CHECK(info.store.rank0_serves);
  CHECK(info.store.secret == "x");
  CHECK(info.store.run_id == "torchrun:job42");
}

TEST_CASE("torchrun's agent store on MASTER_PORT moves ours to the next "
          "port") {
  auto info = read_ok({{"RANK", "0"},
                       {"WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", "29500"},
                       {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                       {"CAF_COLLECTIVE_SECRET", "x"}});
  CHECK(info.store.port == 29501);
}

TEST_CASE("Open MPI's, Slurm's and MPICH's variables give rank, size and "
          "local rank") {
  auto mpi = read_ok({{"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"CAF_COLLECTIVE_STORE", "tcp://node1:7000"},
                      {"CAF_COLLECTIVE_SECRET", "x"}});
  CHECK(mpi.launcher == "mpirun");
  CHECK(mpi.rank == 3);
  CHECK(mpi.world_size == 8);
  CHECK(mpi.local_rank == 1);
  CHECK(mpi.store.host == "node1");
  CHECK(mpi.store.port == 7000);
  auto slurm = read_ok({{"SLURM_PROCID", "5"},
                        {"SLURM_NTASKS", "6"},
                        {"SLURM_LOCALID", "0"},
                        {"CAF_COLLECTIVE_STORE", "tcp://[::1]:7001"},
                        {"CAF_COLLECTIVE_SECRET", "x"},
                        {"CAF_COLLECTIVE_STORE_SERVER", "external"}});
  CHECK(slurm.launcher == "srun");
  CHECK(slurm.rank == 5);
  CHECK(slurm.local_rank == 0);
  CHECK(slurm.store.host == "::1");
  CHECK(slurm.store.port == 7001);
  CHECK_FALSE(slurm.store.rank0_serves);
  // MPICH's and Intel MPI's mpiexec (Hydra).
  auto hydra = read_ok({{"PMI_RANK", "2"},
                        {"PMI_SIZE", "4"},
                        {"MPI_LOCALRANKID", "0"},
                        {"CAF_COLLECTIVE_STORE", "tcp://node2:7002"},
                        {"CAF_COLLECTIVE_SECRET", "x"}});
  CHECK(hydra.launcher == "mpiexec");
  CHECK(hydra.rank == 2);
  CHECK(hydra.world_size == 4);
  CHECK(hydra.local_rank == 0);
  CHECK(hydra.store.host == "node2");
  // srun starting an MPICH program sets both: Slurm's variables decide.
  auto both = read_ok({{"SLURM_PROCID", "1"},
                       {"SLURM_NTASKS", "2"},
                       {"PMI_RANK", "1"},
                       {"PMI_SIZE", "2"},
                       {"CAF_COLLECTIVE_STORE", "tcp://node3:7003"},
                       {"CAF_COLLECTIVE_SECRET", "x"}});
  CHECK(both.launcher == "srun");
  // The same with --preserve-env: SLURM_NTASKS stays the job's (4), the
  // step has 2 tasks. Before: taken for mpiexec's, without a local rank.
  auto preserved = read_ok({{"SLURM_JOB_ID", "77"},
                            {"SLURM_STEP_ID", "3"},
                            {"SLURM_PROCID", "1"},
                            {"SLURM_NTASKS", "4"},
                            {"SLURM_STEP_NUM_TASKS", "2"},
                            {"SLURM_LOCALID", "1"},
                            {"PMI_RANK", "1"},
                            {"PMI_SIZE", "2"},
                            {"CAF_COLLECTIVE_STORE", "tcp://node3:7003"},
                            {"CAF_COLLECTIVE_SECRET", "x"}});
  CHECK(preserved.launcher == "srun");
  CHECK(preserved.world_size == 2);
  CHECK(preserved.local_rank == 1);
  // mpiexec run from an sbatch script: every rank inherits the batch step's
  // SLURM_PROCID=0 and SLURM_NTASKS; the innermost launcher, mpiexec, says
  // which rank this is, on every rank alike.
  for (int pmi_rank = 0; pmi_rank < 4; ++pmi_rank) {
    auto inner = read_ok({{"SLURM_PROCID", "0"},
                          {"SLURM_NTASKS", "4"},
                          {"SLURM_NNODES", "1"},
                          {"PMI_RANK", std::to_string(pmi_rank)},
                          {"PMI_SIZE", "4"},
                          {"MPI_LOCALRANKID", std::to_string(pmi_rank)},
                          {"CAF_COLLECTIVE_STORE", "tcp://node3:7003"},
                          {"CAF_COLLECTIVE_SECRET", "x"}});
    CHECK(inner.launcher == "mpiexec");
    CHECK(inner.rank == pmi_rank);
    CHECK(inner.world_size == 4);
  }
}

TEST_CASE("a program an sbatch script starts without srun is refused at once "
          "when the job has several tasks - not rank 0 of them") {
  // The batch step's own variables: SLURM_PROCID=0 and the job's task count,
  // but no srun step (no SLURM_STEP_NUM_TASKS, no step number; Slurm 26.05
  // prints the batch step's number as -5). Before: rank 0 of 4, waiting
  // for three peers nobody starts until the formation's deadline.
  for (auto step : {"", "-5", "4294967291", "4294967290"}) {
    INFO("SLURM_STEP_ID='" << step << "'");
    vars batch{
      {"SLURM_JOB_ID", "4711"}, {"SLURM_PROCID", "0"},
      {"SLURM_LOCALID", "0"},   {"SLURM_NTASKS", "4"},
      {"SLURM_NNODES", "1"},    {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}};
    if (*step != '\0') batch.emplace("SLURM_STEP_ID", step);
    auto err = read_error(batch);
    CHECK(contains(err, "Slurm job 4711 but not as a task of an srun step"));
    CHECK(contains(err, "SLURM_NTASKS=4"));
    CHECK(contains(err, "srun ./program"));
  }
  // salloc -n 4's interactive shell is srun's special step 4294967290 (-6
  // from Slurm 26.05), started with --preserve-env: SLURM_STEP_NUM_TASKS=1
  // but the job's SLURM_NTASKS=4.
  for (auto step : {"4294967290", "-6"}) {
    INFO("SLURM_STEP_ID='" << step << "'");
    auto err = read_error({{"SLURM_JOB_ID", "4711"},
                           {"SLURM_STEP_ID", step},
                           {"SLURM_STEP_NUM_TASKS", "1"},
                           {"SLURM_PROCID", "0"},
                           {"SLURM_NTASKS", "4"},
                           {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
    CHECK(contains(err, "not as a task of an srun step"));
    CHECK(contains(err, "SLURM_NTASKS=4"));
  }
  // A one-task job (or one without --ntasks) that runs its program in the
  // batch script: one process, a group of one.
  for (auto tasks : {"1", ""}) {
    vars one{{"SLURM_JOB_ID", "4711"}, {"SLURM_PROCID", "0"}};
    if (*tasks != '\0') one.emplace("SLURM_NTASKS", tasks);
    auto info = read_ok(one);
    CHECK(info.launcher == "sbatch");
    CHECK(info.rank == 0);
    CHECK(info.world_size == 1);
  }
  // A task of an srun step, as srun starts it: rank and size from Slurm.
  auto task = read_ok({{"SLURM_JOB_ID", "4711"},
                       {"SLURM_STEP_ID", "0"},
                       {"SLURM_STEP_NUM_TASKS", "4"},
                       {"SLURM_PROCID", "2"},
                       {"SLURM_NTASKS", "4"},
                       {"SLURM_LOCALID", "2"},
                       {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(task.launcher == "srun");
  CHECK(task.rank == 2);
  CHECK(task.world_size == 4);
  // `srun -E -n 2` in a job of 4 tasks keeps the job's SLURM_NTASKS: the
  // step's own size decides.
  auto kept = read_ok({{"SLURM_JOB_ID", "4711"},
                       {"SLURM_STEP_ID", "1"},
                       {"SLURM_STEP_NUM_TASKS", "2"},
                       {"SLURM_PROCID", "1"},
                       {"SLURM_NTASKS", "4"},
                       {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(kept.launcher == "srun");
  CHECK(kept.rank == 1);
  CHECK(kept.world_size == 2);
  // mpiexec inside the batch script: Hydra's variables decide, as before.
  auto hydra = read_ok({{"SLURM_JOB_ID", "4711"},
                        {"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "4"},
                        {"PMI_RANK", "3"},
                        {"PMI_SIZE", "4"},
                        {"MPI_LOCALRANKID", "3"},
                        {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(hydra.launcher == "mpiexec");
  CHECK(hydra.rank == 3);
  // A wrapper's RANK/WORLD_SIZE in the batch script: no srun variables to
  // disagree with.
  auto wrapped = read_ok({{"SLURM_JOB_ID", "4711"},
                          {"SLURM_PROCID", "0"},
                          {"SLURM_NTASKS", "2"},
                          {"RANK", "1"},
                          {"WORLD_SIZE", "2"},
                          {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(wrapped.launcher == "torchrun");
  CHECK(wrapped.rank == 1);
}

TEST_CASE("our own variables win over a launcher's") {
  auto info = read_ok({{"CAF_COLLECTIVE_RANK", "1"},
                       {"CAF_COLLECTIVE_WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_RANK", "7"},
                       {"OMPI_COMM_WORLD_SIZE", "16"},
                       {"CAF_COLLECTIVE_STORE", "file:/tmp/somewhere"}});
  CHECK(info.launcher == "caf_collective");
  CHECK(info.rank == 1);
  CHECK(info.world_size == 2);
  CHECK(info.local_rank == -1);
  CHECK(info.store.kind == col::store_address::kind_t::file);
  CHECK(info.store.directory == "/tmp/somewhere");
}

TEST_CASE("RANK and WORLD_SIZE left in the environment do not silently "
          "override mpirun's or srun's rank") {
  // Before: every process of `RANK=0 WORLD_SIZE=1 mpirun -n 3` read rank 0
  // of 1 and formed a group of its own.
  auto err = read_error({{"RANK", "0"},
                         {"WORLD_SIZE", "1"},
                         {"OMPI_COMM_WORLD_RANK", "2"},
                         {"OMPI_COMM_WORLD_SIZE", "4"}});
  CHECK(contains(err, "RANK=0 and WORLD_SIZE=1"));
  CHECK(contains(err, "OMPI_COMM_WORLD_RANK=2 and OMPI_COMM_WORLD_SIZE=4 "
                      "(mpirun)"));
  CHECK(contains(read_error({{"RANK", "1"},
                             {"WORLD_SIZE", "4"},
                             {"SLURM_PROCID", "3"},
                             {"SLURM_NTASKS", "4"}}),
                 "SLURM_PROCID=3 and SLURM_NTASKS=4 (srun)"));
  // Agreeing values (a wrapper that sets RANK=$SLURM_PROCID) are fine.
  auto same = read_ok({{"RANK", "3"},
                       {"WORLD_SIZE", "4"},
                       {"SLURM_PROCID", "3"},
                       {"SLURM_NTASKS", "4"},
                       {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(same.rank == 3);
  // Only the launcher that would decide counts: a wrapper's RANK=$PMI_RANK
  // under mpiexec in an sbatch script, where every rank inherited the
  // batch step's SLURM_PROCID=0.
  auto hydra = read_ok({{"RANK", "1"},
                        {"WORLD_SIZE", "2"},
                        {"PMI_RANK", "1"},
                        {"PMI_SIZE", "2"},
                        {"MPI_LOCALRANKID", "1"},
                        {"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "1"},
                        {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(hydra.rank == 1);
  // torchrun inside srun (one agent per node): torchrun's workers are
  // marked, and their RANK is the one that counts.
  auto nested = read_ok({{"RANK", "5"},
                         {"WORLD_SIZE", "8"},
                         {"LOCAL_WORLD_SIZE", "4"},
                         {"TORCHELASTIC_RUN_ID", "job"},
                         {"SLURM_PROCID", "1"},
                         {"SLURM_NTASKS", "2"},
                         {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(nested.launcher == "torchrun");
  CHECK(nested.rank == 5);
  CHECK(nested.world_size == 8);
}

TEST_CASE("rank 0 serves the store for a host name that resolves to "
          "loopback on every interface") {
  // Debian's /etc/hosts maps the machine's own name to 127.0.1.1: a server
  // bound to what MASTER_ADDR=<that name> resolves to here shut out the
  // other hosts. Here: the machine's name, if it resolves to loopback, and
  // a client that comes through another address of this machine.
  char name[256] = {};
  REQUIRE(gethostname(name, sizeof(name) - 1) == 0);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  bool loopback_name = getaddrinfo(name, nullptr, &hints, &resolved) == 0;
  if (loopback_name) {
    auto* in = reinterpret_cast<sockaddr_in*>(resolved->ai_addr);
    loopback_name = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    freeaddrinfo(resolved);
  }
  std::string other_address;
  ifaddrs* list = nullptr;
  REQUIRE(getifaddrs(&list) == 0);
  for (auto* i = list; i != nullptr && other_address.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    auto* in = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    if (std::string{text}.rfind("127.", 0) != 0) other_address = text;
  }
  freeifaddrs(list);
  if (!loopback_name || other_address.empty()) {
    MESSAGE("skipped: the machine's name does not resolve to loopback, or "
            "it has no other IPv4 address");
    return;
  }
  // A port free on every interface (taken back at once).
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  REQUIRE(::bind(probe, reinterpret_cast<sockaddr*>(&any), sizeof(any)) == 0);
  socklen_t len = sizeof(any);
  ::getsockname(probe, reinterpret_cast<sockaddr*>(&any), &len);
  ::close(probe);
  col::store_address addr;
  addr.kind = col::store_address::kind_t::tcp;
  addr.host = name;
  addr.port = ntohs(any.sin_port);
  addr.secret = "s";
  addr.run_id = "interfaces";
  addr.origin = "the test";
  auto served = col::open_store(addr, 0, 5s);
  REQUIRE(served);
  col::tcp_store_options from_elsewhere;
  from_elsewhere.host = other_address;
  from_elsewhere.port = addr.port;
  from_elsewhere.secret = "s";
  from_elsewhere.run_id = "interfaces";
  from_elsewhere.connect_timeout = 3s;
  auto client = col::make_tcp_store(from_elsewhere);
  CHECK_FALSE(client->set("k", {'v'}));
  auto got = (*served)->get("k", 3s);
  REQUIRE(got);
  CHECK(*got == std::vector<char>{'v'});
}

TEST_CASE("a missing or malformed variable is named in the error") {
  CHECK(contains(read_error({}), "no launcher told this process its rank"));
  CHECK(contains(read_error({{"RANK", "0"}}),
                 "RANK is set (torchrun) but WORLD_SIZE is not"));
  CHECK(contains(read_error({{"SLURM_PROCID", "0"}}),
                 "SLURM_PROCID is set (srun) but SLURM_NTASKS is not"));
  CHECK(contains(read_error({{"RANK", "one"}, {"WORLD_SIZE", "2"}}),
                 "RANK='one' is not a non-negative integer"));
  CHECK(contains(read_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}}),
                 "do not describe a rank of a group"));
  CHECK(contains(
    read_error(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}}),
    "MASTER_ADDR is set but MASTER_PORT is not"));
  CHECK(contains(read_error({{"RANK", "0"},
                             {"WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "127.0.0.1"},
                             {"MASTER_PORT", "99999"}}),
                 "MASTER_PORT='99999' is not a TCP port"));
  CHECK(contains(read_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}}),
                 "has no rendezvous address"));
  CHECK(contains(read_error({{"RANK", "0"},
                             {"WORLD_SIZE", "2"},
                             {"CAF_COLLECTIVE_STORE", "redis://x"}}),
                 "is not file:<dir> or tcp://host:port"));
  CHECK(contains(read_error({{"RANK", "0"},
                             {"WORLD_SIZE", "2"},
                             {"CAF_COLLECTIVE_STORE", "tcp://h:1"},
                             {"CAF_COLLECTIVE_STORE_SERVER", "me"}}),
                 "CAF_COLLECTIVE_STORE_SERVER='me'"));
}

TEST_CASE("a TCP store without any secret is refused before connecting") {
  auto text = read_error({{"RANK", "0"},
                          {"WORLD_SIZE", "2"},
                          {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", "29500"}});
  CHECK(contains(text, "needs a shared secret: set CAF_COLLECTIVE_SECRET"));
}

TEST_CASE("without a secret or address, one host's mpirun job derives both "
          "from its job id") {
  vars env{{"OMPI_COMM_WORLD_RANK", "1"},
           {"OMPI_COMM_WORLD_SIZE", "4"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
           {"OMPI_MCA_ess_base_jobid", "2016608257"}};
  auto a = read_ok(env);
  CHECK(a.store.kind == col::store_address::kind_t::tcp);
  CHECK(a.store.host == "127.0.0.1");
  CHECK(a.store.port >= 20000);
  CHECK(a.store.port < 30000);
  CHECK(a.store.secret == "job:mpirun:2016608257");
  // Every rank of the job derives the same address.
  env["OMPI_COMM_WORLD_RANK"] = "3";
  CHECK(read_ok(env).store.port == a.store.port);
  // Ranks on several hosts cannot: they need an address.
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  CHECK(contains(read_error(env), "has no rendezvous address"));
  // Open MPI 5 sets no OMPI_MCA_ess_base_jobid: its PMIx namespace names the
  // job (before: "has no rendezvous address").
  vars five{{"OMPI_COMM_WORLD_RANK", "1"},
            {"OMPI_COMM_WORLD_SIZE", "4"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
            {"PMIX_NAMESPACE", "prterun-vm-1234@1"}};
  auto b = read_ok(five);
  CHECK(b.store.kind == col::store_address::kind_t::tcp);
  CHECK(b.store.host == "127.0.0.1");
  CHECK(b.store.secret == "job:pmix:prterun-vm-1234@1");
  five["OMPI_COMM_WORLD_RANK"] = "0";
  CHECK(read_ok(five).store.port == b.store.port);
}

TEST_CASE("one rank needs no rendezvous address") {
  auto info = read_ok({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  CHECK(info.store.kind == col::store_address::kind_t::none);
  // Nor a secret for an address it will never use (torch's single-process
  // setups export MASTER_ADDR and MASTER_PORT all the same).
  auto alone = read_ok({{"RANK", "0"},
                        {"WORLD_SIZE", "1"},
                        {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", "29500"}});
  CHECK(alone.store.kind == col::store_address::kind_t::none);
}

namespace {

/// An environment variable set for the scope of a test case.
struct scoped_var {
  const char* name;
  scoped_var(const char* n, const std::string& value) : name(n) {
    ::setenv(n, value.c_str(), 1);
  }
  ~scoped_var() { ::unsetenv(name); }
};

} // namespace

TEST_CASE("a group of one forms without a secret while MASTER_ADDR and "
          "MASTER_PORT are set") {
  scoped_var addr{"MASTER_ADDR", "127.0.0.1"};
  scoped_var port{"MASTER_PORT", "29500"};
  col::member_scope scope;
  REQUIRE_NOTHROW(col::init_collective_group(1, 0, "gloo", "alone"));
  std::vector<float> x{1.5f, 2.5f};
  col::allreduce(col::view_of(x), "alone");
  CHECK(x[1] == 2.5f);
  col::destroy_collective_group("alone");
}

TEST_CASE("a launch of one rank still forms its larger groups over the "
          "store its variables name") {
  test::temp_dir dir;
  scoped_var rank{"RANK", "0"};
  scoped_var world{"WORLD_SIZE", "1"};
  scoped_var store{"CAF_COLLECTIVE_STORE", "file:" + dir.path.string()};
  std::vector<std::thread> members;
  std::vector<std::string> failures(2);
  for (int r = 0; r < 2; ++r)
    members.emplace_back([&, r] {
      try {
        col::member_scope scope;
        col::init_collective_group(2, r, "gloo", "pair");
        col::destroy_collective_group("pair");
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : members)
    t.join();
  CHECK(failures == std::vector<std::string>(2));
  // The group met in the directory, not in an in-process store.
  CHECK_FALSE(std::filesystem::is_empty(dir.path));
}

// -- separate processes
// ----------------------------------------------------------

namespace {

const char* launcher_vars[] = {
  "CAF_COLLECTIVE_RANK",
  "CAF_COLLECTIVE_WORLD_SIZE",
  "CAF_COLLECTIVE_LOCAL_RANK",
  "CAF_COLLECTIVE_STORE",
  "CAF_COLLECTIVE_SECRET",
  "CAF_COLLECTIVE_RUN_ID",
  "CAF_COLLECTIVE_STORE_SERVER",
  "RANK",
  "WORLD_SIZE",
  "LOCAL_RANK",
  "MASTER_ADDR",
  "MASTER_PORT",
  "TORCHELASTIC_RUN_ID",
  "TORCHELASTIC_USE_AGENT_STORE",
  "OMPI_COMM_WORLD_RANK",
  "OMPI_COMM_WORLD_SIZE",
  "OMPI_COMM_WORLD_LOCAL_RANK",
  "OMPI_COMM_WORLD_LOCAL_SIZE",
  "OMPI_MCA_ess_base_jobid",
  "PMIX_NAMESPACE",
  "SLURM_PROCID",
  "SLURM_NTASKS",
  "SLURM_LOCALID",
  "SLURM_NNODES",
  "SLURM_JOB_ID",
  "SLURM_STEP_ID",
  "PMI_RANK",
  "PMI_SIZE",
  "MPI_LOCALRANKID",
};

/// Starts the rank process with this test's environment minus every
/// launcher variable (the test may itself run under a launcher) plus `set`.
pid_t spawn_rank(const vars& set) {
  std::vector<std::string> entries;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    auto name = entry.substr(0, entry.find('='));
    bool dropped = false;
    for (const char* var : launcher_vars)
      dropped = dropped || name == var;
    if (!dropped) entries.push_back(entry);
  }
  for (const auto& [name, value] : set)
    entries.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& e : entries)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = CAF_COLLECTIVE_ENV_RANK_PROCESS;
  char* argv[] = {exe.data(), nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) ==
          0);
  return pid;
}

void run_ranks(int world, const std::function<vars(int)>& env_of) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r)
    pids.push_back(spawn_rank(env_of(r)));
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " of " << world);
    CHECK(test::wait_process(pids[r], 90s) == 0);
  }
}

} // namespace

TEST_CASE("4 processes with torchrun's variables form a group, rank 0 "
          "serves the store") {
  auto port = std::to_string(unused_port());
  run_ranks(4, [&](int r) {
    return vars{{"RANK", std::to_string(r)},
                {"WORLD_SIZE", "4"},
                {"LOCAL_RANK", std::to_string(r)},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", port},
                {"CAF_COLLECTIVE_SECRET", "torch-style-secret"}};
  });
}

TEST_CASE("3 processes with Slurm's variables on one node form a group "
          "without an address or a secret") {
  std::random_device rd;
  auto job = std::to_string(rd() % 1000000);
  run_ranks(3, [&](int r) {
    return vars{{"SLURM_PROCID", std::to_string(r)},
                {"SLURM_NTASKS", "3"},
                {"SLURM_LOCALID", std::to_string(r)},
                {"SLURM_NNODES", "1"},
                {"SLURM_JOB_ID", job},
                {"SLURM_STEP_ID", "0"}};
  });
}

TEST_CASE("a rank with a wrong secret is refused while the others' run is "
          "unaffected") {
  auto port = unused_port();
  auto server = col::tcp_store_server::start("127.0.0.1", port, "right");
  REQUIRE(server);
  auto env_of = [&](int r, const std::string& secret) {
    return vars{
      {"CAF_COLLECTIVE_RANK", std::to_string(r)},
      {"CAF_COLLECTIVE_WORLD_SIZE", "2"},
      {"CAF_COLLECTIVE_LOCAL_RANK", std::to_string(r)},
      {"CAF_COLLECTIVE_STORE", "tcp://127.0.0.1:" + std::to_string(port)},
      {"CAF_COLLECTIVE_STORE_SERVER", "external"},
      {"CAF_COLLECTIVE_RUN_ID", "run-1"},
      {"CAF_COLLECTIVE_SECRET", secret}};
  };
  auto rank0 = spawn_rank(env_of(0, "right"));
  auto intruder = spawn_rank(env_of(1, "wrong"));
  auto rank1 = spawn_rank(env_of(1, "right"));
  CHECK(test::wait_process(intruder, 60s) == 1);
  CHECK(test::wait_process(rank0, 90s) == 0);
  CHECK(test::wait_process(rank1, 90s) == 0);
  CHECK((*server)->refused_clients() == 1);
}

TEST_CASE("4 processes as two hosts on 127.0.0.2 and 127.0.0.3 meet over TCP "
          "alone") {
  // No shared directory: rank 0 serves the store on the first "host"; each
  // rank's Gloo device binds its host's address.
  auto port = std::to_string(unused_port());
  run_ranks(4, [&](int r) {
    return vars{{"RANK", std::to_string(r)},
                {"WORLD_SIZE", "4"},
                {"LOCAL_RANK", std::to_string(r % 2)},
                {"MASTER_ADDR", "127.0.0.2"},
                {"MASTER_PORT", port},
                {"CAF_COLLECTIVE_SECRET", "two-hosts"},
                {"CAF_COLLECTIVE_HOSTNAME", r < 2 ? "127.0.0.2" : "127.0.0.3"},
                {"CAF_COLLECTIVE_TEST_LOCAL_RANKS", "0,1,0,1"}};
  });
}

TEST_CASE("a local rank not below the world size is refused naming both") {
  // Before: CAF_COLLECTIVE_LOCAL_RANK=9 in a world of 2 was taken as it
  // stood (a local rank picks the GPU and the host's share of the work).
  auto err = read_error({{"CAF_COLLECTIVE_RANK", "1"},
                         {"CAF_COLLECTIVE_WORLD_SIZE", "2"},
                         {"CAF_COLLECTIVE_LOCAL_RANK", "9"},
                         {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(contains(err, "CAF_COLLECTIVE_LOCAL_RANK=9 is not below "
                      "CAF_COLLECTIVE_WORLD_SIZE=2"));
  auto fine = read_ok({{"CAF_COLLECTIVE_RANK", "1"},
                       {"CAF_COLLECTIVE_WORLD_SIZE", "2"},
                       {"CAF_COLLECTIVE_LOCAL_RANK", "1"},
                       {"CAF_COLLECTIVE_STORE", "file:/tmp/x"}});
  CHECK(fine.local_rank == 1);
}
