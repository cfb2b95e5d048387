// Reads what launchers put in the environment. Each launcher names rank and
// world size its own way; the first launcher whose rank variable is set
// decides, and its world size must be set too (mixing one launcher's rank
// with another's size would silently form the wrong group).
#include "caf_collective/launch.hpp"

#include <array>
#include <cstdlib>
#include <functional>
#include <string_view>

#include "caf_collective/error.hpp"
#include "vocabulary/parse_number.hpp"

namespace caf_collective {

namespace {

struct launcher_vars {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
};

// In order of precedence: our own launcher's variables first, so a program
// started by caf_collective_run inside an mpirun or Slurm job follows it.
// MPICH's and Intel MPI's mpiexec (Hydra) come last: srun sets PMI_RANK
// too when it starts an MPICH program, and its own variables say more.
constexpr std::array<launcher_vars, 5> launchers{{
  {"caf_collective", "CAF_COLLECTIVE_RANK", "CAF_COLLECTIVE_WORLD_SIZE",
   "CAF_COLLECTIVE_LOCAL_RANK"},
  {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
  {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
   "OMPI_COMM_WORLD_LOCAL_RANK"},
  {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  {"mpiexec", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
}};

constexpr size_t torchrun_index = 1;
constexpr size_t srun_index = 3;
constexpr size_t mpiexec_index = 4;
static_assert(std::string_view{launchers[torchrun_index].name} == "torchrun");
static_assert(std::string_view{launchers[srun_index].name} == "srun");
static_assert(std::string_view{launchers[mpiexec_index].name} == "mpiexec");

caf::error malformed(const char* var, const std::string& value,
                     const std::string& expected) {
  return make_error(errc::invalid_argument,
                    std::string{var} + "='" + value + "' is not " + expected);
}

std::string value_of(const env_lookup& env, const char* var) {
  const char* v = env(var);
  return v != nullptr ? std::string{v} : std::string{};
}

caf::expected<int> number(const env_lookup& env, const char* var) {
  auto text = value_of(env, var);
  if (auto result = detail::parse_non_negative<int>(text)) return *result;
  return malformed(var, text, "a non-negative integer");
}

caf::expected<uint16_t> port_number(const env_lookup& env, const char* var) {
  auto n = number(env, var);
  if (!n) return n.error();
  if (*n < 1 || *n > 65535)
    return malformed(var, value_of(env, var), "a TCP port (1-65535)");
  return static_cast<uint16_t>(*n);
}

// The launcher's name for the job ("mpirun job 2016608257"), or empty. It
// names the run when nothing else does, and stands in for a secret nobody
// set (see derive_secret).
std::pair<std::string, std::string> job_identity(const env_lookup& env) {
  if (auto id = value_of(env, "TORCHELASTIC_RUN_ID"); !id.empty())
    return {"torchrun", id};
  if (auto id = value_of(env, "OMPI_MCA_ess_base_jobid"); !id.empty())
    return {"mpirun", id};
  if (auto id = value_of(env, "PMIX_NAMESPACE"); !id.empty())
    return {"pmix", id};
  if (auto id = value_of(env, "SLURM_JOB_ID"); !id.empty())
    return {"srun", id + "." + value_of(env, "SLURM_STEP_ID")};
  return {};
}

// "tcp://host:port" or "tcp://[v6 host]:port".
caf::error parse_tcp(const std::string& spec, store_address& out) {
  auto rest = spec.substr(6);
  std::string host;
  std::string port;
  if (!rest.empty() && rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() ||
        rest[close + 1] != ':')
      return malformed("CAF_COLLECTIVE_STORE", spec, "tcp://host:port");
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    auto colon = rest.rfind(':');
    if (colon == std::string::npos)
      return malformed("CAF_COLLECTIVE_STORE", spec, "tcp://host:port");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  auto lookup = [&](const char*) { return port.c_str(); };
  auto n = port_number(lookup, "the port in CAF_COLLECTIVE_STORE");
  if (host.empty() || !n)
    return malformed("CAF_COLLECTIVE_STORE", spec, "tcp://host:port");
  out.host = std::move(host);
  out.port = *n;
  return {};
}

// With every rank on one host and no address given, mpirun and srun jobs
// meet at 127.0.0.1 on a port derived from the job id, so a program runs
// unchanged under `mpirun -n 4`. Ports 20000-29999 lie below Linux's
// ephemeral range.
bool single_host_default(const env_lookup& env, const std::string& launcher,
                         store_address& out) {
  std::string job;
  if (launcher == "mpirun" && value_of(env, "OMPI_COMM_WORLD_LOCAL_SIZE") ==
                                value_of(env, "OMPI_COMM_WORLD_SIZE")) {
    job = value_of(env, "OMPI_MCA_ess_base_jobid");
    // Open MPI 5 (PRRTE) names the job by its PMIx namespace instead.
    if (job.empty()) job = value_of(env, "PMIX_NAMESPACE");
  } else if (launcher == "srun" && value_of(env, "SLURM_NNODES") == "1")
    job = value_of(env, "SLURM_JOB_ID") + "." + value_of(env, "SLURM_STEP_ID");
  if (job.empty()) return false;
  out.kind = store_address::kind_t::tcp;
  out.host = "127.0.0.1";
  out.port =
    static_cast<uint16_t>(20000 + std::hash<std::string>{}(job) % 10000);
  out.origin = "the " + launcher + " job id (every rank on this host)";
  return true;
}

caf::error fill_tcp_identity(const env_lookup& env, store_address& out) {
  auto server = value_of(env, "CAF_COLLECTIVE_STORE_SERVER");
  if (server.empty() || server == "rank0")
    out.rank0_serves = true;
  else if (server == "external")
    out.rank0_serves = false;
  else
    return malformed("CAF_COLLECTIVE_STORE_SERVER", server,
                     "'rank0' or 'external'");
  auto [launcher, job] = job_identity(env);
  out.secret = value_of(env, "CAF_COLLECTIVE_SECRET");
  if (out.secret.empty() && !job.empty())
    // Weak: a job id can be guessed. Every rank of the job agrees on it
    // without being told, which is what lets a program run unchanged under
    // mpirun, srun or torchrun; docs/config.md says to set a real secret.
    out.secret = "job:" + launcher + ":" + job;
  if (out.secret.empty())
    return make_error(errc::invalid_argument,
                      "the TCP store at " + out.host + ":" +
                        std::to_string(out.port) + " (from " + out.origin +
                        ") needs a shared secret: set CAF_COLLECTIVE_SECRET "
                        "to the same value in every rank "
                        "(caf_collective_run sets it)");
  out.run_id = value_of(env, "CAF_COLLECTIVE_RUN_ID");
  if (out.run_id.empty())
    out.run_id = job.empty() ? "default" : launcher + ":" + job;
  return {};
}

// Whether `id` is the number of a step srun started: Slurm numbers its
// special steps (the batch script's, the interactive shell's) from
// 0xfffffff0 up, and newer versions print them as negative numbers.
bool is_srun_step_id(const std::string& id) {
  auto n = detail::parse_non_negative<uint64_t>(id);
  return n && *n < 0xfffffff0u;
}

// Whether this process is Slurm's batch script (or a program it started
// without srun, or one run from salloc's interactive shell) rather than a
// task of an srun step. The batch step sets SLURM_PROCID=0 and, with
// --ntasks, the job's SLURM_NTASKS: read as srun's, they made a program run
// directly in an sbatch script wait as rank 0 of N for peers nobody starts.
// srun gives every task of a step its step number (is_srun_step_id); the
// batch step has none before Slurm 26.05. Without any step number, srun's
// SLURM_STEP_NUM_TASKS still marks a task.
bool slurm_batch_step(const env_lookup& env) {
  if (env("SLURM_JOB_ID") == nullptr) return false;
  for (auto var : {"SLURM_STEP_ID", "SLURM_STEPID"})
    if (env(var) != nullptr) return !is_srun_step_id(value_of(env, var));
  return env("SLURM_STEP_NUM_TASKS") == nullptr;
}

// The first launcher from row `first` on whose rank variable is set.
// Slurm's batch step launched nothing: its variables do not count.
const launcher_vars* pick(const env_lookup& env, size_t first) {
  const launcher_vars* found = nullptr;
  bool batch_step = slurm_batch_step(env);
  for (size_t i = first; i < launchers.size() && found == nullptr; ++i)
    if (env(launchers[i].rank) != nullptr && !(i == srun_index && batch_step))
      found = &launchers[i];
  // srun that starts an MPICH program sets PMI_RANK equal to SLURM_PROCID,
  // and not MPI_LOCALRANKID (Hydra's own). mpiexec run inside a Slurm
  // allocation (an sbatch script) sets both PMI_RANK and MPI_LOCALRANKID,
  // and every rank inherited the batch step's SLURM_PROCID: the innermost
  // launcher, mpiexec, knows the rank. Every rank decides alike (rank 0's
  // PMI_RANK equals the inherited SLURM_PROCID=0).
  // srun's size is its step's (SLURM_STEP_NUM_TASKS where set): under
  // --preserve-env SLURM_NTASKS stays the job's, and a task was taken for
  // mpiexec's.
  const auto& srun = launchers[srun_index];
  const auto& hydra = launchers[mpiexec_index];
  const char* srun_size =
    env("SLURM_STEP_NUM_TASKS") != nullptr ? "SLURM_STEP_NUM_TASKS" : srun.size;
  if (found == &srun && env(hydra.rank) != nullptr &&
      (env(hydra.local_rank) != nullptr ||
       value_of(env, hydra.rank) != value_of(env, srun.rank) ||
       value_of(env, hydra.size) != value_of(env, srun_size)))
    found = &hydra;
  return found;
}

// RANK and WORLD_SIZE are common names: a shell that exported them once (a
// torch habit) hands them to every mpirun or srun it starts, and every
// process would read the same rank of a wrong group. torchrun marks its
// workers (TORCHELASTIC_RUN_ID, LOCAL_WORLD_SIZE, GROUP_RANK); without a
// mark, RANK and WORLD_SIZE must agree with the variables of the launcher
// that would decide without them, else the launch is refused naming both.
caf::error check_plain_rank(const env_lookup& env) {
  for (auto mark : {"TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "GROUP_RANK"})
    if (env(mark) != nullptr) return {};
  // Only the launcher that would decide without them: variables inherited
  // from an outer one (an sbatch script's SLURM_PROCID) say nothing.
  const auto* other = pick(env, torchrun_index + 1);
  const auto& torch = launchers[torchrun_index];
  if (other == nullptr ||
      (value_of(env, other->rank) == value_of(env, torch.rank) &&
       value_of(env, other->size) == value_of(env, torch.size)))
    return {};
  return make_error(
    errc::invalid_argument,
    std::string{torch.rank} + "=" + value_of(env, torch.rank) + " and " +
      torch.size + "=" + value_of(env, torch.size) +
      " (torchrun's names, but no torchrun started this process: left in "
      "the environment?) disagree with " +
      other->rank + "=" + value_of(env, other->rank) + " and " + other->size +
      "=" + value_of(env, other->size) + " (" + other->name +
      "): unset RANK and WORLD_SIZE, or set CAF_COLLECTIVE_RANK and "
      "CAF_COLLECTIVE_WORLD_SIZE");
}

} // namespace

caf::expected<store_address> read_store_environment(const env_lookup& env) {
  store_address result;
  auto spec = value_of(env, "CAF_COLLECTIVE_STORE");
  if (!spec.empty()) {
    result.origin = "CAF_COLLECTIVE_STORE";
    if (spec.rfind("file:", 0) == 0 && spec.size() > 5) {
      result.kind = store_address::kind_t::file;
      result.directory = spec.substr(5);
      return result;
    }
    if (spec.rfind("tcp://", 0) != 0)
      return malformed("CAF_COLLECTIVE_STORE", spec,
                       "file:<dir> or tcp://host:port");
    result.kind = store_address::kind_t::tcp;
    if (auto err = parse_tcp(spec, result)) return err;
  } else {
    auto addr = value_of(env, "MASTER_ADDR");
    auto port = value_of(env, "MASTER_PORT");
    if (addr.empty() && port.empty()) return result;
    if (addr.empty() || port.empty())
      return make_error(
        errc::invalid_argument,
        std::string{addr.empty() ? "MASTER_PORT" : "MASTER_ADDR"} +
          " is set but " + (addr.empty() ? "MASTER_ADDR" : "MASTER_PORT") +
          " is not (torchrun sets both)");
    auto n = port_number(env, "MASTER_PORT");
    if (!n) return n.error();
    result.kind = store_address::kind_t::tcp;
    result.host = addr;
    result.port = *n;
    result.origin = "MASTER_ADDR/MASTER_PORT";
    // torchrun >= 2.3 may keep its own agent store on MASTER_PORT; ours then
    // takes the next port.
    if (value_of(env, "TORCHELASTIC_USE_AGENT_STORE") == "True") {
      if (result.port == 65535)
        return malformed("MASTER_PORT", port,
                         "below 65535 (the store uses MASTER_PORT + 1 next to "
                         "torchrun's agent store)");
      ++result.port;
      result.origin += " + 1 (torchrun's agent store holds MASTER_PORT)";
    }
  }
  if (auto err = fill_tcp_identity(env, result)) return err;
  return result;
}

// A process that Slurm's batch step started without srun (see
// slurm_batch_step) and no other launcher: one process of its own if the job
// has one task, else refused at once naming the job's task count, rather
// than waiting as rank 0 of tasks srun never started.
caf::expected<launch_info> batch_step_launch(const env_lookup& env) {
  const char* tasks_var = env("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  auto tasks = value_of(env, tasks_var);
  if (!tasks.empty() && tasks != "1")
    return make_error(
      errc::invalid_argument,
      "this process runs in Slurm job " + value_of(env, "SLURM_JOB_ID") +
        " but not as a task of an srun step (SLURM_STEP_ID='" +
        value_of(env, "SLURM_STEP_ID") + "', SLURM_STEP_NUM_TASKS='" +
        value_of(env, "SLURM_STEP_NUM_TASKS") +
        "'): the batch script (or salloc's shell) started it, while the "
        "job has " +
        tasks_var + "=" + tasks +
        " tasks. Start the program with srun (srun ./program) so that "
        "every task gets its rank, or set CAF_COLLECTIVE_RANK and "
        "CAF_COLLECTIVE_WORLD_SIZE. (If srun did start it, let "
        "SLURM_STEP_ID and SLURM_STEP_NUM_TASKS through to it.)");
  launch_info info;
  info.launcher = "sbatch";
  info.rank = 0;
  info.world_size = 1;
  info.local_rank = 0;
  return info;
}

caf::expected<launch_info> read_launch_environment(const env_lookup& env) {
  launch_info info;
  const auto* found = pick(env, 0);
  if (found == nullptr && slurm_batch_step(env) &&
      env(launchers[srun_index].rank) != nullptr)
    return batch_step_launch(env);
  if (found == nullptr)
    return make_error(errc::invalid_argument,
                      "no launcher told this process its rank: set "
                      "CAF_COLLECTIVE_RANK and CAF_COLLECTIVE_WORLD_SIZE, or "
                      "start it with caf_collective_run, torchrun (RANK, "
                      "WORLD_SIZE), mpirun (OMPI_COMM_WORLD_RANK, "
                      "OMPI_COMM_WORLD_SIZE), srun (SLURM_PROCID, "
                      "SLURM_NTASKS) or MPICH's or Intel MPI's mpiexec "
                      "(PMI_RANK, PMI_SIZE)");
  if (found == &launchers[torchrun_index])
    if (auto err = check_plain_rank(env)) return err;
  info.launcher = found->name;
  // An srun step's own size: with --preserve-env (salloc's interactive
  // step, or `srun -E -n 2` in a job of 4 tasks) SLURM_NTASKS stays the
  // job's.
  const char* size_var = found->size;
  if (found == &launchers[srun_index] && env("SLURM_STEP_NUM_TASKS") != nullptr)
    size_var = "SLURM_STEP_NUM_TASKS";
  if (env(size_var) == nullptr)
    return make_error(errc::invalid_argument,
                      std::string{found->rank} + " is set (" + found->name +
                        ") but " + size_var + " is not");
  auto rank = number(env, found->rank);
  if (!rank) return rank.error();
  auto size = number(env, size_var);
  if (!size) return size.error();
  if (*size < 1 || *rank >= *size)
    return make_error(errc::invalid_argument,
                      std::string{found->rank} + "=" + std::to_string(*rank) +
                        " and " + size_var + "=" + std::to_string(*size) +
                        " do not describe a rank of a group");
  info.rank = *rank;
  info.world_size = *size;
  if (env(found->local_rank) != nullptr) {
    auto local = number(env, found->local_rank);
    if (!local) return local.error();
    // A host's ranks are ranks of the group: a local rank past the world
    // size is a stale or mistyped variable (it picks the GPU).
    if (*local >= *size)
      return make_error(errc::invalid_argument, std::string{found->local_rank} +
                                                  "=" + std::to_string(*local) +
                                                  " is not below " + size_var +
                                                  "=" + std::to_string(*size) +
                                                  " (" + found->name + ")");
    info.local_rank = *local;
  }
  // A launch of one rank forms only groups of one, which meet nobody: the
  // store variables (a MASTER_ADDR left over from a torch setup, without a
  // secret) are not even read.
  if (info.world_size == 1) return info;
  auto store = read_store_environment(env);
  if (!store) return store.error();
  info.store = std::move(*store);
  if (info.store.kind == store_address::kind_t::none && info.world_size > 1) {
    if (!single_host_default(env, info.launcher, info.store))
      return make_error(
        errc::invalid_argument,
        "rank " + std::to_string(info.rank) + " of " +
          std::to_string(info.world_size) + " (from " + info.launcher +
          ") has no rendezvous address: set "
          "CAF_COLLECTIVE_STORE=tcp://host:port (or file:<dir>), or "
          "MASTER_ADDR and MASTER_PORT");
    if (auto err = fill_tcp_identity(env, info.store)) return err;
  }
  return info;
}

const char* process_environment(const char* var) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

caf::expected<launch_info> read_launch_environment() {
  return read_launch_environment(process_environment);
}

} // namespace caf_collective
