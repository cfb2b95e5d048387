#include "direct_path.hpp"

#include <string>

#include "caf_collective/api.hpp"

namespace caf_collective::bench {

namespace {

class direct_path : public bench_path {
 public:
  direct_path(std::string label, const std::string& backend, int rank,
              int ranks, rendezvous_store_ptr store,
              allreduce_algorithm algorithm)
    : label_(std::move(label)), group_name_("bench-" + label_),
      algorithm_(algorithm) {
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
    std::string_view group_name = group_name_;
    auto counts = counts_of(a.op, a.total, a.ranks);
    tensor_view in{a.in, a.type, counts.in};
    tensor_view out{a.out, a.type, counts.out};
    switch (a.op) {
      case bench_op::allreduce: {
        allreduce_options opts;
        opts.op = a.redop;
        opts.algorithm = algorithm_;
        if (a.in_place()) return allreduce(out, group_name, opts);
        return allreduce(in, out, group_name, opts);
      }
      case bench_op::reduce: {
        reduce_options opts;
        opts.op = a.redop;
        opts.root = a.root;
        if (a.in_place()) return reduce(out, a.root, group_name, opts);
        return reduce(in, out, group_name, opts);
      }
      case bench_op::broadcast: {
        broadcast_options opts;
        opts.root = a.root;
        if (a.in_place()) return broadcast(out, a.root, group_name, opts);
        return broadcast(in, out, group_name, opts);
      }
      case bench_op::allgather: return allgather(in, out, group_name);
      case bench_op::reduce_scatter: {
        reduce_scatter_options opts;
        opts.op = a.redop;
        return reduce_scatter(in, out, group_name, opts);
      }
      case bench_op::alltoall: return alltoall(in, out, group_name);
      case bench_op::gather: {
        gather_options opts;
        opts.root = a.root;
        return gather(in, out, group_name, opts);
      }
      case bench_op::scatter: {
        scatter_options opts;
        opts.root = a.root;
        return scatter(in, out, group_name, opts);
      }
      case bench_op::sendrecv: {
        // The send completes only once the peer posted its receive, so it
        // runs asynchronously while this member receives.
        auto sent = send_async(in, (a.rank + 1) % a.ranks, group_name);
        recv(out, (a.rank + a.ranks - 1) % a.ranks, group_name);
        if (auto err = sent.wait())
          throw std::runtime_error("send failed: " + caf::to_string(err));
        return;
      }
      case bench_op::barrier: return barrier(group_name);
    }
  }

 private:
  std::string label_;
  std::string group_name_;
  allreduce_algorithm algorithm_;
};

} // namespace

bench_path_ptr make_direct_path(const std::string& label,
                                const std::string& backend, int rank, int ranks,
                                rendezvous_store_ptr store,
                                allreduce_algorithm algorithm) {
  return std::make_unique<direct_path>(label, backend, rank, ranks,
                                       std::move(store), algorithm);
}

} // namespace caf_collective::bench
