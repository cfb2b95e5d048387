#include "direct_path.hpp"

#include <string>

#include "caf_collective/api.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"

namespace caf_collective::bench {

namespace {

/// The options of one op from the tool's arguments: its reduce op and
/// root where it has them (one place for the one-off and persistent runs).
template<class Opts>
Opts options_for(const op_args& a) {
  Opts opts;
  if constexpr (requires { opts.op; }) opts.op = a.redop;
  if constexpr (requires { opts.root; }) opts.root = a.root;
  return opts;
}

/// sendrecv shifts along the ring: each rank sends to the next and
/// receives from the previous one.
int next_rank(const op_args& a) {
  return (a.rank + 1) % a.ranks;
}
int previous_rank(const op_args& a) {
  return (a.rank + a.ranks - 1) % a.ranks;
}

class direct_path : public bench_path {
 public:
  direct_path(std::string label, const std::string& backend, int rank,
              int ranks, rendezvous_store_ptr store,
              allreduce_algorithm algorithm, bool persistent)
    : label_(std::move(label)), group_name_("bench-" + label_),
      algorithm_(algorithm), persistent_(persistent) {
    init_options opts;
    opts.store = std::move(store);
    init_collective_group(ranks, rank, backend, group_name_, opts);
  }

  ~direct_path() override { destroy_collective_group(group_name_); }

  std::string_view name() const override { return label_; }

  bool supports(bench_op op, bool in_place) const override {
    return !in_place || op == bench_op::allreduce ||
           op == bench_op::broadcast || op == bench_op::reduce;
  }

  void run(const op_args& a) override {
    if (persistent_) return run_persistent(a);
    std::string_view group_name = group_name_;
    auto counts = counts_of(a.op, a.total, a.ranks);
    tensor_view in{a.in, a.type, counts.in};
    tensor_view out{a.out, a.type, counts.out};
    switch (a.op) {
      case bench_op::allreduce: {
        auto opts = allreduce_opts(a);
        if (a.in_place()) return allreduce(out, group_name, opts);
        return allreduce(in, out, group_name, opts);
      }
      case bench_op::reduce: {
        auto opts = options_for<reduce_options>(a);
        if (a.in_place()) return reduce(out, a.root, group_name, opts);
        return reduce(in, out, group_name, opts);
      }
      case bench_op::broadcast: {
        auto opts = options_for<broadcast_options>(a);
        if (a.in_place()) return broadcast(out, a.root, group_name, opts);
        return broadcast(in, out, group_name, opts);
      }
      case bench_op::allgather: return allgather(in, out, group_name);
      case bench_op::reduce_scatter:
        return reduce_scatter(in, out, group_name,
                              options_for<reduce_scatter_options>(a));
      case bench_op::alltoall: return alltoall(in, out, group_name);
      case bench_op::gather:
        return gather(in, out, group_name, options_for<gather_options>(a));
      case bench_op::scatter:
        return scatter(in, out, group_name, options_for<scatter_options>(a));
      case bench_op::sendrecv: {
        // The send completes only once the peer posted its receive, so it
        // runs asynchronously while this member receives.
        auto sent = send_async(in, next_rank(a), group_name);
        recv(out, previous_rank(a), group_name);
        if (auto err = sent.wait())
          throw std::runtime_error("send failed: " + caf::to_string(err));
        return;
      }
      case bench_op::barrier: return barrier(group_name);
    }
  }

 private:
  // Prepares the op once per buffers and arguments (a new size or the
  // check's own buffers prepare it again) and runs it.
  void run_persistent(const op_args& a) {
    if (!prepared_.valid() || !same_call(a, prepared_args_)) {
      auto made = prepare_op(a);
      if (!made) throw std::runtime_error(render(made.error()));
      prepared_ = std::move(*made);
      prepared_args_ = a;
      if (a.op == bench_op::sendrecv) {
        auto recv = prepare_recv(a);
        if (!recv) throw std::runtime_error(render(recv.error()));
        prepared_recv_ = std::move(*recv);
      }
    }
    if (a.op != bench_op::sendrecv) {
      if (auto err = prepared_.run()) throw std::runtime_error(render(err));
      return;
    }
    // As the one-off form: the send runs while this rank receives.
    auto sent = prepared_.start();
    if (auto err = prepared_recv_.run()) throw std::runtime_error(render(err));
    if (auto err = sent.wait()) throw std::runtime_error(render(err));
  }

  caf::expected<persistent_op> prepare_recv(const op_args& a) const {
    auto counts = counts_of(a.op, a.total, a.ranks);
    recv_options opts;
    opts.peer = previous_rank(a);
    return get_group(group_name_)
      ->prepare_recv(tensor_view{a.out, a.type, counts.out}, opts);
  }

  allreduce_options allreduce_opts(const op_args& a) const {
    auto opts = options_for<allreduce_options>(a);
    opts.algorithm = algorithm_;
    return opts;
  }

  static bool same_call(const op_args& x, const op_args& y) {
    return x.op == y.op && x.type == y.type && x.redop == y.redop &&
           x.root == y.root && x.total == y.total && x.in == y.in &&
           x.out == y.out;
  }

  caf::expected<persistent_op> prepare_op(const op_args& a) const {
    auto g = get_group(group_name_);
    auto counts = counts_of(a.op, a.total, a.ranks);
    tensor_view in{a.in, a.type, counts.in};
    tensor_view out{a.out, a.type, counts.out};
    // The in-place forms are the same calls with one buffer.
    if (a.in_place()) in = out;
    switch (a.op) {
      case bench_op::allreduce:
        return g->prepare_allreduce(in, out, allreduce_opts(a));
      case bench_op::reduce:
        return g->prepare_reduce(in, out, options_for<reduce_options>(a));
      case bench_op::broadcast:
        return g->prepare_broadcast(in, out, options_for<broadcast_options>(a));
      case bench_op::allgather: return g->prepare_allgather(in, out);
      case bench_op::reduce_scatter:
        return g->prepare_reduce_scatter(
          in, out, options_for<reduce_scatter_options>(a));
      case bench_op::alltoall: return g->prepare_alltoall(in, out);
      case bench_op::gather:
        return g->prepare_gather(in, out, options_for<gather_options>(a));
      case bench_op::scatter:
        return g->prepare_scatter(in, out, options_for<scatter_options>(a));
      case bench_op::barrier: return g->prepare_barrier();
      case bench_op::sendrecv: {
        // The send half; prepare_recv makes the other.
        send_options opts;
        opts.peer = next_rank(a);
        return g->prepare_send(in, opts);
      }
    }
    return make_error(errc::unsupported, "unknown op");
  }

  std::string label_;
  std::string group_name_;
  allreduce_algorithm algorithm_;
  bool persistent_;
  persistent_op prepared_;
  persistent_op prepared_recv_; // sendrecv: prepared_ is its send
  op_args prepared_args_;
};

} // namespace

bench_path_ptr make_direct_path(const std::string& label,
                                const std::string& backend, int rank, int ranks,
                                rendezvous_store_ptr store,
                                allreduce_algorithm algorithm,
                                bool persistent) {
  return std::make_unique<direct_path>(label, backend, rank, ranks,
                                       std::move(store), algorithm, persistent);
}

} // namespace caf_collective::bench
