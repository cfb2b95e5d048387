#include "caf_collective/group.hpp"

#include <exception>
#include <new>

#include <caf/expected.hpp>

#include "runtime/backend_factory.hpp"
#include "runtime/lane.hpp"
#include "runtime/op_bodies.hpp"
#include "runtime/persistent_call.hpp"
#include "runtime/validate.hpp"
#include "runtime/work_state.hpp"
#include "vocabulary/log.hpp"

namespace caf_collective {

namespace {

// Errors after which the data plane is in an unknown state: messages may
// be half sent, peers may be waiting. Argument errors leave it intact.
bool breaks_group(const caf::error& err) {
  switch (code_of(err)) {
    case errc::timeout:
    case errc::peer_lost:
    case errc::backend_error:
    case errc::aborted: return true;
    default: return !is_collective_error(err);
  }
}

bool timeout_allowed(milliseconds timeout) noexcept {
  return timeout.count() >= 0 && timeout <= max_timeout;
}

} // namespace

group::group(group_config cfg) : cfg_(std::move(cfg)) {
  lane_ =
    std::make_unique<detail::lane>(cfg_.name + "." + std::to_string(cfg_.rank));
  send_lane_ = std::make_unique<detail::lane>(cfg_.name + ".s" +
                                              std::to_string(cfg_.rank));
}

namespace {

// Takes the backend out of its group and shuts it down, outside the lock:
// shm's abort runs the completion callbacks of peers' started ops, which
// may reach this group and take that lock. A broken group's peers may be
// gone: the backend is told not to wait for them.
void retire(std::mutex& mtx, std::shared_ptr<backend>& slot, bool broken) {
  std::shared_ptr<backend> victim;
  {
    std::lock_guard<std::mutex> guard{mtx};
    victim = std::move(slot);
  }
  if (victim && broken) victim->abort("destroying a broken group");
}

} // namespace

group::~group() {
  retire(backend_mtx_, backend_, broken());
  send_lane_.reset();
  lane_.reset();
}

void group::release_on_lane(std::shared_ptr<group> g) {
  if (!g) return;
  auto* target = g->lane_.get();
  target->post([keep = std::move(g)]() mutable { keep.reset(); });
}

namespace {

// The thread abort_off_thread runs on, started by its first call; never
// destroyed, since aborts may come until the process exits.
detail::lane& abort_lane() {
  static auto* aborts =
    new detail::lane("aborts", std::chrono::microseconds{0});
  return *aborts;
}

} // namespace

void group::abort_off_thread(std::shared_ptr<group> g, std::string why) {
  if (!g) return;
  abort_lane().post([g = std::move(g), why = std::move(why)]() mutable {
    g->abort(std::move(why));
  });
}

caf::expected<std::shared_ptr<group>> group::make(group_config cfg,
                                                  work* formed) {
  if (auto err = detail::validate_config(cfg)) {
    detail::tell_followers_of_refusal(cfg, err);
    return err;
  }
  std::shared_ptr<group> self{new group(std::move(cfg))};
  auto state = std::make_shared<detail::work_state>(0);
  self->lane_->post([self, state] {
    // group::abort sets broken_: a formation in progress then ends within
    // about 50 ms with aborted instead of at its deadline.
    auto created = detail::make_backend(self->cfg_, &self->broken_);
    if (!created) {
      self->break_with(created.error());
      detail::lane::complete_when_idle(state, created.error());
      return;
    }
    {
      std::lock_guard<std::mutex> guard{self->backend_mtx_};
      self->backend_ = std::move(*created);
      self->backend_in_use_ = std::string{self->backend_->name()};
      // An abort that came while the backend was being made found none to
      // abort: its peers must still learn of it.
      if (self->broken()) {
        self->backend_->abort("the group was aborted while it formed");
        detail::lane::complete_when_idle(state, self->broken_reason());
        return;
      }
    }
    static auto& log = detail::logger_for("group");
    log.debug("group '{}' rank {}/{} formed on {}", self->cfg_.name,
              self->cfg_.rank, self->cfg_.world_size, self->backend_->name());
    detail::lane::complete_when_idle(state, {});
  });
  self->formed_ = work{state};
  if (formed != nullptr) *formed = self->formed_;
  return self;
}

caf::expected<std::shared_ptr<group>> group::create(group_config cfg) {
  work formed;
  auto result = make(std::move(cfg), &formed);
  if (!result) return result;
  if (auto err = formed.wait()) return err;
  return result;
}

std::string group::backend_in_use() const {
  std::lock_guard<std::mutex> guard{backend_mtx_};
  return backend_in_use_;
}

caf::error group::broken_reason() const {
  std::lock_guard<std::mutex> guard{broken_mtx_};
  return broken_reason_;
}

void group::break_with(const caf::error& err) {
  std::lock_guard<std::mutex> guard{broken_mtx_};
  if (!broken_reason_) {
    broken_reason_ = err;
    static auto& log = detail::logger_for("group");
    // A deliberate abort (peer lost, group destroyed) is expected: info.
    auto level =
      code_of(err) == errc::aborted ? spdlog::level::info : spdlog::level::warn;
    log.log(level, "group '{}' rank {}/{} is broken: {}", cfg_.name, cfg_.rank,
            cfg_.world_size, render(err));
  }
  broken_ = true;
}

void group::log_recent_ops(const caf::error& err) const {
  static auto& log = detail::logger_for("group");
  log.warn("group '{}' rank {}/{}: {}\nrecent operations of this rank, oldest "
           "first:\n{}",
           cfg_.name, cfg_.rank, cfg_.world_size, render(err),
           describe(recent_ops()));
}

std::vector<op_record> group::recent_ops() const {
  std::lock_guard<std::mutex> guard{submit_mtx_};
  return history_.snapshot();
}

// The history shares the submission's lock: submit() records an op's
// arrival while it holds it anyway. Callers hold no other lock of this
// group but, through a backend's abort, backend_mtx_: the order is
// backend_mtx_ -> submit_mtx_, and nothing takes backend_mtx_ under
// submit_mtx_.
void group::note_started(uint64_t seq, bool p2p) {
  std::lock_guard<std::mutex> guard{submit_mtx_};
  history_.started(seq, p2p);
}

void group::note_finished(uint64_t seq, bool p2p, const caf::error& err) {
  std::lock_guard<std::mutex> guard{submit_mtx_};
  history_.finished(seq, p2p, err);
}

void group::abort(std::string why) {
  // The group's own reason names no op: several may be pending.
  auto where = error_context::member(cfg_.name, cfg_.rank, cfg_.world_size);
  break_with(make_error(errc::aborted, where, "group aborted: " + why));
  {
    // The backend ends its running ops: they return from the backend soon
    // (Gloo's failed connections and shm's abort mark wake their waits),
    // and their lanes report them. Not under backend_mtx_: shm completes
    // ops started without blocking right here, and their callbacks may
    // close the group. The copy keeps the backend alive until the abort
    // returned, even if such a callback shut the group down.
    std::shared_ptr<backend> target;
    {
      std::lock_guard<std::mutex> guard{backend_mtx_};
      target = backend_;
    }
    if (target) target->abort(why);
  }
  std::deque<pending_op> pending;
  {
    std::lock_guard<std::mutex> guard{submit_mtx_};
    pending.swap(pending_);
  }
  // Each op that has not started fails now, naming itself, and its history
  // record says so. A running op is not reported here: its handle
  // completes when the backend returned, when nothing touches its buffers
  // any more (the owner may free them as soon as the handle completes).
  for (auto& entry : pending) {
    auto state = entry.state.lock();
    if (!state || !state->claim_unstarted()) continue;
    auto err = make_error(errc::aborted,
                          context(entry.op, static_cast<int64_t>(state->seq())),
                          "group aborted: " + why);
    // The history first: whoever wakes on the handle may read it.
    note_finished(state->seq(), entry.p2p, err);
    state->complete(std::move(err));
  }
}

void group::track_pending(const std::shared_ptr<detail::work_state>& state,
                          op_kind op, bool p2p) {
  // Called with submit_mtx_ held. Forget finished operations at the front
  // so the list stays as long as the operations in flight.
  while (!pending_.empty()) {
    auto front = pending_.front().state.lock();
    if (front && !front->done()) break;
    pending_.pop_front();
  }
  pending_.push_back({state, op, p2p});
}

namespace {

// Lets go of a lane claimed for an op run on the caller's thread, however
// the op ends (an exception included: a lane left claimed runs nothing
// again).
class claim_release {
 public:
  explicit claim_release(detail::lane& target) noexcept : target_(target) {
    // nop
  }
  ~claim_release() {
    if (owned_) target_.release();
  }
  claim_release(const claim_release&) = delete;
  claim_release& operator=(const claim_release&) = delete;

  /// The claim passed on (to an op that lets go of it when done).
  void dismiss() noexcept { owned_ = false; }

 private:
  detail::lane& target_;
  bool owned_ = true;
};

// Completes once `target` ran every task posted to it so far.
work lane_marker(detail::lane& target) {
  auto state = std::make_shared<detail::work_state>(0);
  target.post([state] { state->complete({}); });
  return work{state};
}

} // namespace

void group::drain() {
  // On one of our own lanes (a completion callback) the marker would queue
  // behind the very task this thread runs: refuse rather than wait forever.
  if (lane_->on_lane() || send_lane_->on_lane()) {
    auto where = error_context::member(cfg_.name, cfg_.rank, cfg_.world_size);
    throw collective_error{make_error(
      errc::invalid_argument, where,
      "drain() called on one of the group's own lanes (from a completion "
      "callback) would wait for itself; drain from another thread")};
  }
  auto main_done = lane_marker(*lane_);
  auto sends_done = lane_marker(*send_lane_);
  main_done.wait();
  sends_done.wait();
}

void group::close() {
  bool again = false;
  {
    std::lock_guard<std::mutex> guard{submit_mtx_};
    again = closed_.exchange(true);
  }
  if (again) {
    // Another close is under way (or done): this caller too may free the
    // buffers of the ops submitted before once it returns, so it waits for
    // them as the first one does (except on a lane, which cannot).
    if (!lane_->on_lane() && !send_lane_->on_lane()) drain();
    return;
  }
  // Shuts the backend down once nothing runs on the lanes any more.
  auto shut_down = [](group& g) {
    retire(g.backend_mtx_, g.backend_, g.broken());
  };
  if (lane_->on_lane() || send_lane_->on_lane()) {
    // A completion callback destroys its own group: drain() here would wait
    // for the task this thread is running, forever. Refusing would not do
    // either: destroy_collective_group already took the group out of its
    // table, and an exception from a callback is only logged. So the group
    // closes without waiting: it refuses every later op from now on
    // (closed_), the ops queued already still run in order, and the backend
    // shuts down as the main lane's last task, once the send lane has run
    // what was posted to it too. The task holds the group; this thread
    // returns at once, and the process stays usable (the name may be
    // initialized again meanwhile).
    static auto& log = detail::logger_for("group");
    log.info("group '{}' rank {}/{} closed from its own lane (a completion "
             "callback): its queued ops and the backend's shutdown finish on "
             "the lane",
             cfg_.name, cfg_.rank, cfg_.world_size);
    lane_->post([self = shared_from_this(), shut_down] {
      lane_marker(*self->send_lane_).wait();
      shut_down(*self);
    });
    return;
  }
  drain();
  // Nothing runs on the lanes any more: shut the backend down here.
  shut_down(*this);
}

error_context group::context(op_kind op, int64_t seq) const noexcept {
  return {cfg_.name, op, seq, cfg_.rank, cfg_.world_size};
}

detail::call_site group::site_of(op_kind op) const {
  return {context(op, -1), cfg_.rank, cfg_.world_size};
}

template<class Fn>
caf::error group::run_body(op_kind op, uint64_t seq, bool p2p, Fn& body,
                           bool started) {
  // The send lane may run before formation finished on the main lane.
  if (!formed_.ready()) formed_.wait();
  if (!started) note_started(seq, p2p);
  auto err = refusal(op, static_cast<int64_t>(seq), body.dev, body.type);
  if (!err) {
    try {
      err = body(*backend_, call_of(seq, body.timeout));
    } catch (const std::exception& e) {
      err = backend_threw(op, seq, e);
      abort(render(err)); // on the lane: it may wait for the backend
    }
    after_failure(err);
  }
  note_finished(seq, p2p, err);
  return err;
}

template<class Fn>
void group::run_task(const std::shared_ptr<detail::work_state>& state,
                     op_kind op, bool p2p, Fn& body, bool started) {
  if (!state->start()) return; // an abort ended it before it started
  auto err = run_body(op, state->seq(), p2p, body, started);
  detail::lane::complete_when_idle(state, std::move(err));
}

caf::error group::check_op_timeout(op_kind op, milliseconds timeout) const {
  if (timeout_allowed(timeout)) return {};
  return make_error(errc::invalid_argument, context(op, -1),
                    "timeout " + std::to_string(timeout.count()) +
                      " ms is outside [0, " +
                      std::to_string(max_timeout.count()) + "] ms");
}

work group::refuse(op_kind op, caf::error why) {
  bool p2p = op == op_kind::send || op == op_kind::recv;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> guard{submit_mtx_};
    seq = (p2p ? next_p2p_seq_ : next_seq_)++;
    // In the history too: comparing ranks' recent ops is how a user finds
    // the call that put them out of step, and this one did.
    history_.queued(seq, p2p, op, 0);
    history_.finished(seq, p2p, why);
  }
  return work::completed(seq, std::move(why));
}

template<class Fn>
work group::submit(op_kind op, caf::error validation, Fn body,
                   detail::lane& target) {
  // (The timeout's error is built only when it is wrong: every caf::error
  // costs calls into libcaf_core.)
  if (!validation && !timeout_allowed(body.timeout))
    validation = check_op_timeout(op, body.timeout);
  if (validation) return refuse(op, std::move(validation));
  std::shared_ptr<detail::work_state> state;
  bool p2p = op == op_kind::send || op == op_kind::recv;
  // The op as a lane task: it outlives this call, so it keeps copies of
  // the caller's arguments.
  auto post = [this, &state, op, p2p, &body, &target](bool ahead) {
    body.keep();
    auto task = [self = shared_from_this(), state, op, p2p,
                 task = std::move(body)]() mutable {
      self->run_task(state, op, p2p, task, false);
    };
    if (ahead)
      target.post_ahead(std::move(task));
    else
      target.post(std::move(task));
  };
  bool run_here = false;
  bool start_here = false;
  uint64_t seq = 0;
  {
    // Sequence numbers follow lane order, so both are taken together.
    std::lock_guard<std::mutex> guard{submit_mtx_};
    if (closed_)
      return work::completed(
        0, make_error(errc::aborted, context(op, -1),
                      "the group was destroyed; this handle runs nothing "
                      "more (initialize the group again and take a new "
                      "handle from it: get_group, or prepare a persistent op "
                      "again)"));
    // A blocking caller waits for the result anyway: when the lane is idle
    // it runs the operation itself, in order, saving two thread hand-offs.
    // Any other caller may still start an op that needs no waiting on its
    // own thread (op_body::start), holding the lane until the op is over.
    if (detail::run_inline_scope::active()) {
      run_here = target.try_claim();
      // On the lane's own thread (a completion callback) with ops queued,
      // the blocking caller would wait for the thread it runs on.
      // (No sequence number: unlike a bad argument, this call is about
      // this rank's own timing, and its peers need not have made it.)
      if (!run_here && target.on_lane()) {
        return work::completed(
          0, make_error(errc::invalid_argument, context(op, -1),
                        "a blocking op called on the group's own lane (from "
                        "a completion callback) while ops are queued there "
                        "would wait for itself; submit it async instead"));
      }
    } else if constexpr (Fn::startable) {
      start_here = target.try_claim();
    }
    seq = p2p ? next_p2p_seq_++ : next_seq_++;
    // abort() ends the tracked ops for whoever waits on their handles. An
    // op run here has no such waiter and needs no shared state: its caller
    // is inside it, and the backend's abort ends it (Gloo's, for a message
    // half through inside Gloo's own collectives, only at the op's
    // deadline: docs/algorithms.md, "Abort and destroy").
    if (!run_here) {
      state = std::make_shared<detail::work_state>(seq);
      track_pending(state, op, p2p);
    }
    // An op run here starts now: one history entry instead of two.
    history_.queued(seq, p2p, op, body.bytes, run_here);
    if (!run_here && !start_here) post(false);
  }
  if (run_here) {
    caf::error err;
    {
      detail::lane::task_scope completions; // announced after the release
      claim_release release{target};
      err = run_body(op, seq, p2p, body, true);
    }
    return work::completed(seq, std::move(err));
  }
  if (start_here) {
    claim_release release{target};
    if (start_without_blocking(state, op, p2p, body, target)) {
      release.dismiss(); // the started op lets go of the lane when done
      return work{state};
    }
    // Queued before letting go of the lane, and ahead of what others
    // queued while this thread held it (a later op, or the drain of a
    // close): it stays in order, and runs before the backend shuts down.
    post(true);
  }
  return work{state};
}

caf::error group::refusal(op_kind op, int64_t seq, const device& dev,
                          dtype type) const {
  if (broken())
    return make_error(errc::aborted, context(op, seq),
                      "group is broken by an earlier failure: " +
                        render(broken_reason()));
  if (!backend_)
    return make_error(errc::aborted, context(op, seq),
                      "the group was destroyed before this op ran");
  if (op != op_kind::barrier && !backend_->supports(op, dev.kind, type))
    return make_error(errc::unsupported, context(op, seq),
                      "backend " + std::string{backend_->name()} +
                        " cannot run " + std::string{to_string(op)} + " on " +
                        std::string{to_string(type)} + " tensors on " +
                        to_string(dev));
  return {};
}

op_call group::call_of(uint64_t seq, milliseconds timeout) const noexcept {
  op_call call{seq, cfg_.timeout};
  if (timeout.count() > 0) call.timeout = timeout;
  return call;
}

// The exception goes no further: on a lane it would end the process.
caf::error group::backend_threw(op_kind op, uint64_t seq,
                                const std::exception& e) {
  auto where = context(op, static_cast<int64_t>(seq));
  auto err =
    dynamic_cast<const std::bad_alloc*>(&e) != nullptr
      ? make_error(errc::out_of_memory, where,
                   "ran out of memory inside the backend (std::bad_alloc)")
      : make_error(errc::backend_error, where,
                   std::string{"the backend threw: "} + e.what());
  break_with(err);
  return err;
}

void group::after_failure(const caf::error& err) {
  if (err && code_of(err) == errc::timeout) log_recent_ops(err);
  if (err && breaks_group(err)) break_with(err);
}

template<class Body>
bool group::start_without_blocking(
  const std::shared_ptr<detail::work_state>& state, op_kind op, bool p2p,
  Body& body, detail::lane& target) {
  // Whatever needs an error goes the usual way: the lane task reports it.
  auto seq = state->seq();
  if (!formed_.ready() ||
      refusal(op, static_cast<int64_t>(seq), body.dev, body.type))
    return false;
  if (!state->start()) { // an abort ended it already
    target.release();
    return true;
  }
  note_started(seq, p2p);
  // Lets go of the lane before telling the owner: its next op, submitted
  // from the completion callback, then starts on its own thread too.
  op_completion done = [self = shared_from_this(), state, p2p,
                        lane = &target](caf::error err) {
    self->after_failure(err);
    self->note_finished(state->seq(), p2p, err);
    lane->release();
    state->complete(std::move(err));
  };
  bool started = false;
  try {
    started = body.start(*backend_, call_of(seq, body.timeout), done);
  } catch (const std::exception& e) {
    // Whatever the backend published before it threw, no peer can rely on
    // it: the op fails here (and lets go of the lane) rather than run again.
    auto err = backend_threw(op, seq, e);
    // The caller may be an actor's handler on a scheduler thread, which
    // must not wait for the backend's abort.
    abort_off_thread(shared_from_this(), render(err));
    done(std::move(err));
    return true;
  }
  if (started) return true;
  state->unstart(); // the lane task runs it
  return false;
}

work group::send(const tensor_view& in, send_options opts) {
  return submit(op_kind::send,
                detail::check_send(site_of(op_kind::send), in, opts),
                detail::send_body(in, opts), lane_for(op_kind::send));
}

work group::recv(const tensor_view& out, recv_options opts) {
  return submit(op_kind::recv,
                detail::check_recv(site_of(op_kind::recv), out, opts),
                detail::recv_body(out, opts), *lane_);
}

work group::broadcast(const tensor_view& in, const tensor_view& out,
                      broadcast_options opts) {
  return submit(
    op_kind::broadcast,
    detail::check_broadcast(site_of(op_kind::broadcast), in, out, opts),
    detail::broadcast_body(in, out, opts), *lane_);
}

work group::reduce(const tensor_view& in, const tensor_view& out,
                   reduce_options opts) {
  return submit(op_kind::reduce,
                detail::check_reduce(site_of(op_kind::reduce), in, out, opts),
                detail::reduce_body(in, out, opts), *lane_);
}

work group::allreduce(const tensor_view& in, const tensor_view& out,
                      allreduce_options opts) {
  return submit(
    op_kind::allreduce,
    detail::check_allreduce(site_of(op_kind::allreduce), in, out, opts),
    detail::allreduce_body(in, out, opts), *lane_);
}

work group::allgather(const tensor_view& in, const tensor_view& out,
                      allgather_options opts) {
  return submit(op_kind::allgather,
                detail::check_allgather(site_of(op_kind::allgather), in, out),
                detail::allgather_body(in, out, opts), *lane_);
}

work group::allgatherv(const tensor_view& in, const tensor_view& out,
                       allgatherv_options opts) {
  return submit(
    op_kind::allgatherv,
    detail::check_allgatherv(site_of(op_kind::allgatherv), in, out, opts),
    detail::allgatherv_body(in, out, opts), *lane_);
}

work group::gather(const tensor_view& in, const tensor_view& out,
                   gather_options opts) {
  return submit(op_kind::gather,
                detail::check_gather(site_of(op_kind::gather), in, out, opts),
                detail::gather_body(in, out, opts), *lane_);
}

work group::scatter(const tensor_view& in, const tensor_view& out,
                    scatter_options opts) {
  return submit(op_kind::scatter,
                detail::check_scatter(site_of(op_kind::scatter), in, out, opts),
                detail::scatter_body(in, out, opts), *lane_);
}

work group::reduce_scatter(const tensor_view& in, const tensor_view& out,
                           reduce_scatter_options opts) {
  return submit(op_kind::reduce_scatter,
                detail::check_reduce_scatter(site_of(op_kind::reduce_scatter),
                                             in, out, opts),
                detail::reduce_scatter_body(in, out, opts), *lane_);
}

work group::alltoall(const tensor_view& in, const tensor_view& out,
                     alltoall_options opts) {
  return submit(op_kind::alltoall,
                detail::check_alltoall(site_of(op_kind::alltoall), in, out),
                detail::alltoall_body(in, out, opts), *lane_);
}

work group::alltoallv(const tensor_view& in, const tensor_view& out,
                      alltoallv_options opts) {
  return submit(
    op_kind::alltoallv,
    detail::check_alltoallv(site_of(op_kind::alltoallv), in, out, opts),
    detail::alltoallv_body(in, out, opts), *lane_);
}

work group::barrier(barrier_options opts) {
  return submit(op_kind::barrier,
                detail::check_timeout(site_of(op_kind::barrier), opts),
                detail::barrier_body(opts), *lane_);
}

// persistent_op.cpp submits persistent ops through this one.
template work group::submit(op_kind, caf::error, detail::persistent_body,
                            detail::lane&);

} // namespace caf_collective
