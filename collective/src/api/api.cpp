// The imperative API: a table of groups per member scope, and blocking and
// asynchronous wrappers around group's operations.
#include "caf_collective/api.hpp"

#include <cstdio>
#include <exception>
#include <map>
#include <mutex>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/launch.hpp"
#include "runtime/callback_member.hpp"
#include "runtime/lane.hpp"

namespace caf_collective {

struct member_scope::table {
  std::mutex mtx; // only the process table needs it (find_group)
  /// Initialized groups; a name being initialized is reserved with null.
  std::map<std::string, group_ptr, std::less<>> groups;
  /// A reserved name's init, from the reservation until its formation
  /// ended: a destroy from another thread aborts its group, or, before the
  /// group exists, marks it destroyed for its init to find.
  struct forming_slot {
    group_ptr group; // null until group::make returned
    bool destroyed = false;
  };
  std::map<std::string, std::shared_ptr<forming_slot>, std::less<>> forming;
};

namespace {

member_scope::table& process_table() {
  static member_scope::table instance;
  return instance;
}

thread_local member_scope::table* current_table = nullptr;
// The newest member_scope alive on this thread; its table is current_table.
thread_local member_scope* innermost_scope = nullptr;

// The member whose completion callback this thread runs (work.cpp).
thread_local const void* running_callback_of = nullptr;

// By-name calls from a completion callback that runs on a thread acting
// for another member would resolve in that member's table: run on another
// rank's group (wrong data, or a drain of a lane this thread holds, which
// hung), or fail as unknown. Refused, naming the way out.
void refuse_foreign_callback(std::string_view group_name) {
  if (running_callback_of == nullptr ||
      running_callback_of == detail::calling_member())
    return;
  throw collective_error{make_error(
    errc::invalid_argument,
    "group '" + std::string{group_name} +
      "' named from a completion callback that runs on a thread acting for "
      "another member (callbacks run on whichever thread completes the op: "
      "a lane, or another rank's thread): call the group's handle "
      "(get_group, taken before registering the callback) instead of "
      "naming it")};
}

member_scope::table& table_of_caller(std::string_view group_name) {
  refuse_foreign_callback(group_name);
  return current_table != nullptr ? *current_table : process_table();
}

// The store the environment gives (a launcher's, or CAF_COLLECTIVE_STORE,
// MASTER_ADDR and MASTER_PORT: see launch.hpp), else an in-process store.
rendezvous_store_ptr default_store(std::string_view group_name, int rank,
                                   milliseconds timeout) {
  // Under a launcher: its store, the one init_collective_group_from_env
  // uses (mpirun's and srun's on one host derive one without any address),
  // served by the launcher's rank 0. A subgroup's rank 0 may live in
  // another process, which would try to bind the same address. Without a
  // launcher: the store the variables name, served by the group's rank 0.
  auto store = [&]() -> caf::expected<rendezvous_store_ptr> {
    // (A launch of one rank names no store: a larger group of its process
    // reads the variables itself.)
    if (auto launched = read_launch_environment();
        launched && launched->world_size > 1)
      return open_group_store(launched->store, group_name, launched->rank,
                              timeout);
    auto addr = read_store_environment(process_environment);
    if (!addr) throw collective_error{addr.error()};
    return open_group_store(*addr, group_name, rank, timeout);
  }();
  if (!store) throw collective_error{store.error()};
  if (*store) return std::move(*store);
  return shared_in_process_store(std::string{group_name});
}

caf::error unknown_group(std::string_view group_name) {
  return make_error(errc::unknown_group,
                    "group '" + std::string{group_name} +
                      "' is not initialized in this member "
                      "(call init_collective_group first)");
}

group_ptr find_group(std::string_view group_name) {
  refuse_foreign_callback(group_name);
  auto lookup = [group_name](const member_scope::table& tbl) -> group_ptr {
    auto i = tbl.groups.find(group_name);
    return i == tbl.groups.end() ? nullptr : i->second;
  };
  // A member scope's table is reached only through its thread's
  // current_table, so only that thread reads or changes it, and every op
  // looks its group up here without a lock (0.23 -> 0.22 us per 8 B op at
  // 1 rank). The process table is shared by all threads.
  if (current_table != nullptr) return lookup(*current_table);
  auto& tbl = process_table();
  std::lock_guard<std::mutex> guard{tbl.mtx};
  return lookup(tbl);
}

// The in-place forms take the peer or root both as an argument and in their
// options. A different explicit value in the options is a caller error, not
// something to overwrite silently. The options' defaults (-1 for a peer, 0
// for a root) count as "not given": a root of 0 in the options cannot be
// told apart from the default and so never conflicts.
work refuse_conflict(std::string_view group_name, op_kind op,
                     const char* argument, int given, const char* field,
                     int in_options, int unset) {
  if (in_options == unset || in_options == given) return {};
  // An unknown name is refused as every op's is (unknown_group).
  auto g = get_group(group_name);
  auto why = make_error(errc::invalid_argument, g->context(op, -1),
                        std::string{argument} + " " + std::to_string(given) +
                          " conflicts with options." + field + " " +
                          std::to_string(in_options) + " (give it once)");
  // Refused by the group, which numbers it like the op it refuses.
  return g->refuse(op, std::move(why));
}

template<class Submit>
void run_blocking(Submit submit) {
  detail::run_inline_scope allow_inline;
  throw_if(submit().wait());
}

} // namespace

namespace detail {

const void* calling_member() noexcept {
  return current_table != nullptr ? current_table : &process_table();
}

callback_member_scope::callback_member_scope(const void* member) noexcept
  : outer_(running_callback_of) {
  running_callback_of = member;
}

callback_member_scope::~callback_member_scope() {
  running_callback_of = outer_;
}

} // namespace detail

member_scope::member_scope()
  : table_(std::make_unique<table>()), outer_(innermost_scope),
    thread_(&innermost_scope) {
  innermost_scope = this;
  current_table = table_.get();
}

member_scope::~member_scope() {
  if (thread_ != &innermost_scope) {
    std::fputs("caf_collective: a member_scope ended on another thread than "
               "the one it binds; that thread would go on using its freed "
               "table of groups\n",
               stderr);
    std::terminate();
  }
  // Unlinked wherever it is: a scope that ends before a newer one of its
  // thread leaves that one the thread's table.
  if (innermost_scope == this) {
    innermost_scope = outer_;
  } else {
    for (auto* inner = innermost_scope; inner != nullptr; inner = inner->outer_)
      if (inner->outer_ == this) {
        inner->outer_ = outer_;
        break;
      }
  }
  current_table =
    innermost_scope != nullptr ? innermost_scope->table_.get() : nullptr;
  // Closed as destroy_collective_group would: a group the caller still
  // holds (get_group) refuses its later ops instead of running them against
  // peers that are gone, and its lanes and connections end here, not on
  // whichever thread drops the last handle.
  for (auto& [name, g] : table_->groups)
    if (g) g->close();
  table_->groups.clear();
}

void init_collective_group(int world_size, int rank, std::string_view backend,
                           std::string_view group_name, init_options opts) {
  group_config cfg;
  cfg.name = std::string{group_name};
  cfg.world_size = world_size;
  cfg.rank = rank;
  cfg.backend = std::string{backend};
  // A group of one meets nobody: no store from the environment, whose
  // variables may be incomplete for a single process.
  if (opts.store)
    cfg.store = opts.store;
  else if (world_size == 1)
    cfg.store = make_in_process_store();
  else
    cfg.store = default_store(group_name, rank, opts.timeout);
  cfg.timeout = opts.timeout;
  cfg.hostname = std::move(opts.hostname);
  cfg.cuda_device = opts.cuda_device;
  auto& tbl = table_of_caller(group_name);
  auto slot = std::make_shared<member_scope::table::forming_slot>();
  {
    // Reserve the name first so a concurrent init of the same name in this
    // member fails instead of forming two groups.
    std::lock_guard<std::mutex> guard{tbl.mtx};
    if (auto i = tbl.groups.find(cfg.name); i != tbl.groups.end())
      throw collective_error{make_error(
        errc::duplicate_group,
        "group '" + cfg.name + "' is " +
          (i->second ? "already initialized in this member (destroy it "
                       "first)"
                     : "being initialized by another thread of this member "
                       "(wait for that init, or destroy the group to "
                       "abort it)"))};
    tbl.groups.emplace(cfg.name, nullptr);
    tbl.forming[cfg.name] = slot;
  }
  // Until the reservation is taken back, the name and its forming entry are
  // this init's unless a destroy took them (and marked the slot).
  auto forget_reservation = [&] {
    std::lock_guard<std::mutex> guard{tbl.mtx};
    if (slot->destroyed) return; // the destroy took the name already
    tbl.forming.erase(tbl.forming.find(group_name));
    tbl.groups.erase(tbl.groups.find(group_name));
  };
  work formed;
  caf::expected<group_ptr> made = group_ptr{};
  try {
    made = group::make(std::move(cfg), &formed);
  } catch (...) {
    // Out of threads or memory: the name stays free to try again.
    forget_reservation();
    throw;
  }
  if (!made) {
    forget_reservation();
    throw collective_error{made.error()};
  }
  auto destroyed_error = [&](const caf::error& err) {
    return collective_error{make_error(
      errc::aborted, "group '" + std::string{group_name} +
                       "' was destroyed while it formed" +
                       (err ? " (" + detail_of(err) + ")" : std::string{}))};
  };
  bool destroyed_early = false;
  {
    std::lock_guard<std::mutex> guard{tbl.mtx};
    destroyed_early = slot->destroyed;
    if (!destroyed_early) slot->group = *made;
  }
  if (destroyed_early) {
    // A destroy came while the group was being made (it took the name).
    (*made)->abort("group '" + std::string{group_name} +
                   "' was destroyed while it formed");
    (*made)->close();
    throw destroyed_error({});
  }
  auto err = formed.wait();
  std::lock_guard<std::mutex> guard{tbl.mtx};
  // destroy_collective_group took the group (and its name, and the slot's
  // entry) and aborted it while it formed.
  if (slot->destroyed) throw destroyed_error(err);
  tbl.forming.erase(tbl.forming.find(group_name));
  auto i = tbl.groups.find(group_name);
  if (err) {
    tbl.groups.erase(i);
    throw collective_error{err};
  }
  i->second = std::move(*made);
}

void destroy_collective_group(std::string_view group_name) {
  group_ptr victim;
  bool forming = false;
  {
    auto& tbl = table_of_caller(group_name);
    std::lock_guard<std::mutex> guard{tbl.mtx};
    auto i = tbl.groups.find(group_name);
    if (i == tbl.groups.end())
      throw collective_error{unknown_group(group_name)};
    if (i->second == nullptr) {
      // Still forming (init_collective_group on another thread): aborted
      // below, its formation ends within about 100 ms and that init throws
      // aborted. Before its group exists, the init finds the mark and
      // throws aborted as soon as the group is made.
      auto f = tbl.forming.find(group_name);
      victim = f->second->group;
      f->second->destroyed = true;
      tbl.forming.erase(f);
      forming = true;
    } else {
      victim = std::move(i->second);
    }
    tbl.groups.erase(i);
  }
  if (forming && !victim) return; // its init aborts it once made
  if (forming)
    victim->abort("group '" + std::string{group_name} +
                  "' was destroyed while it formed");
  // Outside the lock: the caller may free its buffers once we return, so
  // every queued operation must be over by then. Handles from get_group()
  // may outlive this call; they refuse every later operation.
  victim->close();
}

bool is_group_initialized(std::string_view group_name) {
  return find_group(group_name) != nullptr;
}

int get_rank(std::string_view group_name) {
  auto g = find_group(group_name);
  return g ? g->rank() : -1;
}

int get_collective_group_size(std::string_view group_name) {
  auto g = find_group(group_name);
  return g ? g->world_size() : -1;
}

group_ptr get_group(std::string_view group_name) {
  if (auto g = find_group(group_name)) return g;
  throw collective_error{unknown_group(group_name)};
}

// -- asynchronous operations
// ---------------------------------------------------

work send_async(const tensor_view& tensor, int dst_rank,
                std::string_view group_name, send_options opts) {
  if (auto refused = refuse_conflict(group_name, op_kind::send, "dst_rank",
                                     dst_rank, "peer", opts.peer, -1);
      refused.valid())
    return refused;
  opts.peer = dst_rank;
  return get_group(group_name)->send(tensor, opts);
}

work recv_async(const tensor_view& tensor, int src_rank,
                std::string_view group_name, recv_options opts) {
  if (auto refused = refuse_conflict(group_name, op_kind::recv, "src_rank",
                                     src_rank, "peer", opts.peer, -1);
      refused.valid())
    return refused;
  opts.peer = src_rank;
  return get_group(group_name)->recv(tensor, opts);
}

work broadcast_async(const tensor_view& tensor, int src_rank,
                     std::string_view group_name, broadcast_options opts) {
  if (auto refused = refuse_conflict(group_name, op_kind::broadcast, "src_rank",
                                     src_rank, "root", opts.root, 0);
      refused.valid())
    return refused;
  opts.root = src_rank;
  return get_group(group_name)->broadcast(tensor, tensor, opts);
}

work reduce_async(const tensor_view& tensor, int dst_rank,
                  std::string_view group_name, reduce_options opts) {
  if (auto refused = refuse_conflict(group_name, op_kind::reduce, "dst_rank",
                                     dst_rank, "root", opts.root, 0);
      refused.valid())
    return refused;
  opts.root = dst_rank;
  return get_group(group_name)->reduce(tensor, tensor, opts);
}

work allreduce_async(const tensor_view& tensor, std::string_view group_name,
                     allreduce_options opts) {
  return get_group(group_name)->allreduce(tensor, tensor, opts);
}

work allreduce_async(const tensor_view& in, const tensor_view& out,
                     std::string_view group_name, allreduce_options opts) {
  return get_group(group_name)->allreduce(in, out, opts);
}

work allgather_async(const tensor_view& in, const tensor_view& out,
                     std::string_view group_name, allgather_options opts) {
  return get_group(group_name)->allgather(in, out, opts);
}

work allgatherv_async(const tensor_view& in, const tensor_view& out,
                      std::string_view group_name, allgatherv_options opts) {
  return get_group(group_name)->allgatherv(in, out, std::move(opts));
}

work gather_async(const tensor_view& in, const tensor_view& out,
                  std::string_view group_name, gather_options opts) {
  return get_group(group_name)->gather(in, out, opts);
}

work scatter_async(const tensor_view& in, const tensor_view& out,
                   std::string_view group_name, scatter_options opts) {
  return get_group(group_name)->scatter(in, out, opts);
}

work reduce_scatter_async(const tensor_view& in, const tensor_view& out,
                          std::string_view group_name,
                          reduce_scatter_options opts) {
  return get_group(group_name)->reduce_scatter(in, out, opts);
}

work alltoall_async(const tensor_view& in, const tensor_view& out,
                    std::string_view group_name, alltoall_options opts) {
  return get_group(group_name)->alltoall(in, out, opts);
}

work alltoallv_async(const tensor_view& in, const tensor_view& out,
                     std::string_view group_name, alltoallv_options opts) {
  return get_group(group_name)->alltoallv(in, out, std::move(opts));
}

work barrier_async(std::string_view group_name, barrier_options opts) {
  return get_group(group_name)->barrier(opts);
}

// -- blocking operations
// -------------------------------------------------------

void send(const tensor_view& tensor, int dst_rank, std::string_view group_name,
          send_options opts) {
  run_blocking([&] { return send_async(tensor, dst_rank, group_name, opts); });
}

void recv(const tensor_view& tensor, int src_rank, std::string_view group_name,
          recv_options opts) {
  run_blocking([&] { return recv_async(tensor, src_rank, group_name, opts); });
}

void broadcast(const tensor_view& tensor, int src_rank,
               std::string_view group_name, broadcast_options opts) {
  run_blocking(
    [&] { return broadcast_async(tensor, src_rank, group_name, opts); });
}

void broadcast(const tensor_view& in, const tensor_view& out,
               std::string_view group_name, broadcast_options opts) {
  run_blocking([&] { return get_group(group_name)->broadcast(in, out, opts); });
}

void reduce(const tensor_view& tensor, int dst_rank,
            std::string_view group_name, reduce_options opts) {
  run_blocking(
    [&] { return reduce_async(tensor, dst_rank, group_name, opts); });
}

void reduce(const tensor_view& in, const tensor_view& out,
            std::string_view group_name, reduce_options opts) {
  run_blocking([&] { return get_group(group_name)->reduce(in, out, opts); });
}

void allreduce(const tensor_view& tensor, std::string_view group_name,
               allreduce_options opts) {
  run_blocking([&] { return allreduce_async(tensor, group_name, opts); });
}

void allreduce(const tensor_view& in, const tensor_view& out,
               std::string_view group_name, allreduce_options opts) {
  run_blocking([&] { return allreduce_async(in, out, group_name, opts); });
}

void allgather(const tensor_view& in, const tensor_view& out,
               std::string_view group_name, allgather_options opts) {
  run_blocking([&] { return allgather_async(in, out, group_name, opts); });
}

void allgatherv(const tensor_view& in, const tensor_view& out,
                std::string_view group_name, allgatherv_options opts) {
  run_blocking(
    [&] { return allgatherv_async(in, out, group_name, std::move(opts)); });
}

void gather(const tensor_view& in, const tensor_view& out,
            std::string_view group_name, gather_options opts) {
  run_blocking([&] { return gather_async(in, out, group_name, opts); });
}

void scatter(const tensor_view& in, const tensor_view& out,
             std::string_view group_name, scatter_options opts) {
  run_blocking([&] { return scatter_async(in, out, group_name, opts); });
}

void reduce_scatter(const tensor_view& in, const tensor_view& out,
                    std::string_view group_name, reduce_scatter_options opts) {
  run_blocking([&] { return reduce_scatter_async(in, out, group_name, opts); });
}

void alltoall(const tensor_view& in, const tensor_view& out,
              std::string_view group_name, alltoall_options opts) {
  run_blocking([&] { return alltoall_async(in, out, group_name, opts); });
}

void alltoallv(const tensor_view& in, const tensor_view& out,
               std::string_view group_name, alltoallv_options opts) {
  run_blocking(
    [&] { return alltoallv_async(in, out, group_name, std::move(opts)); });
}

void barrier(std::string_view group_name, barrier_options opts) {
  run_blocking([&] { return barrier_async(group_name, opts); });
}

} // namespace caf_collective
