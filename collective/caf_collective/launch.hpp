// Starting from what a launcher set: rank, world size, local rank and the
// rendezvous store, read from the environment of caf_collective_run,
// torchrun, Open MPI's mpirun or Slurm's srun, so one program runs
// unchanged under each. docs/config.md lists every variable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

#include "caf_collective/api.hpp"
#include "caf_collective/rendezvous.hpp"

namespace caf_collective {

/// Where the ranks of a job meet, as the environment describes it.
struct store_address {
  enum class kind_t {
    /// Nothing configured: an in-process store (members are threads).
    none,
    /// CAF_COLLECTIVE_STORE=file:<dir>.
    file,
    /// CAF_COLLECTIVE_STORE=tcp://host:port, or MASTER_ADDR/MASTER_PORT.
    tcp,
  };
  kind_t kind = kind_t::none;
  /// file: the directory.
  std::string directory;
  /// tcp: the server's address.
  std::string host;
  uint16_t port = 0;
  /// tcp: rank 0 serves the store (the default), unless
  /// CAF_COLLECTIVE_STORE_SERVER=external (the launcher serves it).
  bool rank0_serves = true;
  /// tcp: the run's shared secret and id.
  std::string secret;
  std::string run_id;
  /// Which variables gave the address, for messages ("CAF_COLLECTIVE_STORE",
  /// "MASTER_ADDR/MASTER_PORT").
  std::string origin;
};

/// This process's place in the job.
struct launch_info {
  int rank = -1;
  int world_size = 0;
  /// Rank among the processes on this host; -1 if no launcher said.
  int local_rank = -1;
  /// The launcher whose variables gave rank and world size:
  /// "caf_collective" (CAF_COLLECTIVE_*), "torchrun" (RANK, WORLD_SIZE),
  /// "mpirun" (OMPI_COMM_WORLD_*), "srun" (SLURM_*), "mpiexec" (PMI_RANK,
  /// PMI_SIZE, MPI_LOCALRANKID: MPICH's and Intel MPI's Hydra) or "sbatch"
  /// (started by a Slurm batch script of a one-task job without srun: rank
  /// 0 of 1; with more tasks that is refused).
  std::string launcher;
  store_address store;
};

/// Looks a variable up; returns null when it is not set.
using env_lookup = std::function<const char*(const char*)>;

/// This process's environment (std::getenv); a variable set to the empty
/// string counts as not set.
const char* process_environment(const char* var);

/// Reads the store's address only (no rank needed). Fails with
/// invalid_argument naming the variable that is malformed, or the secret
/// that is missing for a TCP store.
caf::expected<store_address> read_store_environment(const env_lookup& env);

/// Reads rank, world size, local rank and the store. Fails with
/// invalid_argument naming what is missing or malformed, e.g. "RANK is set
/// (torchrun) but WORLD_SIZE is not", or no rendezvous address for a world
/// larger than 1.
caf::expected<launch_info> read_launch_environment(const env_lookup& env);

/// The same with the process environment (std::getenv).
caf::expected<launch_info> read_launch_environment();

/// The store `addr` describes, for the process of launcher rank `rank`.
/// For a TCP store that rank 0 serves, rank 0 starts the server first
/// (once per address and process; it runs until the process exits); pass
/// the launcher's rank, not a subgroup's, so that one process serves it.
/// `timeout`: how long clients retry to reach the server.
caf::expected<rendezvous_store_ptr>
open_store(const store_address& addr, int rank,
           std::chrono::milliseconds timeout);

/// The store group `group_name` uses at `addr`: a directory per group in a
/// file store, keys prefixed "group/<name>/" in a TCP store (rank 0 starts
/// the server when it serves it, see open_store), null for none.
/// init_collective_group (no store given) and init_collective_group_from_env
/// both use it, so ranks calling either meet.
caf::expected<rendezvous_store_ptr>
open_group_store(const store_address& addr, std::string_view group_name,
                 int rank, std::chrono::milliseconds timeout);

/// init_collective_group with rank, world size and store from the
/// environment (read_launch_environment). `opts.store`, when set, replaces
/// the store from the environment. Throws collective_error: invalid_argument
/// naming what the environment lacks, and everything init_collective_group
/// throws.
void init_collective_group_from_env(
  std::string_view backend = "gloo",
  std::string_view group_name = default_group_name, init_options opts = {});

} // namespace caf_collective
