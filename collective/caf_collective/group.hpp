// A group as one member sees it: its rank, its backend and its lane.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/backend.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/op_history.hpp"
#include "caf_collective/options.hpp"
#include "caf_collective/persistent_op.hpp"
#include "caf_collective/rendezvous.hpp"
#include "caf_collective/tensor.hpp"
#include "caf_collective/work.hpp"

namespace caf_collective {

namespace detail {
class lane;
class work_state;
struct call_site;
struct persistent_call;
} // namespace detail

/// The largest world size a group accepts. Gloo connects every member to
/// every peer (one socket each, formed one by one), so far larger groups
/// would exhaust file descriptors and formation deadlines long before they
/// formed.
inline constexpr int max_world_size = 1024;

/// How one member joins a group.
struct group_config {
  /// Group name: unique per member; prefixes every rendezvous key.
  std::string name;
  /// Number of members, in [1, max_world_size].
  int world_size = 0;
  /// This member's rank in [0, world_size).
  int rank = -1;
  /// "gloo", "shm" (every rank on this host, through shared memory),
  /// "nccl", or "auto": shm when every rank runs on this host (the ranks
  /// compare boot id and hostname at formation), else gloo.
  std::string backend = "gloo";
  /// Where the members find each other; must be shared by all of them.
  rendezvous_store_ptr store;
  /// Deadline of group formation and default deadline of each operation.
  milliseconds timeout = std::chrono::seconds{30};
  /// Address this member's Gloo device binds to and advertises; empty:
  /// $CAF_COLLECTIVE_HOSTNAME, else 127.0.0.1.
  std::string hostname;
  /// NCCL: the CUDA device this member uses.
  int cuda_device = 0;
};

/// One member's handle to one group. Operations are validated in the
/// caller's thread (a bad argument fails at once, nothing is sent), then
/// queued on the group's lane and run there strictly in submission order,
/// which is the sequence order. Every method returns immediately with a
/// `work` handle; the blocking API waits on it.
///
/// A timeout or transport failure breaks the group: every later operation
/// fails with errc::aborted naming the first failure. Argument errors do
/// not break it.
class group : public std::enable_shared_from_this<group> {
 public:
  /// Validates `cfg` and starts forming the group on a new lane. The
  /// returned work completes once every rank has connected, or fails with
  /// timeout / backend_error; operations submitted meanwhile queue behind
  /// it.
  static caf::expected<std::shared_ptr<group>> make(group_config cfg,
                                                    work* formed = nullptr);

  /// make() and wait for formation: blocks the calling thread.
  static caf::expected<std::shared_ptr<group>> create(group_config cfg);

  /// Queued operations hold the group, so this runs once they are done
  /// (often on the lane itself). A healthy Gloo group then meets its peers
  /// in a barrier of at most min(timeout, 5 s) before closing its sockets;
  /// after abort() (or a failure) it closes at once. Actors that drop a
  /// group on a scheduler thread therefore abort it or destroy it through
  /// destroy_collective_group from a thread that may block.
  ~group();

  /// Lets go of `g` without blocking the caller: the reference is dropped
  /// on the group's own lane, so that if it is the last one the teardown
  /// above runs there. Actors drop their groups this way.
  static void release_on_lane(std::shared_ptr<group> g);

  group(const group&) = delete;
  group& operator=(const group&) = delete;

  const std::string& name() const noexcept { return cfg_.name; }

  int rank() const noexcept { return cfg_.rank; }

  int world_size() const noexcept { return cfg_.world_size; }

  /// The backend asked for: "gloo", "shm", "nccl" or "auto".
  const std::string& backend_name() const noexcept { return cfg_.backend; }

  /// The backend the group runs on ("auto" resolved); empty until formed.
  std::string backend_in_use() const;

  milliseconds default_timeout() const noexcept { return cfg_.timeout; }

  /// Whether an earlier failure broke this group.
  bool broken() const noexcept { return broken_.load(); }

  /// The first failure that broke the group (none if not broken).
  caf::error broken_reason() const;

  work send(const tensor_view& in, send_options opts);
  work recv(const tensor_view& out, recv_options opts);
  work broadcast(const tensor_view& in, const tensor_view& out,
                 broadcast_options opts = {});
  work reduce(const tensor_view& in, const tensor_view& out,
              reduce_options opts = {});
  work allreduce(const tensor_view& in, const tensor_view& out,
                 allreduce_options opts = {});
  work allgather(const tensor_view& in, const tensor_view& out,
                 allgather_options opts = {});
  work allgatherv(const tensor_view& in, const tensor_view& out,
                  allgatherv_options opts);
  work gather(const tensor_view& in, const tensor_view& out,
              gather_options opts = {});
  work scatter(const tensor_view& in, const tensor_view& out,
               scatter_options opts = {});
  work reduce_scatter(const tensor_view& in, const tensor_view& out,
                      reduce_scatter_options opts = {});
  work alltoall(const tensor_view& in, const tensor_view& out,
                alltoall_options opts = {});
  work alltoallv(const tensor_view& in, const tensor_view& out,
                 alltoallv_options opts);
  work barrier(barrier_options opts = {});

  /// Persistent forms of the ops (persistent_op.hpp): the same arguments
  /// and checks as the calls above, done once; a bad argument is returned
  /// here and nothing is sent. The buffers stay the caller's and must
  /// outlive every run. A persistent send or recv pairs with any send or
  /// recv of the peer (persistent or not) with the same tag, in order.
  caf::expected<persistent_op> prepare_send(const tensor_view& in,
                                            send_options opts);
  caf::expected<persistent_op> prepare_recv(const tensor_view& out,
                                            recv_options opts);
  caf::expected<persistent_op> prepare_broadcast(const tensor_view& in,
                                                 const tensor_view& out,
                                                 broadcast_options opts = {});
  caf::expected<persistent_op> prepare_reduce(const tensor_view& in,
                                              const tensor_view& out,
                                              reduce_options opts = {});
  caf::expected<persistent_op> prepare_allreduce(const tensor_view& in,
                                                 const tensor_view& out,
                                                 allreduce_options opts = {});
  caf::expected<persistent_op> prepare_allgather(const tensor_view& in,
                                                 const tensor_view& out,
                                                 allgather_options opts = {});
  caf::expected<persistent_op> prepare_allgatherv(const tensor_view& in,
                                                  const tensor_view& out,
                                                  allgatherv_options opts);
  caf::expected<persistent_op> prepare_gather(const tensor_view& in,
                                              const tensor_view& out,
                                              gather_options opts = {});
  caf::expected<persistent_op> prepare_scatter(const tensor_view& in,
                                               const tensor_view& out,
                                               scatter_options opts = {});
  caf::expected<persistent_op>
  prepare_reduce_scatter(const tensor_view& in, const tensor_view& out,
                         reduce_scatter_options opts = {});
  caf::expected<persistent_op> prepare_alltoall(const tensor_view& in,
                                                const tensor_view& out,
                                                alltoall_options opts = {});
  caf::expected<persistent_op> prepare_alltoallv(const tensor_view& in,
                                                 const tensor_view& out,
                                                 alltoallv_options opts);
  caf::expected<persistent_op> prepare_barrier(barrier_options opts = {});

  /// Breaks the group and fails every queued operation at once with
  /// errc::aborted. The running one ends as soon as its backend call
  /// returns, which the abort makes happen at once (Gloo fails its
  /// connections, which wakes the lane waiting in Gloo and tells the peers,
  /// peer_lost; shm wakes its waiters): its handle completes only then, so
  /// that nothing uses the op's buffers any more once it did. Gloo's abort
  /// waits for its network thread to let go of the connections (up to
  /// about 10 ms per peer): safe from any thread that may block that long;
  /// see abort_off_thread. A group still forming stops waiting for its
  /// peers within about 100 ms (docs/api.md).
  void abort(std::string why);

  /// Runs `g->abort(why)` on a thread the process keeps for aborts (started
  /// by the first call) and returns at once: for callers that must not
  /// block, such as actors' handlers on CAF's scheduler threads (the actor
  /// layer aborts a group this way when a peer dies or the group is
  /// destroyed).
  static void abort_off_thread(std::shared_ptr<group> g, std::string why);

  /// Blocks until every operation submitted so far has finished. Throws
  /// collective_error (invalid_argument) when called on one of the group's
  /// own lanes (from a completion callback): it would wait for itself.
  void drain();

  /// What destroy_collective_group does: refuses every later operation
  /// (errc::aborted, "destroyed"), waits for the submitted ones, then closes
  /// the backend in the calling thread (a healthy Gloo group meets its peers
  /// in its shutdown barrier first; an abort() of this group running at that
  /// moment keeps the backend alive until it returned, and its thread frees
  /// it). Handles kept from get_group() stay valid objects but run nothing
  /// more. Blocks, also when called again (it waits for the submitted ops
  /// as the first call does); idempotent. Called on one
  /// of the group's own lanes (from a completion callback) it returns at
  /// once instead: later operations are refused, and the submitted ones and
  /// the backend's shutdown finish on the lane.
  void close();

  /// Whether close() was called.
  bool closed() const noexcept { return closed_.load(); }

  /// The context errors of this member carry.
  error_context context(op_kind op, int64_t seq) const noexcept;

  /// A call this rank refuses before it runs (a bad argument): it takes the
  /// op's sequence number all the same, so that when its peers ran the op,
  /// this rank's next op does not meet theirs (it would pair with it and
  /// mix their data); the ranks then fail instead (Gloo: timeout, shm: out
  /// of step). Returns a work completed with `why` under that number; the
  /// op history lists the call as failed.
  work refuse(op_kind op, caf::error why);

  /// This member's last operations of this group (at most 16), oldest
  /// first: what ran, how long, what is still queued. Logged when an op
  /// times out; the actor layer's driver collects it from every rank.
  std::vector<op_record> recent_ops() const;

 private:
  explicit group(group_config cfg);

  friend class persistent_op;

  template<class Fn>
  work submit(op_kind op, caf::error validation, Fn body, detail::lane& target);

  /// Checks an op once and binds it to this group (persistent_op).
  template<class Body>
  caf::expected<persistent_op> prepare(op_kind op, caf::error validation,
                                       Body body);

  /// One run or start of a persistent op, through submit.
  work start_persistent(const std::shared_ptr<detail::persistent_call>& call);

  /// Where this member's argument checks say an op was called.
  detail::call_site site_of(op_kind op) const;

  /// invalid_argument when a per-op timeout is out of range.
  caf::error check_op_timeout(op_kind op, milliseconds timeout) const;

  /// The op itself, on the thread that holds the lane: waits for the
  /// formation, refuses it on a broken group or unsupported tensors, runs
  /// the blocking form and records it; `started`: its history record says
  /// running already.
  template<class Fn>
  caf::error run_body(op_kind op, uint64_t seq, bool p2p, Fn& body,
                      bool started);

  /// Runs the blocking form of an op on the calling thread, which holds
  /// the lane; `started`: its history record already says running.
  template<class Fn>
  void run_task(const std::shared_ptr<detail::work_state>& state, op_kind op,
                bool p2p, Fn& body, bool started);

  /// Starts an op on the calling thread, which holds `target`'s claim,
  /// when the backend can take it without blocking (backend::start_*);
  /// false: nothing happened, the caller queues the blocking form.
  template<class Body>
  bool start_without_blocking(const std::shared_ptr<detail::work_state>& state,
                              op_kind op, bool p2p, Body& body,
                              detail::lane& target);

  /// Why the backend must not run the op (broken group, unsupported
  /// tensors), or none.
  caf::error refusal(op_kind op, int64_t seq, const device& dev,
                     dtype type) const;

  op_call call_of(uint64_t seq, milliseconds timeout) const noexcept;

  /// Logs a timeout and breaks the group on errors that leave the data
  /// plane in an unknown state.
  void after_failure(const caf::error& err);

  void break_with(const caf::error& err);

  /// The error for an exception the backend threw in op `seq`
  /// (out_of_memory for std::bad_alloc, else backend_error). The rank left
  /// the op somewhere in its protocol, so its peers cannot finish it: the
  /// group breaks with that error. The caller then aborts the group, which
  /// wakes the peers now instead of at the op's deadline.
  caf::error backend_threw(op_kind op, uint64_t seq, const std::exception& e);

  void log_recent_ops(const caf::error& err) const;
  // The op history's phases, each under submit_mtx_.
  void note_started(uint64_t seq, bool p2p);
  void note_finished(uint64_t seq, bool p2p, const caf::error& err);

  void track_pending(const std::shared_ptr<detail::work_state>& state,
                     op_kind op, bool p2p);

  /// The lane that runs `op`: sends have their own (send_lane_).
  detail::lane& lane_for(op_kind op) const noexcept {
    return op == op_kind::send ? *send_lane_ : *lane_;
  }

  group_config cfg_;
  std::unique_ptr<detail::lane> lane_;
  // Sends run on a lane of their own: a send completes only once the peer
  // has posted the matching receive, so on one lane a ring of
  // send_async + recv would deadlock.
  std::unique_ptr<detail::lane> send_lane_;
  // Created on the lane, used by whoever holds the lane. Shared so that
  // abort() can end the backend's ops outside backend_mtx_: their
  // completion callbacks may close the group, which takes that lock.
  std::shared_ptr<backend> backend_;
  mutable std::mutex backend_mtx_; // guards backend_ (abort() from outside)
  std::string backend_in_use_;     // guarded by backend_mtx_
  work formed_; // completes when the backend exists (or formation failed)
  std::atomic<bool> broken_{false};
  std::atomic<bool> closed_{false}; // set under submit_mtx_
  mutable std::mutex broken_mtx_;
  caf::error broken_reason_;
  // Collective sequence numbers are the data plane's tags, so every rank
  // must take the same ones: point-to-point ops, which only two ranks see,
  // count on their own. Both guarded by submit_mtx_.
  uint64_t next_seq_ = 0;
  uint64_t next_p2p_seq_ = 0;
  // Operations not known to be finished, oldest first; guarded by
  // submit_mtx_. abort() fails them all at once.
  struct pending_op {
    std::weak_ptr<detail::work_state> state;
    op_kind op;
    bool p2p;
  };
  std::deque<pending_op> pending_;
  mutable std::mutex submit_mtx_;
  op_history history_; // guarded by submit_mtx_ (note_started/finished)
};

using group_ptr = std::shared_ptr<group>;

} // namespace caf_collective
