// The member protocol. Every handler returns at once: group formation and
// operations run on the group's lane, and their completions come back as
// messages to this actor (work::on_complete -> anon_send).
#include "caf_collective/member.hpp"

#include <map>
#include <memory>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"
#include "caf_collective/object_store.hpp"
#include "caf_collective/rendezvous_actor.hpp"

namespace caf_collective {

namespace {

using formed_atom = caf::atom_constant<caf::atom("col_formed")>;
using done_atom = caf::atom_constant<caf::atom("col_done")>;
using submit_atom = caf::atom_constant<caf::atom("col_submit")>;

// One op between start and completion. The pins keep the input and output
// memory alive even if a client releases the refs meanwhile.
struct inflight {
  start_msg msg;
  pinned_tensor in;
  std::shared_ptr<tensor> out;
  caf::response_promise rp;
};

struct member_group {
  membership m;
  uint64_t gen = 0;
  group_ptr grp;
  std::string state = "registered";
  caf::error reason;
  std::map<uint64_t, inflight> ops; // by seq
};

struct member_state {
  driver_actor driver;
  object_store_ptr store;
  std::map<std::string, member_group> groups;

  // Aborting first makes the group's destructor return quickly: it would
  // otherwise drain running ops, on whatever thread drops the last ref.
  ~member_state() {
    for (auto& [name, g] : groups)
      if (g.grp && !g.ops.empty())
        g.grp->abort("member of group '" + name + "' terminated");
  }
};

bool in_place(op_kind op) {
  return op == op_kind::allreduce || op == op_kind::broadcast ||
         op == op_kind::reduce;
}

milliseconds deadline_of(const start_msg& msg) {
  return milliseconds{msg.params.timeout_ms};
}

// Submits one op to the group's lane; the caller attaches the completion.
work submit(group& g, const start_msg& msg, const tensor_view& in,
            const tensor_view& out) {
  auto rank = g.rank();
  auto ws = static_cast<size_t>(g.world_size());
  const auto& p = msg.params;
  auto t = deadline_of(msg);
  switch (msg.op) {
    case op_kind::allreduce: {
      allreduce_options o;
      o.timeout = t;
      o.op = p.op;
      o.algorithm = p.algorithm;
      return g.allreduce(in, in, o);
    }
    case op_kind::broadcast: {
      broadcast_options o;
      o.timeout = t;
      o.root = p.root;
      return g.broadcast(in, in, o);
    }
    case op_kind::reduce: {
      reduce_options o;
      o.timeout = t;
      o.root = p.root;
      o.op = p.op;
      return g.reduce(in, in, o);
    }
    case op_kind::allgather: {
      allgather_options o;
      o.timeout = t;
      return g.allgather(in, out, o);
    }
    case op_kind::allgatherv: {
      allgatherv_options o;
      o.timeout = t;
      o.counts.assign(p.counts.begin(), p.counts.end());
      return g.allgatherv(in, out, o);
    }
    case op_kind::gather: {
      gather_options o;
      o.timeout = t;
      o.root = p.root;
      return g.gather(in, out, o);
    }
    case op_kind::scatter: {
      scatter_options o;
      o.timeout = t;
      o.root = p.root;
      return g.scatter(in, out, o);
    }
    case op_kind::reduce_scatter: {
      reduce_scatter_options o;
      o.timeout = t;
      o.op = p.op;
      return g.reduce_scatter(in, out, o);
    }
    case op_kind::alltoall: {
      alltoall_options o;
      o.timeout = t;
      return g.alltoall(in, out, o);
    }
    case op_kind::alltoallv: {
      alltoallv_options o;
      o.timeout = t;
      for (size_t j = 0; j < ws; ++j) {
        o.send_counts.push_back(p.counts[rank * ws + j]);
        o.recv_counts.push_back(p.counts[j * ws + rank]);
      }
      return g.alltoallv(in, out, o);
    }
    case op_kind::barrier: {
      barrier_options o;
      o.timeout = t;
      return g.barrier(o);
    }
    case op_kind::send:
    case op_kind::recv: {
      if (rank == p.root) {
        send_options o;
        o.timeout = t;
        o.peer = p.peer;
        return g.send(in, o);
      }
      recv_options o;
      o.timeout = t;
      o.peer = p.root;
      return g.recv(out, o);
    }
  }
  return work::completed(msg.seq, make_error(errc::unsupported, "unknown op"));
}

} // namespace

caf::behavior member_protocol(caf::event_based_actor* self, driver_actor driver,
                              std::vector<membership> groups) {
  auto st = std::make_shared<member_state>();
  st->driver = driver;
  st->store = local_store(self->system());
  auto node = node_name(self->system());
  auto join = [self, st, node](membership m) {
    auto& g = st->groups[m.group];
    if (g.grp) g.grp->abort("membership replaced by a new join");
    g = member_group{};
    g.m = m;
    self->send(st->driver, reg_atom::value, std::move(m), node);
  };
  for (auto& m : groups)
    join(std::move(m));
  // The state dies with the actor, whichever way it exits.
  self->attach_functor([st](const caf::error&) {
    // Only a member with ops in flight aborts: an idle group tears down
    // cleanly and its peers see no spurious failure.
    for (auto& [name, g] : st->groups)
      if (g.grp && !g.ops.empty())
        g.grp->abort("member of group '" + name + "' terminated");
    st->groups.clear();
  });
  auto find = [st](const std::string& name, uint64_t gen) -> member_group* {
    auto i = st->groups.find(name);
    if (i == st->groups.end() || (gen != 0 && i->second.gen != gen))
      return nullptr;
    return &i->second;
  };
  auto addr = self->address();
  auto finish = [self, st](member_group& g, uint64_t seq, caf::error err) {
    auto i = g.ops.find(seq);
    if (i == g.ops.end()) return;
    auto op = std::move(i->second);
    g.ops.erase(i);
    if (err) {
      op.rp.deliver(std::move(err));
      return;
    }
    if (in_place(op.msg.op) || !op.out) {
      op.rp.deliver(in_place(op.msg.op) ? op.msg.in : object_ref{});
      return;
    }
    auto ref = st->store->put(std::move(*op.out));
    if (ref)
      op.rp.deliver(std::move(*ref));
    else
      op.rp.deliver(std::move(ref.error()));
  };
  // Hands op `seq` to the group's lane; its completion comes back as a
  // message.
  auto launch = [=](const std::string& name, uint64_t seq) {
    auto i = st->groups.find(name);
    if (i == st->groups.end()) return;
    auto& g = i->second;
    auto j = g.ops.find(seq);
    if (j == g.ops.end() || !g.grp) return;
    auto& op = j->second;
    auto dtype_hint = op.in ? op.in->type() : op.msg.out_type;
    tensor_view in =
      op.in ? op.in->view() : tensor_view{nullptr, dtype_hint, size_t{0}};
    tensor_view out =
      op.out ? op.out->view() : tensor_view{nullptr, dtype_hint, size_t{0}};
    auto w = submit(*g.grp, op.msg, in, out);
    auto gen = g.gen;
    w.on_complete([addr, name, gen, seq](const caf::error& err) {
      if (auto hdl = caf::actor_cast<caf::actor>(addr))
        caf::anon_send(hdl, done_atom::value, name, gen, seq, err);
    });
  };
  return {
    [=](join_atom, membership& m) { join(std::move(m)); },
    [=](init_atom, const std::string& name, uint64_t gen,
        const store_actor& store, const std::string& prefix,
        int64_t timeout_ms) {
      auto i = st->groups.find(name);
      if (i == st->groups.end()) return;
      auto& g = i->second;
      g.gen = gen;
      g.state = "forming";
      group_config cfg;
      cfg.name = name;
      cfg.world_size = g.m.world_size;
      cfg.rank = g.m.rank;
      cfg.backend = g.m.backend;
      cfg.timeout = milliseconds{timeout_ms};
      cfg.store = make_actor_store(self->system(), store, prefix);
      work formed;
      auto grp = group::make(std::move(cfg), &formed);
      if (!grp) {
        g.state = "failed";
        g.reason = grp.error();
        self->send(st->driver, ready_atom::value, name, gen, g.m.rank,
                   grp.error(), std::string{});
        return;
      }
      g.grp = std::move(*grp);
      formed.on_complete([addr, name, gen](const caf::error& err) {
        if (auto hdl = caf::actor_cast<caf::actor>(addr))
          caf::anon_send(hdl, formed_atom::value, name, gen, err);
      });
    },
    [=](formed_atom, const std::string& name, uint64_t gen, caf::error& err) {
      auto g = find(name, gen);
      if (!g) return;
      g->state = err ? "failed" : "ready";
      g->reason = err;
      // The backend the group got ("auto" resolved): the driver checks that
      // every rank got the same one.
      auto backend = !err && g->grp ? g->grp->backend_in_use() : std::string{};
      self->send(st->driver, ready_atom::value, name, gen, g->m.rank,
                 std::move(err), std::move(backend));
    },
    [=](check_atom, const std::string& name, uint64_t gen,
        const object_ref& ref) -> caf::result<caf::ok_atom> {
      auto g = find(name, gen);
      if (!g || !g->grp)
        return make_error(errc::unknown_group,
                          "member is not in group '" + name + "'");
      if (g->state != "ready")
        return g->reason ? g->reason
                         : make_error(errc::aborted,
                                      "group '" + name + "' is " + g->state);
      if (ref.valid()) {
        auto pin = st->store->pin(ref);
        if (!pin) return std::move(pin.error());
      }
      return caf::ok_atom::value;
    },
    [=](start_atom, start_msg& msg) -> caf::result<object_ref> {
      auto g = find(msg.group, msg.gen);
      if (!g || !g->grp)
        return make_error(errc::unknown_group,
                          "member is not in group '" + msg.group + "'");
      inflight op;
      if (msg.in.valid()) {
        auto pin = st->store->pin(msg.in);
        if (!pin) return std::move(pin.error());
        op.in = std::move(*pin);
      }
      if (msg.has_out) {
        auto dev = op.in ? op.in->dev() : device::cpu();
        auto out = tensor::empty(msg.out_type, msg.out_shape, dev);
        if (!out) return std::move(out.error());
        op.out = std::make_shared<tensor>(std::move(*out));
      }
      auto seq = msg.seq;
      op.rp = self->make_response_promise();
      op.msg = std::move(msg);
      auto delay = g->m.start_delay_ms;
      auto name = op.msg.group;
      g->ops.emplace(seq, std::move(op));
      if (delay > 0)
        self->delayed_send(self, milliseconds{delay}, submit_atom::value, name,
                           seq);
      else
        launch(name, seq);
      return caf::delegated<object_ref>{};
    },
    [=](submit_atom, const std::string& name, uint64_t seq) {
      launch(name, seq);
    },
    [=](done_atom, const std::string& name, uint64_t gen, uint64_t seq,
        caf::error& err) {
      if (auto g = find(name, gen)) finish(*g, seq, std::move(err));
    },
    [=](abort_atom, const std::string& name, uint64_t gen, caf::error& why) {
      auto g = find(name, gen);
      if (!g) return;
      g->state = "broken";
      g->reason = why;
      if (g->grp) g->grp->abort(render(why));
      // Ops whose start is still delayed never reach the lane: fail them.
      std::vector<uint64_t> seqs;
      for (auto& [seq, op] : g->ops)
        seqs.push_back(seq);
      for (auto seq : seqs)
        finish(*g, seq, why);
    },
    [=](leave_atom, const std::string& name) {
      auto i = st->groups.find(name);
      if (i == st->groups.end()) return;
      if (i->second.grp)
        i->second.grp->abort("group '" + name + "' was destroyed");
      for (auto& [seq, op] : i->second.ops)
        op.rp.deliver(
          make_error(errc::aborted, "group '" + name + "' was destroyed"));
      st->groups.erase(i);
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
