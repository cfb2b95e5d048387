// The imperative API, in the spirit of Ray's ray.util.collective: a member
// initializes a named group in its own code, then calls
// `allreduce(tensor, "group")`. Blocking calls throw `collective_error`;
// the `_async` forms return a `work` handle instead.
//
// Group names are looked up in the calling thread's member scope: by
// default one table per process (one member per process, as in Ray). Tests
// and programs that run several members as threads of one process give each
// thread its own `member_scope`.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "caf_collective/group.hpp"
#include "caf_collective/options.hpp"
#include "caf_collective/rendezvous.hpp"
#include "caf_collective/tensor.hpp"
#include "caf_collective/work.hpp"

namespace caf_collective {

inline constexpr std::string_view default_group_name = "default";

/// Binds the calling thread to its own table of groups for the lifetime of
/// the object, so one thread acts as one member. Destroying the scope
/// destroys the groups still initialized in it, as destroy_collective_group
/// does: handles kept from get_group() run nothing more. Scopes of one
/// thread nest: the newest one alive is the thread's table, whatever order
/// they end in. A scope must end on the thread that made it (another
/// thread's ending it terminates the process with a message: that thread
/// would go on using a table that no longer exists).
class member_scope {
 public:
  member_scope();
  ~member_scope();
  member_scope(const member_scope&) = delete;
  member_scope& operator=(const member_scope&) = delete;

  struct table;

 private:
  std::unique_ptr<table> table_;
  /// The scope this one nests in on its thread (null: the process table).
  member_scope* outer_;
  /// Marks the thread that made it (a thread-local variable's address).
  const void* thread_;
};

struct init_options {
  /// Rendezvous store; null: the one $CAF_COLLECTIVE_STORE ("file:<dir>" or
  /// "tcp://host:port") or MASTER_ADDR/MASTER_PORT name (open_group_store in
  /// launch.hpp), else an in-process store shared by all members of
  /// `group_name` in this process.
  rendezvous_store_ptr store;
  milliseconds timeout = std::chrono::seconds{30};
  /// See group_config::hostname.
  std::string hostname;
  int cuda_device = 0;
};

/// Forms the group (blocks until every rank joined). Throws
/// collective_error: invalid_argument (world size < 1, rank out of range,
/// unknown backend, a malformed store variable), duplicate_group, timeout,
/// backend_error. To take rank and world size from a launcher:
/// init_collective_group_from_env (launch.hpp).
void init_collective_group(int world_size, int rank,
                           std::string_view backend = "gloo",
                           std::string_view group_name = default_group_name,
                           init_options opts = {});

/// Destroys the group in this member; throws unknown_group.
void destroy_collective_group(std::string_view group_name = default_group_name);

bool is_group_initialized(std::string_view group_name = default_group_name);

/// The caller's rank, or -1 if the group is not initialized (as in Ray).
int get_rank(std::string_view group_name = default_group_name);

/// The world size, or -1 if the group is not initialized (as in Ray).
int get_collective_group_size(std::string_view group_name = default_group_name);

/// The group object behind a name; throws unknown_group.
group_ptr get_group(std::string_view group_name = default_group_name);

// -- blocking operations (throw collective_error)
// ------------------------------

void send(const tensor_view& tensor, int dst_rank,
          std::string_view group_name = default_group_name,
          send_options opts = {});
void recv(const tensor_view& tensor, int src_rank,
          std::string_view group_name = default_group_name,
          recv_options opts = {});

/// In place: the root's tensor is copied into every rank's tensor.
void broadcast(const tensor_view& tensor, int src_rank,
               std::string_view group_name = default_group_name,
               broadcast_options opts = {});
void broadcast(const tensor_view& in, const tensor_view& out,
               std::string_view group_name, broadcast_options opts);

/// In place: the root's tensor receives the reduction.
void reduce(const tensor_view& tensor, int dst_rank,
            std::string_view group_name = default_group_name,
            reduce_options opts = {});
void reduce(const tensor_view& in, const tensor_view& out,
            std::string_view group_name, reduce_options opts);

void allreduce(const tensor_view& tensor,
               std::string_view group_name = default_group_name,
               allreduce_options opts = {});
void allreduce(const tensor_view& in, const tensor_view& out,
               std::string_view group_name = default_group_name,
               allreduce_options opts = {});

void allgather(const tensor_view& in, const tensor_view& out,
               std::string_view group_name = default_group_name,
               allgather_options opts = {});
void allgatherv(const tensor_view& in, const tensor_view& out,
                std::string_view group_name, allgatherv_options opts);
void gather(const tensor_view& in, const tensor_view& out,
            std::string_view group_name = default_group_name,
            gather_options opts = {});
void scatter(const tensor_view& in, const tensor_view& out,
             std::string_view group_name = default_group_name,
             scatter_options opts = {});
void reduce_scatter(const tensor_view& in, const tensor_view& out,
                    std::string_view group_name = default_group_name,
                    reduce_scatter_options opts = {});
void alltoall(const tensor_view& in, const tensor_view& out,
              std::string_view group_name = default_group_name,
              alltoall_options opts = {});
void alltoallv(const tensor_view& in, const tensor_view& out,
               std::string_view group_name, alltoallv_options opts);
void barrier(std::string_view group_name = default_group_name,
             barrier_options opts = {});

// -- asynchronous operations (throw only unknown_group)
// ------------------------

work send_async(const tensor_view& tensor, int dst_rank,
                std::string_view group_name = default_group_name,
                send_options opts = {});
work recv_async(const tensor_view& tensor, int src_rank,
                std::string_view group_name = default_group_name,
                recv_options opts = {});
work broadcast_async(const tensor_view& tensor, int src_rank,
                     std::string_view group_name = default_group_name,
                     broadcast_options opts = {});
work reduce_async(const tensor_view& tensor, int dst_rank,
                  std::string_view group_name = default_group_name,
                  reduce_options opts = {});
work allreduce_async(const tensor_view& tensor,
                     std::string_view group_name = default_group_name,
                     allreduce_options opts = {});
work allreduce_async(const tensor_view& in, const tensor_view& out,
                     std::string_view group_name = default_group_name,
                     allreduce_options opts = {});
work allgather_async(const tensor_view& in, const tensor_view& out,
                     std::string_view group_name = default_group_name,
                     allgather_options opts = {});
work allgatherv_async(const tensor_view& in, const tensor_view& out,
                      std::string_view group_name, allgatherv_options opts);
work gather_async(const tensor_view& in, const tensor_view& out,
                  std::string_view group_name = default_group_name,
                  gather_options opts = {});
work scatter_async(const tensor_view& in, const tensor_view& out,
                   std::string_view group_name = default_group_name,
                   scatter_options opts = {});
work reduce_scatter_async(const tensor_view& in, const tensor_view& out,
                          std::string_view group_name = default_group_name,
                          reduce_scatter_options opts = {});
work alltoall_async(const tensor_view& in, const tensor_view& out,
                    std::string_view group_name = default_group_name,
                    alltoall_options opts = {});
work alltoallv_async(const tensor_view& in, const tensor_view& out,
                     std::string_view group_name, alltoallv_options opts);
work barrier_async(std::string_view group_name = default_group_name,
                   barrier_options opts = {});

} // namespace caf_collective
