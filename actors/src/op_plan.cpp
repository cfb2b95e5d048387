#include "op_plan.hpp"

#include "caf_collective/error.hpp"

namespace caf_collective::detail {

op_plan plan_of(const start_msg& msg, int rank, int world_size) {
  op_plan plan;
  plan.op = msg.op;
  plan.params = msg.params;
  if (msg.op == op_kind::alltoallv) {
    // The driver sends the whole matrix: counts[i * W + j] = i sends to j.
    auto ws = static_cast<size_t>(world_size);
    auto r = static_cast<size_t>(rank);
    const auto& c = msg.params.counts;
    if (c.size() == ws * ws)
      for (size_t j = 0; j < ws; ++j) {
        plan.send_counts.push_back(c[r * ws + j]);
        plan.recv_counts.push_back(c[j * ws + r]);
      }
  }
  return plan;
}

bool in_place(op_kind op) {
  return op == op_kind::allreduce || op == op_kind::broadcast ||
         op == op_kind::reduce;
}

work submit_plan(group& g, const op_plan& plan, uint64_t key,
                 const tensor_view& in, const tensor_view& out) {
  const auto& p = plan.params;
  milliseconds t{p.timeout_ms};
  switch (plan.op) {
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
      o.send_counts = plan.send_counts;
      o.recv_counts = plan.recv_counts;
      return g.alltoallv(in, out, o);
    }
    case op_kind::barrier: {
      barrier_options o;
      o.timeout = t;
      return g.barrier(o);
    }
    case op_kind::send:
    case op_kind::recv: {
      if (g.rank() == p.root) {
        send_options o;
        o.timeout = t;
        o.peer = p.peer;
        o.tag = plan.tag;
        return g.send(in, o);
      }
      recv_options o;
      o.timeout = t;
      o.peer = p.root;
      o.tag = plan.tag;
      return g.recv(out, o);
    }
  }
  return work::completed(key, make_error(errc::unsupported, "unknown op"));
}

} // namespace caf_collective::detail
