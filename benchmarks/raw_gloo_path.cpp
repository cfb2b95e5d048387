#include "raw_gloo_path.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/transport/unbound_buffer.h>

#include "dtype_visit.hpp"
#include "raw_gloo_kernels.hpp"

namespace caf_collective::bench {

namespace {

// Slot prefix of our sendrecv messages; Gloo's collectives use 0x01-0x0a.
constexpr uint8_t sendrecv_slot_prefix = 0x7e;

enum class allreduce_variant {
  legacy_ring,
  legacy_ring_chunked,
  legacy_halving_doubling,
  options_ring,
  options_bcube,
};

constexpr const char* variant_names[] = {
  "ring", "ring_chunked", "halving_doubling", "opts_ring", "opts_bcube",
};

class raw_gloo_path : public bench_path {
 public:
  raw_gloo_path(std::shared_ptr<gloo::Context> ctx, bool best)
    : ctx_(std::move(ctx)), best_(best) {
    // nop
  }

  std::string_view name() const override {
    return best_ ? "raw-gloo-best" : "raw-gloo";
  }

  bool supports(bench_op op, bool in_place) const override {
    if (best_) return op == bench_op::allreduce;
    if (in_place) return op == bench_op::allreduce || op == bench_op::broadcast;
    return true;
  }

  int variants(bench_op op) const override {
    return best_ && op == bench_op::allreduce ? 5 : 1;
  }

  std::string variant_name(bench_op op, int v) const override {
    return variants(op) > 1 ? variant_names[v] : "";
  }

  void prepare(const op_args& a, int variant) override {
    variant_ = best_ ? static_cast<allreduce_variant>(variant)
                     : allreduce_variant::options_ring;
    legacy_.reset();
    if (a.op == bench_op::reduce_scatter)
      scratch_.resize(a.total * size_of(a.type));
    if (a.op == bench_op::allreduce && variant < 3 && best_)
      legacy_ = make_legacy(a);
  }

  void finish() override {
    legacy_.reset();
    scratch_ = {};
  }

  void run(const op_args& a) override {
    visit_dtype(a.type, [&](auto tag) { run_typed<decltype(tag)>(a); });
  }

 private:
  std::unique_ptr<gloo::Algorithm> make_legacy(const op_args& a) {
    return visit_dtype(
      a.type, [&](auto tag) -> std::unique_ptr<gloo::Algorithm> {
        using T = decltype(tag);
        std::vector<T*> ptrs{static_cast<T*>(a.out)};
        auto n = static_cast<int>(a.total);
        auto* fn = legacy_kernel<T>(a.redop);
        switch (variant_) {
          case allreduce_variant::legacy_ring_chunked:
            return std::make_unique<gloo::AllreduceRingChunked<T>>(ctx_, ptrs,
                                                                   n, fn);
          case allreduce_variant::legacy_halving_doubling:
            return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(
              ctx_, ptrs, n, fn);
          default:
            return std::make_unique<gloo::AllreduceRing<T>>(ctx_, ptrs, n, fn);
        }
      });
  }

  template<class T>
  void run_typed(const op_args& a) {
    auto* in = static_cast<T*>(a.in);
    auto* out = static_cast<T*>(a.out);
    switch (a.op) {
      case bench_op::allreduce: return allreduce<T>(a, in, out);
      case bench_op::reduce: {
        gloo::ReduceOptions opts{ctx_};
        opts.setTag(tag_++);
        opts.setRoot(a.root);
        opts.setInput(in, a.total);
        opts.setOutput(out, a.total);
        opts.setReduceFunction(options_kernel<T>(a.redop));
        return gloo::reduce(opts);
      }
      case bench_op::broadcast: {
        gloo::BroadcastOptions opts{ctx_};
        opts.setTag(tag_++);
        opts.setRoot(a.root);
        if (a.rank == a.root && !a.in_place()) opts.setInput(in, a.total);
        opts.setOutput(out, a.total);
        return gloo::broadcast(opts);
      }
      case bench_op::allgather: {
        gloo::AllgatherOptions opts{ctx_};
        opts.setTag(tag_++);
        opts.setInput(in, a.block());
        opts.setOutput(out, a.total);
        return gloo::allgather(opts);
      }
      case bench_op::reduce_scatter: return reduce_scatter<T>(a, in, out);
      case bench_op::alltoall: {
        gloo::AlltoallOptions opts{ctx_};
        opts.setTag(tag_++);
        opts.setInput(in, a.total);
        opts.setOutput(out, a.total);
        return gloo::alltoall(opts);
      }
      case bench_op::gather: {
        gloo::GatherOptions opts{ctx_};
        opts.setTag(tag_++);
        opts.setRoot(a.root);
        opts.setInput(in, a.block());
        if (a.rank == a.root) opts.setOutput(out, a.total);
        return gloo::gather(opts);
      }
      case bench_op::scatter: return scatter<T>(a, in, out);
      case bench_op::sendrecv: return sendrecv(a);
      case bench_op::barrier: {
        gloo::BarrierOptions opts{ctx_};
        opts.setTag(tag_++);
        return gloo::barrier(opts);
      }
    }
  }

  template<class T>
  void allreduce(const op_args& a, T* in, T* out) {
    if (legacy_) {
      if (!a.in_place()) std::memcpy(out, in, a.total * sizeof(T));
      legacy_->run();
      return;
    }
    gloo::AllreduceOptions opts{ctx_};
    opts.setTag(tag_++);
    if (variant_ == allreduce_variant::options_bcube)
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
    if (!a.in_place()) opts.setInput(in, a.total);
    opts.setOutput(out, a.total);
    opts.setReduceFunction(options_kernel<T>(a.redop));
    gloo::allreduce(opts);
  }

  // Gloo has no options-API reduce_scatter (and its legacy
  // ReduceScatterHalvingDoubling returns wrong floats from 128 KiB in this
  // build), so a Gloo user allreduces and keeps the own block.
  template<class T>
  void reduce_scatter(const op_args& a, T* in, T* out) {
    auto* full = reinterpret_cast<T*>(scratch_.data());
    gloo::AllreduceOptions opts{ctx_};
    opts.setTag(tag_++);
    opts.setInput(in, a.total);
    opts.setOutput(full, a.total);
    opts.setReduceFunction(options_kernel<T>(a.redop));
    gloo::allreduce(opts);
    std::memcpy(out, full + a.rank * a.block(), a.block() * sizeof(T));
  }

  template<class T>
  void scatter(const op_args& a, T* in, T* out) {
    gloo::ScatterOptions opts{ctx_};
    opts.setTag(tag_++);
    opts.setRoot(a.root);
    std::vector<T*> inputs;
    if (a.rank == a.root) {
      for (int r = 0; r < a.ranks; ++r)
        inputs.push_back(in + r * a.block());
      opts.setInputs(inputs, a.block());
    }
    opts.setOutput(out, a.block());
    gloo::scatter(opts);
  }

  void sendrecv(const op_args& a) {
    // Gloo has no pair to a rank's self: it crashes instead of failing.
    // The parser leaves sendrecv out at 1 rank; this keeps it that way.
    if (a.ranks < 2)
      throw std::invalid_argument("raw-gloo: sendrecv needs 2 or more ranks");
    auto bytes = a.total * size_of(a.type);
    auto slot = gloo::Slot::build(sendrecv_slot_prefix, tag_++);
    auto send = ctx_->createUnboundBuffer(a.in, bytes);
    auto recv = ctx_->createUnboundBuffer(a.out, bytes);
    recv->recv((a.rank + a.ranks - 1) % a.ranks, slot);
    send->send((a.rank + 1) % a.ranks, slot);
    recv->waitRecv();
    send->waitSend();
  }

  std::shared_ptr<gloo::Context> ctx_;
  bool best_;
  allreduce_variant variant_ = allreduce_variant::options_ring;
  std::unique_ptr<gloo::Algorithm> legacy_;
  std::vector<char> scratch_;
  uint32_t tag_ = 0;
};

} // namespace

bench_path_ptr make_raw_gloo_path(std::shared_ptr<gloo::Context> ctx) {
  return std::make_unique<raw_gloo_path>(std::move(ctx), false);
}

bench_path_ptr make_raw_gloo_best_path(std::shared_ptr<gloo::Context> ctx) {
  return std::make_unique<raw_gloo_path>(std::move(ctx), true);
}

} // namespace caf_collective::bench
