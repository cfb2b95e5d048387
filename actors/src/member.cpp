// The member protocol. Every handler returns at once: group formation and
// operations run on the group's lane, and their completions come back as
// messages to this actor (work::on_complete -> anon_send).
#include "caf_collective/member.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include <caf/all.hpp>

#include "caf_collective/config_options.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"
#include "caf_collective/member_jobs.hpp"
#include "caf_collective/member_ops.hpp"
#include "caf_collective/object_store.hpp"
#include "caf_collective/rendezvous_actor.hpp"

#include "layouts.hpp"
#include "member_store.hpp"
#include "member_test_hooks.hpp"
#include "op_answer.hpp"
#include "op_plan.hpp"
#include "output_owners.hpp"
#include "own_ops.hpp"

namespace caf_collective {

namespace {

using formed_atom = caf::atom_constant<caf::atom("col_formed")>;
using submit_atom = caf::atom_constant<caf::atom("col_submit")>;
using job_done_atom = caf::atom_constant<caf::atom("col_jdone")>;
// (name, key): a member-initiated op queued before its group's init checks
// whether it still waits for it.
using form_wait_atom = caf::atom_constant<caf::atom("col_fwait")>;

// How much longer than the group's timeout and the driver's grace a
// member-initiated op waits for its group's init: the driver's formation
// deadline, which names the missing ranks, normally ends the wait first.
constexpr milliseconds init_wait_margin{1000};

using detail::op_answer;
using detail::op_answer_ptr;
using detail::op_plan;

// The CAF scheduler thread a member handler runs on, while it submits ops:
// a completion that runs there (the op finished at once, for this member
// or a peer) queues its message on that thread instead of waking another
// one. Elsewhere (lanes, the shm watchdog): none, as for anon_send.
class worker_scope {
 public:
  explicit worker_scope(caf::execution_unit* unit) : previous_(current_) {
    current_ = unit;
  }
  ~worker_scope() { current_ = previous_; }
  worker_scope(const worker_scope&) = delete;
  worker_scope& operator=(const worker_scope&) = delete;

  static caf::execution_unit* current() noexcept { return current_; }

 private:
  static thread_local caf::execution_unit* current_;
  caf::execution_unit* previous_;
};

thread_local caf::execution_unit* worker_scope::current_ = nullptr;

// One op between start and completion, by the driver or by the member.
struct inflight {
  op_plan plan;
  dtype type_hint = dtype::float32;
  /// A tensor op: its buffers and where its answer goes (op_answer.hpp).
  op_answer_ptr answer;
  /// An object op: blocking work on a thread of its own (member_jobs.hpp),
  /// answered through `rp` by this member.
  group_job_ptr job;
  caf::response_promise rp;
  /// Handed to the lane (or its thread started): an op runs once.
  bool launched = false;

  /// Answered already: by its completion, which leaves the entry to the
  /// member (forget_answered).
  bool answered() const { return answer && answer->answered(); }

  /// Fails the op, unless its completion answered first.
  void fail(caf::error err, caf::execution_unit* ctx) {
    if (answer)
      answer->fail(std::move(err), ctx);
    else
      rp.deliver(std::move(err));
  }

  /// The member terminates: nobody answers. True if it was in flight.
  bool withdraw() { return answer ? answer->withdraw() : true; }

  /// The member terminates. The driver learns it from its down message and
  /// the member itself asks nothing any more, so their answers are
  /// withdrawn; anyone else who asked through member_api hears of it only
  /// through the answer (CAF 0.17 sends nothing for a request whose
  /// receiver is gone): it gets `err`. True if the op was in flight.
  bool end_with_member(const caf::actor_addr& self,
                       const caf::actor_addr& driver, caf::error err) {
    if (answer && answer->answers_other_than(self, driver))
      return answer->fail(std::move(err), nullptr);
    return withdraw();
  }
};

struct member_group {
  membership m;
  uint64_t gen = 0;
  group_ptr grp;
  std::string state = "registered";
  caf::error reason;
  // By key: the driver's sequence number for driver-run groups, the
  // member's own count for members-run groups (a group has one source).
  std::map<uint64_t, inflight> ops;
  /// The key of the object op running on its thread (0: none). Ops started
  /// after it wait until it finished: its own tensor ops must come first.
  uint64_t job_running = 0;
  /// The input the driver's last check held for the op it will start as
  /// `seq` (check_atom): the driver checks one op of a group at a time.
  struct held_input {
    uint64_t seq = 0;
    object_ref ref;
    pinned_tensor pin;
  };
  std::optional<held_input> held;

  /// The input of the driver's start `msg`: the one its check held, else
  /// the store's object (a member of the driver's node gets the driver's
  /// pin in the message). Whatever the check held is let go either way.
  caf::expected<pinned_tensor> input_of(start_msg& msg,
                                        const object_store& store) {
    auto held_now = std::exchange(held, std::nullopt);
    if (msg.checked_in) return std::move(msg.checked_in);
    if (held_now && held_now->seq == msg.seq && held_now->ref == msg.in)
      return std::move(held_now->pin);
    return store.pin(msg.in);
  }
};

error_context context_of(const member_group& g, op_kind op) {
  return error_context{g.m.group, op, -1, g.m.rank, g.m.world_size};
}

// The context of a waiting op: an object op names no one op kind.
error_context context_of(const member_group& g, const inflight& op) {
  auto where = context_of(g, op.plan.op);
  if (op.job) where.op = -1;
  return where;
}

// Drops the entries of ops their completions answered.
void forget_answered(member_group& g) {
  std::erase_if(g.ops,
                [](const auto& entry) { return entry.second.answered(); });
}

// Lets go of a group without blocking the calling scheduler thread: a
// healthy group's teardown meets its peers (up to 5 s on Gloo), so it runs
// on the group's own lane; a group with ops in flight is aborted first.
// The member is terminating: the driver's and its own ops in flight are
// answered by nobody (the driver learns of the end from the member's down
// message); another actor that asked through member_api gets aborted
// (inflight::end_with_member).
void let_go(const std::string& name, member_group& g,
            const caf::actor_addr& self, const caf::actor_addr& driver) {
  bool in_flight = false;
  for (auto& [key, op] : g.ops)
    in_flight =
      op.end_with_member(self, driver,
                         make_error(errc::aborted, context_of(g, op.plan.op),
                                    "the member terminated before the op "
                                    "finished")) ||
      in_flight;
  g.ops.clear();
  if (!g.grp) return;
  // A group still forming is aborted too: its formation would otherwise
  // wait for its peers up to its timeout, and the actor system's shutdown
  // with it (member_store.hpp). The abort ends its store waits.
  if (in_flight || g.state == "forming")
    group::abort_off_thread(g.grp, "member of group '" + name + "' terminated");
  group::release_on_lane(std::move(g.grp));
}

struct member_state {
  driver_actor driver;
  object_store_ptr store;
  caf::expected<collective_settings> settings{collective_settings{}};
  std::map<std::string, member_group> groups;
  // Keys of member-initiated ops: increasing over the member's life, not
  // per membership, so a timer of an op of an earlier membership of the
  // same group (form_wait_atom) never matches an op of a later one.
  uint64_t own_keys = 0;
  /// The driver's grace (grace_atom): its formation deadline comes this
  /// long after the group's timeout. 0 until the driver said.
  milliseconds driver_grace{0};

  ~member_state() {
    // (Emptied by the member's exit already; the member's own requests
    // would go to a dead mailbox.)
    for (auto& [name, g] : groups)
      let_go(name, g, caf::actor_addr{}, driver.address());
  }
};

// The error a member-initiated op gets when its group cannot take it, or
// none.
caf::error refuse_member_op(const member_group* g, const std::string& name,
                            const member_op& req) {
  if (!g)
    return make_error(errc::unknown_group,
                      "member-initiated " + std::string{to_string(req.op)} +
                        ": this member is not in group '" + name + "'");
  if (!is_valid(req.op))
    return make_error(errc::invalid_argument,
                      "member-initiated op on group '" + name + "': " +
                        "op kind " + std::to_string(static_cast<int>(req.op)) +
                        " is not one of the collective or point-to-point ops");
  if (g->m.ops_from != op_source::members)
    return make_error(errc::unsupported, context_of(*g, req.op),
                      "the group takes its ops from its driver "
                      "(membership ops_from = driver); spawn its members "
                      "with ops_from = members to start ops from handlers");
  // A group still forming takes the op: it waits for the group.
  if (g->state == "broken" || g->state == "failed")
    return g->reason ? g->reason
                     : make_error(errc::aborted, context_of(*g, req.op),
                                  "group is " + g->state);
  return {};
}

// The same rules for an object op (member_jobs.hpp), named by `what`.
caf::error refuse_member_job(const member_group* g, const std::string& name,
                             const std::string& what) {
  auto where = "group '" + name + "' " + what + ": ";
  if (!g)
    return make_error(errc::unknown_group,
                      where + "this member is not in the group");
  if (g->m.ops_from != op_source::members)
    return make_error(errc::unsupported,
                      where + "the group takes its ops from its driver "
                              "(membership ops_from = driver)");
  if (g->state == "broken" || g->state == "failed")
    return g->reason
             ? g->reason
             : make_error(errc::aborted, where + "group is " + g->state);
  return {};
}

// Where an op's output lives: beside its input, or, for a rank with none
// (scatter off the root, a receiver), where the group's backend moves data:
// NCCL only moves device memory and refuses a host output.
device output_device(const member_group& g, const tensor* in) {
  if (in != nullptr) return in->dev();
  return g.m.backend == "nccl" ? device::cuda(g.m.cuda_device) : device::cpu();
}

// Turns a member's own request into what its lane runs: pins the input,
// allocates the output (same layouts as the driver computes) and puts
// send/recv into the driver's form (root = source, peer = destination).
caf::expected<inflight> plan_member_op(const member_group& g,
                                       const object_store_ptr& store,
                                       const caf::actor_addr& member,
                                       const member_op& req) {
  auto ctx = context_of(g, req.op);
  auto rank = g.m.rank;
  auto ws = g.m.world_size;
  inflight op;
  op.answer = std::make_shared<op_answer>(store, member);
  auto& answer = *op.answer;
  op.plan.op = req.op;
  op.plan.params = req.params;
  op.plan.tag = req.tag;
  op.plan.send_counts.assign(req.send_counts.begin(), req.send_counts.end());
  op.plan.recv_counts.assign(req.recv_counts.begin(), req.recv_counts.end());
  auto& p = op.plan.params;
  if (req.op == op_kind::send) {
    p.root = rank;
  } else if (req.op == op_kind::recv) {
    if (req.params.peer == rank)
      return make_error(errc::invalid_argument, ctx,
                        "recv from rank " + std::to_string(rank) +
                          ", the caller itself");
    p.root = req.params.peer;
    p.peer = rank;
  }
  bool without_input = req.op == op_kind::barrier || req.op == op_kind::recv ||
                       (req.op == op_kind::scatter && rank != p.root);
  if (!without_input && !req.in.valid())
    return make_error(errc::invalid_argument, ctx, "names no object");
  if (req.in.valid()) {
    if (req.in.node != store->node())
      return make_error(errc::unknown_object, ctx,
                        "object " + std::to_string(req.in.id) +
                          " lives on node " + req.in.node +
                          ", not on this member's node " + store->node());
    auto pin = store->pin(req.in);
    if (!pin) return std::move(pin.error());
    answer.in = std::move(*pin);
    answer.in_ref = req.in;
  }
  answer.in_place = detail::in_place(req.op);
  bool needs_layout = req.op == op_kind::recv || req.op == op_kind::scatter;
  if (needs_layout && !req.has_layout)
    return make_error(errc::invalid_argument, ctx,
                      "needs the layout of its output");
  op.type_hint = answer.in ? answer.in->type() : req.layout.type;
  std::optional<shape_type> out_shape;
  const shape_type none;
  const auto& in_shape = answer.in ? answer.in->shape() : none;
  auto sum = [](const auto& xs) {
    return static_cast<int64_t>(
      std::accumulate(xs.begin(), xs.end(), uint64_t{0}));
  };
  switch (req.op) {
    case op_kind::allgather:
      out_shape = detail::stacked_shape(in_shape, ws);
      break;
    case op_kind::gather:
      if (rank == p.root) out_shape = detail::stacked_shape(in_shape, ws);
      break;
    case op_kind::allgatherv: out_shape = shape_type{sum(p.counts)}; break;
    case op_kind::reduce_scatter:
      out_shape = detail::slice_shape(in_shape, answer.in->numel(), ws);
      break;
    case op_kind::alltoall: out_shape = in_shape; break;
    case op_kind::alltoallv:
      out_shape = shape_type{sum(req.recv_counts)};
      break;
    case op_kind::scatter:
    case op_kind::recv: out_shape = req.layout.shape; break;
    default: break;
  }
  if (out_shape) {
    auto out = tensor::empty(op.type_hint, *out_shape,
                             output_device(g, answer.in.get()));
    if (!out) return std::move(out.error());
    answer.out = std::make_shared<tensor>(std::move(*out));
  }
  return op;
}

} // namespace

group_job::~group_job() {
  // nop
}

caf::behavior member_protocol(caf::event_based_actor* self, driver_actor driver,
                              std::vector<membership> groups) {
  auto st = std::make_shared<member_state>();
  st->driver = driver;
  st->store = local_store(self->system());
  // The collective.* settings (config_options.hpp) this node's groups form
  // with: the address Gloo binds to. A wrong setting fails each formation,
  // naming it.
  st->settings = settings_of(self->system());
  auto node = node_name(self->system());
  // Fails every op of the group not answered yet.
  auto fail_all = [self](member_group& g, const caf::error& err) {
    for (auto& [key, op] : g.ops)
      op.fail(err, self->context());
    g.ops.clear();
  };
  // The driver's loss (its node lost, or an exit whose aborts never came)
  // ends the groups it runs and those it has yet to form: nothing would
  // start, form or abort them any more. Groups whose members run their own
  // ops keep running once formed.
  self->monitor(driver);
  self->set_down_handler([self, st](caf::down_msg& dm) {
    if (dm.source != st->driver.address()) return;
    for (auto& [name, g] : st->groups) {
      g.held.reset(); // its start will never come
      bool needs_driver = !g.grp || g.m.ops_from == op_source::driver;
      if (g.state == "broken" || g.state == "failed" || !needs_driver) continue;
      auto why = "its driver is gone (" + render(dm.reason) + ")";
      g.state = "broken";
      g.reason =
        make_error(errc::peer_lost,
                   error_context::member(name, g.m.rank, g.m.world_size), why);
      if (g.grp) group::abort_off_thread(g.grp, render(g.reason));
      // Each waiting op's error names that op, as its other failures do.
      for (auto& [key, op] : g.ops) {
        op.fail(make_error(errc::peer_lost, context_of(g, op), why),
                self->context());
      }
      g.ops.clear();
    }
  });
  auto join = [self, st, node, fail_all](membership m) {
    auto& g = st->groups[m.group];
    if (g.grp) {
      group::abort_off_thread(g.grp, "membership replaced by a new join");
      group::release_on_lane(std::move(g.grp));
    }
    // Ops of the old membership that never reached a lane (waiting for
    // init, held behind an object op, delayed) would otherwise never be
    // answered: their entry goes now.
    fail_all(
      g, make_error(errc::aborted, "group '" + m.group +
                                     "': membership replaced by a new join"));
    g = member_group{};
    g.m = m;
    self->send(st->driver, reg_atom::value, std::move(m), node);
  };
  for (auto& m : groups)
    join(std::move(m));
  // The state dies with the actor, whichever way it exits.
  self->attach_functor([st, owner = self->id(), ctrl = self->ctrl(),
                        me = self->address()](const caf::error&) {
    detail::unregister_own_ops(ctrl);
    // Only a member with ops in flight aborts: an idle group tears down
    // cleanly (on its lane) and its peers see no spurious failure.
    for (auto& [name, g] : st->groups)
      let_go(name, g, me, st->driver.address());
    st->groups.clear();
    // A ref owner's death releases its refs: the outputs of its own ops
    // here (col::put's objects go through the owner registry's watch).
    st->store->release_owned_by(owner);
  });
  auto find = [st](const std::string& name, uint64_t gen) -> member_group* {
    auto i = st->groups.find(name);
    if (i == st->groups.end() || (gen != 0 && i->second.gen != gen))
      return nullptr;
    return &i->second;
  };
  auto addr = self->address();
  // Hands op `seq` to the group's lane; its completion answers the
  // requester (op_answer.hpp). Without a group yet, the op waits in `ops`
  // until init.
  auto launch = [=](const std::string& name, uint64_t seq) {
    auto i = st->groups.find(name);
    if (i == st->groups.end()) return;
    auto& g = i->second;
    auto j = g.ops.find(seq);
    if (j == g.ops.end() || !g.grp || j->second.launched) return;
    if (g.job_running != 0 && seq > g.job_running) return; // after the job
    auto& op = j->second;
    op.launched = true;
    auto gen = g.gen;
    if (op.job) {
      g.job_running = seq;
      // Blocks while it runs its tensor ops on the group: a thread of its
      // own, holding the group until it is done.
      std::thread{[grp = g.grp, job = op.job, addr, name, gen, seq] {
        auto result = job->run(*grp);
        auto err = result ? caf::error{} : std::move(result.error());
        auto msg = result ? std::move(*result) : caf::message{};
        if (auto hdl = caf::actor_cast<caf::actor>(addr))
          caf::anon_send(hdl, job_done_atom::value, name, gen, seq,
                         std::move(msg), std::move(err));
      }}.detach();
      return;
    }
    const auto& answer = op.answer;
    tensor_view in = answer->in ? answer->in->view()
                                : tensor_view{nullptr, op.type_hint, size_t{0}};
    tensor_view out = answer->out
                        ? answer->out->view()
                        : tensor_view{nullptr, op.type_hint, size_t{0}};
    // Small ops of groups in one process may finish right here, on this
    // scheduler thread (backend::start_*): their completions, for this
    // member and its peers, are then queued on this thread too.
    worker_scope on_this_worker{self->context()};
    auto w = detail::submit_plan(*g.grp, op.plan, seq, in, out);
    w.on_complete([answer](const caf::error& err) {
      answer->complete(err, worker_scope::current());
    });
  };
  // Launches every op of the group not launched yet, in the order the
  // member started them (launch adds and removes no op).
  auto launch_all = [=](const std::string& name, member_group& g) {
    for (auto& [key, op] : g.ops)
      launch(name, key);
  };
  // Runs the op now, or after the member's fault-injection delay.
  auto enqueue = [=](member_group& g, uint64_t key, inflight op) {
    forget_answered(g);
    g.ops.emplace(key, std::move(op));
    if (g.m.start_delay_ms > 0)
      self->delayed_send(self, milliseconds{g.m.start_delay_ms},
                         submit_atom::value, g.m.group, key);
    else
      launch(g.m.group, key);
  };
  // An op queued before its group's init waits for it, but not for ever: a
  // driver whose node was lost never sends init nor the formation's abort.
  auto bound_init_wait = [=](member_group& g, uint64_t key) {
    if (g.grp) return;
    auto wait = milliseconds{g.m.timeout_ms} + init_wait_margin;
    self->delayed_send(self, wait, form_wait_atom::value, g.m.group, key,
                       static_cast<int64_t>(wait.count()));
  };
  // Member-initiated ops: refused with an error, or queued on their group.
  auto start_own = std::make_shared<detail::own_op_starter>();
  start_own->op = [=](member_op& req, caf::response_promise answer) {
    auto g = find(req.group, 0);
    if (auto err = refuse_member_op(g, req.group, req))
      return answer.deliver(std::move(err));
    auto planned = plan_member_op(*g, st->store, addr, req);
    if (!planned) return answer.deliver(std::move(planned.error()));
    // An output asked for by another actor (member_api) is that actor's,
    // as a driver op's output is its client's: it goes when the requester
    // ends, not with this member.
    auto requester = caf::actor_cast<caf::actor_addr>(answer.source());
    if (planned->answer->out && requester && requester != addr)
      planned->answer->out_owner =
        detail::output_owner_of(st->store, requester);
    planned->answer->address_to(std::move(answer));
    auto key = ++st->own_keys;
    enqueue(*g, key, std::move(*planned));
    bound_init_wait(*g, key);
  };
  start_own->job = [=](member_job& req, caf::response_promise answer) {
    auto g = find(req.group, 0);
    if (auto err = refuse_member_job(g, req.group, req.what))
      return answer.deliver(std::move(err));
    inflight op;
    op.job = std::move(req.job);
    op.rp = std::move(answer);
    auto key = ++st->own_keys;
    forget_answered(*g);
    g->ops.emplace(key, std::move(op));
    launch(req.group, key);
    bound_init_wait(*g, key);
  };
  detail::register_own_ops(self->ctrl(), start_own);
  return {
    [=](join_atom, membership& m) { join(std::move(m)); },
    [=](init_atom, const std::string& name, uint64_t gen,
        const store_actor& store, const std::string& prefix,
        int64_t timeout_ms) {
      auto i = st->groups.find(name);
      if (i == st->groups.end()) return;
      auto& g = i->second;
      // One formation per membership: a second init (a driver that sent
      // it twice) must not drop the first group here, on a scheduler
      // thread, where its teardown could block.
      if (g.grp) return;
      g.gen = gen;
      g.state = "forming";
      group_config cfg;
      cfg.name = name;
      cfg.world_size = g.m.world_size;
      cfg.rank = g.m.rank;
      cfg.backend = g.m.backend;
      cfg.timeout = milliseconds{timeout_ms};
      cfg.store = make_member_store(self->system(), store, prefix);
      if (st->settings) cfg.hostname = st->settings->hostname;
      cfg.cuda_device = g.m.cuda_device;
      work formed;
      auto grp = st->settings ? group::make(std::move(cfg), &formed)
                              : caf::expected<group_ptr>{st->settings.error()};
      if (!grp) {
        g.state = "failed";
        g.reason = grp.error();
        self->send(st->driver, ready_atom::value, name, gen, g.m.rank,
                   grp.error(), std::string{});
        fail_all(g, grp.error());
        return;
      }
      g.grp = std::move(*grp);
      // Member-initiated ops started before the group existed queue behind
      // its formation now.
      launch_all(name, g);
      formed.on_complete([addr, name, gen](const caf::error& err) {
        if (auto hdl = caf::actor_cast<caf::actor>(addr))
          caf::anon_send(hdl, formed_atom::value, name, gen, err);
      });
    },
    [=](formed_atom, const std::string& name, uint64_t gen, caf::error& err) {
      auto g = find(name, gen);
      if (!g) return;
      // An abort that came first broke the group: it stays broken.
      if (g->state == "broken") return;
      g->state = err ? "failed" : "ready";
      g->reason = err;
      // The backend the group got ("auto" resolved): the driver checks that
      // every rank got the same one.
      auto backend = !err && g->grp ? g->grp->backend_in_use() : std::string{};
      self->send(st->driver, ready_atom::value, name, gen, g->m.rank,
                 std::move(err), std::move(backend));
    },
    [=](check_atom, const std::string& name, uint64_t gen, uint64_t seq,
        const object_ref& ref) -> caf::result<caf::ok_atom> {
      auto g = find(name, gen);
      if (!g || !g->grp)
        return make_error(errc::unknown_group,
                          "member is not in group '" + name + "'");
      if (g->state != "ready")
        return g->reason ? g->reason
                         : make_error(errc::aborted,
                                      "group '" + name + "' is " + g->state);
      g->held.reset();
      if (ref.valid()) {
        auto pin = st->store->pin(ref);
        if (!pin) return std::move(pin.error());
        g->held = member_group::held_input{seq, ref, std::move(*pin)};
      }
      return caf::ok_atom::value;
    },
    [=](unhold_atom, const std::string& name, uint64_t gen, uint64_t seq) {
      auto g = find(name, gen);
      if (g && g->held && g->held->seq == seq) g->held.reset();
    },
    [=](start_atom, start_msg& msg) -> caf::result<object_ref> {
      auto g = find(msg.group, msg.gen);
      if (g && g->m.ops_from != op_source::driver)
        return make_error(errc::unsupported, context_of(*g, msg.op),
                          "the group takes its ops from its members "
                          "(membership ops_from = members), not from a "
                          "driver");
      if (!g || !g->grp)
        return make_error(errc::unknown_group,
                          "member is not in group '" + msg.group + "'");
      if (detail::before_start_test_hook != nullptr) [[unlikely]]
        detail::before_start_test_hook(msg.group, g->m.rank);
      inflight op;
      op.answer = std::make_shared<op_answer>(st->store, addr);
      auto& answer = *op.answer;
      if (msg.in.valid()) {
        auto pin = g->input_of(msg, *st->store);
        if (!pin) return std::move(pin.error());
        answer.in = std::move(*pin);
      } else {
        g->held.reset();
      }
      if (msg.has_out) {
        auto out = tensor::empty(msg.out_type, msg.out_shape,
                                 output_device(*g, answer.in.get()));
        if (!out) return std::move(out.error());
        answer.out = std::make_shared<tensor>(std::move(*out));
      }
      op.plan = detail::plan_of(msg, g->m.rank, g->m.world_size);
      answer.in_ref = std::move(msg.in);
      answer.in_place = detail::in_place(msg.op);
      if (answer.out)
        answer.out_owner = detail::output_owner_of(st->store, msg.owner);
      op.type_hint = answer.in ? answer.in->type() : msg.out_type;
      answer.address_to(self->make_response_promise());
      enqueue(*g, msg.seq, std::move(op));
      return caf::delegated<object_ref>{};
    },
    // Sent by anyone holding the member's typed handle (member_api); the
    // member's own handlers start their ops without it
    // (detail::start_own_op).
    [=](member_op& req) -> caf::result<object_ref> {
      start_own->op(req, self->make_response_promise());
      return caf::delegated<object_ref>{};
    },
    [=](job_done_atom, const std::string& name, uint64_t gen, uint64_t key,
        caf::message& result, caf::error& err) {
      auto g = find(name, gen);
      if (!g) return;
      if (g->job_running == key) g->job_running = 0;
      auto i = g->ops.find(key);
      if (i != g->ops.end()) {
        auto rp = std::move(i->second.rp);
        g->ops.erase(i);
        if (err)
          rp.deliver(std::move(err));
        else
          rp.deliver(std::move(result));
      }
      // The ops started after the job.
      launch_all(name, *g);
    },
    [=](submit_atom, const std::string& name, uint64_t seq) {
      launch(name, seq);
    },
    [=](grace_atom, int64_t grace_ms) {
      if (self->current_sender() != st->driver.address()) return;
      st->driver_grace =
        milliseconds{std::clamp<int64_t>(grace_ms, 0, max_timeout_ms)};
    },
    [=](form_wait_atom, const std::string& name, uint64_t key,
        int64_t waited_ms) {
      auto i = st->groups.find(name);
      if (i == st->groups.end() || i->second.grp) return;
      auto& g = i->second;
      auto j = g.ops.find(key);
      if (j == g.ops.end() || j->second.launched) return;
      // The op was queued before the driver's grace was known (its handler
      // registered and started it at once): wait out the rest.
      auto due =
        g.m.timeout_ms + st->driver_grace.count() + init_wait_margin.count();
      if (waited_ms < due) {
        self->delayed_send(self, milliseconds{due - waited_ms},
                           form_wait_atom::value, name, key, due);
        return;
      }
      auto op = j->second.job ? std::string{"object op"}
                              : std::string{to_string(j->second.plan.op)};
      j->second.fail(make_error(errc::timeout, context_of(g, j->second),
                                "member-initiated " + op + " waited " +
                                  std::to_string(waited_ms) +
                                  " ms for the group to form, but the "
                                  "driver never started its formation (is "
                                  "the driver, or its node, gone?)"),
                     self->context());
      g.ops.erase(j);
    },
    [=](abort_atom, const std::string& name, uint64_t gen, caf::error& why) {
      // A member that registered but got no init yet holds generation 0:
      // the driver's abort of that formation (its deadline, a dead peer)
      // is for it too, or its own ops queued for the group wait forever.
      // (A stale abort of an earlier generation cannot reach a new entry:
      // the driver sends it before the leave that ends the old one.)
      auto i = st->groups.find(name);
      if (i == st->groups.end()) return;
      auto* g = &i->second;
      if (gen != 0 && g->gen != 0 && g->gen != gen) return;
      g->state = "broken";
      g->reason = why;
      g->held.reset(); // no op of this generation starts any more
      group::abort_off_thread(g->grp, render(why));
      // Ops whose start is still delayed never reach the lane: fail them.
      fail_all(*g, why);
    },
    [=](leave_atom, const std::string& name) {
      auto i = st->groups.find(name);
      if (i == st->groups.end()) return;
      if (i->second.grp) {
        group::abort_off_thread(i->second.grp,
                                "group '" + name + "' was destroyed");
        group::release_on_lane(std::move(i->second.grp));
      }
      fail_all(i->second,
               make_error(errc::aborted, "group '" + name + "' was destroyed"));
      st->groups.erase(i);
    },
    [=](release_atom, const object_ref& ref) -> caf::result<caf::ok_atom> {
      if (auto err = st->store->release(ref)) return err;
      return caf::ok_atom::value;
    },
    [=](hand_atom, const object_ref& ref,
        const caf::actor_addr& to) -> caf::result<caf::ok_atom> {
      if (auto err = detail::hand_over(st->store, ref, to)) return err;
      return caf::ok_atom::value;
    },
    [=](history_atom, const std::string& name) -> caf::result<std::string> {
      auto i = st->groups.find(name);
      if (i == st->groups.end() || !i->second.grp)
        return make_error(errc::unknown_group,
                          "member has no group '" + name + "'");
      return describe(i->second.grp->recent_ops());
    },
    [=](status_atom, const std::string& name) {
      group_status result;
      result.group = name;
      auto i = st->groups.find(name);
      if (i == st->groups.end()) {
        result.state = "unknown";
        return result;
      }
      result.world_size = i->second.m.world_size;
      result.state = i->second.state;
      result.reason = i->second.reason;
      if (i->second.grp) result.backend = i->second.grp->backend_in_use();
      return result;
    },
  };
}

} // namespace caf_collective
