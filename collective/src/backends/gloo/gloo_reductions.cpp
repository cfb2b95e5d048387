// Gloo backend: reduce and allreduce. Every reduction runs in its carrier
// type (reduce_kernels.hpp): float16/bfloat16 are widened to float32,
// reduced, and rounded once at the end; avg on small integers is summed in
// int64.
#include <climits>
#include <cstring>

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/reduce.h>

#include "backends/common/reduce_kernels.hpp"
#include "backends/gloo/gloo_backend.hpp"
#include "backends/gloo/slots.hpp"

namespace caf_collective::detail {

namespace {

// Size class of the automatic choice, from docs/benchmarks.md: up to
// 512 KiB the legacy algorithms beat the options-API ring; above that the
// options-API ring is best or tied and needs no copies.
//
// Every rank must end with bitwise the same result (replicas of a model
// drift otherwise). Algorithms that reduce each element once and then copy
// it (halving-doubling, the options-API ring, bcube) give that; the legacy
// ring lets every rank sum in its own order, which is the same result only
// for two ranks (x + y == y + x). So the ring is chosen for two ranks only,
// although it was the fastest up to 32 KiB for more.
constexpr size_t medium_allreduce_bytes = 512 * 1024;

// Legacy algorithm instances kept per group; the key sequence is the same
// on every rank, so LRU eviction is too.
constexpr size_t legacy_cache_capacity = 16;

template<class T>
std::unique_ptr<gloo::Algorithm>
make_legacy(allreduce_algorithm algorithm,
            const std::shared_ptr<gloo::Context>& ctx, T* data, size_t count,
            const gloo::ReductionFunction<T>* fn) {
  std::vector<T*> ptrs{data};
  auto n = static_cast<int>(count);
  switch (algorithm) {
    case allreduce_algorithm::ring_chunked:
      return std::make_unique<gloo::AllreduceRingChunked<T>>(ctx, ptrs, n, fn);
    case allreduce_algorithm::halving_doubling:
      return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(ctx, ptrs, n,
                                                                 fn);
    default: return std::make_unique<gloo::AllreduceRing<T>>(ctx, ptrs, n, fn);
  }
}

// Keeps the ReductionFunction alive as long as the algorithm using it.
template<class T>
struct legacy_with_function : gloo::Algorithm {
  legacy_with_function(allreduce_algorithm algorithm,
                       const std::shared_ptr<gloo::Context>& ctx, T* data,
                       size_t count, reduce_op op)
    : gloo::Algorithm(ctx), fn(gloo::CUSTOM, legacy_kernel_of<T>(op)),
      impl(make_legacy<T>(algorithm, ctx, data, count, &fn)) {
    // nop
  }

  void run() override { impl->run(); }

  gloo::ReductionFunction<T> fn;
  std::unique_ptr<gloo::Algorithm> impl;
};

bool is_legacy(allreduce_algorithm algorithm) {
  return algorithm == allreduce_algorithm::ring ||
         algorithm == allreduce_algorithm::ring_chunked ||
         algorithm == allreduce_algorithm::halving_doubling;
}

const char* legacy_name(allreduce_algorithm algorithm) {
  switch (algorithm) {
    case allreduce_algorithm::ring: return "ring";
    case allreduce_algorithm::ring_chunked: return "ring_chunked";
    default: return "halving_doubling";
  }
}

} // namespace

uint64_t gloo_backend::pass_of(dtype caller, reduce_op op, uint64_t index) {
  return agreement_key({uint64_t(caller), uint64_t(op), index});
}

cached_allreduce& gloo_backend::legacy_instance(const op_call& call,
                                                allreduce_algorithm algorithm,
                                                dtype carrier, size_t count,
                                                reduce_op op, uint64_t pass) {
  auto key_op = op == reduce_op::avg ? reduce_op::sum : op;
  auto algo = static_cast<int>(algorithm);
  for (auto i = legacy_cache_.begin(); i != legacy_cache_.end(); ++i) {
    if (i->algorithm == algo && i->carrier == carrier && i->count == count &&
        i->op == key_op && i->pass == pass) {
      legacy_cache_.splice(legacy_cache_.begin(), legacy_cache_, i);
      return legacy_cache_.front();
    }
  }
  if (legacy_cache_.size() >= legacy_cache_capacity) legacy_cache_.pop_back();
  // Legacy algorithms take their slots from the context's counter. Skip a
  // key-dependent distance first: ranks that disagree on the count then
  // use different slots and time out, instead of matching messages of
  // different sizes (which makes Gloo terminate the process).
  // (Different keys may still skip alike: the ready barrier below, tagged
  // with the whole key, keeps such ranks apart.)
  auto key = agreement_key(
    {uint64_t(algo), uint64_t(carrier), count, uint64_t(key_op), pass});
  context_->nextSlot(static_cast<int>(key % 4096) +
                     1); // Gloo refuses a skip of 0
  cached_allreduce entry;
  entry.algorithm = algo;
  entry.carrier = carrier;
  entry.count = count;
  entry.op = key_op;
  entry.pass = pass;
  entry.buffer.reset(new std::byte[count * size_of(carrier)]);
  entry.instance =
    visit_carrier(carrier, [&](auto tag) -> std::unique_ptr<gloo::Algorithm> {
      using T = decltype(tag);
      return std::make_unique<legacy_with_function<T>>(
        algorithm, context_, reinterpret_cast<T*>(entry.buffer.get()), count,
        key_op);
    });
  legacy_cache_.push_front(std::move(entry));
  // Legacy algorithms write into buffers bound to slots. A message that
  // reaches a rank before it has bound the slot stalls that connection's
  // reader until it does; if the rank is still waiting for a message behind
  // it on the same connection (a recv posted before this allreduce), both
  // wait forever. Nobody sends into the new slots before every rank has
  // bound them. The barrier's tag holds the whole key: ranks that disagree
  // (and whose skips happened to land on the same slots) never pass it,
  // so they time out instead of exchanging messages of different sizes.
  gloo::BarrierOptions ready{context_};
  ready.setTag(tag_of(
    call.seq, agreement_key({uint64_t(op_kind::allreduce), 0x626f756eu, key})));
  ready.setTimeout(call.timeout);
  gloo::barrier(ready);
  return legacy_cache_.front();
}

void gloo_backend::allreduce_carrier(const op_call& call, void* data,
                                     dtype carrier, size_t count, reduce_op op,
                                     allreduce_algorithm algorithm,
                                     uint64_t pass) {
  auto bytes = count * size_of(carrier);
  // Legacy algorithms wait with the timeout their pairs were created with
  // (the group's); an op with a deadline of its own, shorter or longer,
  // takes the options API, which honours per-op timeouts. Ranks that pass
  // different timeouts thus pick different algorithms and fail together
  // (docs/api.md asks for the same options on every rank).
  if (algorithm == allreduce_algorithm::automatic) {
    bool legacy_ok = call.timeout == context_->getTimeout();
    if (!legacy_ok || bytes > medium_allreduce_bytes)
      algorithm = allreduce_algorithm::ring_options_api;
    else if (world_size_ == 2)
      algorithm = allreduce_algorithm::ring;
    else
      algorithm = allreduce_algorithm::halving_doubling;
  }
  // Gloo's legacy algorithms count elements and bytes in an int: above
  // that they would allocate a negative size. Every rank has the same
  // count (or the ops fail anyway), so all of them switch alike.
  if (is_legacy(algorithm) && bytes > size_t{INT_MAX})
    algorithm = allreduce_algorithm::ring_options_api;
  if (is_legacy(algorithm)) {
    auto& cached = legacy_instance(call, algorithm, carrier, count, op, pass);
    std::memcpy(cached.buffer.get(), data, bytes);
    cached.instance->run();
    std::memcpy(data, cached.buffer.get(), bytes);
    return;
  }
  gloo::AllreduceOptions opts{context_};
  opts.setTag(
    tag_of(call.seq, agreement_key({uint64_t(op_kind::allreduce), count,
                                    uint64_t(carrier), uint64_t(op), pass})));
  opts.setTimeout(call.timeout);
  opts.setAlgorithm(algorithm == allreduce_algorithm::bcube
                      ? gloo::AllreduceOptions::Algorithm::BCUBE
                      : gloo::AllreduceOptions::Algorithm::RING);
  visit_carrier(carrier, [&](auto tag) {
    using T = decltype(tag);
    opts.setInput(static_cast<T*>(data), count);
    opts.setOutput(static_cast<T*>(data), count);
  });
  opts.setReduceFunction(kernel_of(carrier, op));
  gloo::allreduce(opts);
}

caf::error gloo_backend::allreduce(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const allreduce_options& opts) {
  // A forced legacy algorithm waits with the group's timeout whatever the
  // op asks: refused before anything moves (every rank given the same
  // options refuses alike) rather than ending early or late.
  if (is_legacy(opts.algorithm) && world_size_ > 1 &&
      call.timeout != context_->getTimeout())
    return make_error(
      errc::invalid_argument, context(op_kind::allreduce, call),
      "allreduce algorithm " + std::string{legacy_name(opts.algorithm)} +
        " waits with the group's timeout (" +
        std::to_string(context_->getTimeout().count()) +
        " ms) and cannot keep this op's " +
        std::to_string(call.timeout.count()) +
        " ms: pass no timeout, or the algorithm automatic, ring_options_api "
        "or bcube");
  return guarded(op_kind::allreduce, call, [&] {
    auto count = in.numel();
    if (count == 0)
      return meet_empty(
        call, agreement_key({uint64_t(op_kind::allreduce), 0,
                             uint64_t(in.type()), uint64_t(opts.op)}));
    if (needs_split_avg(in.type(), opts.op) && world_size_ > 1) {
      auto* q = out.data_as<int64_t>();
      auto* r = reinterpret_cast<int64_t*>(scratch_.reserve(in.nbytes()));
      split_for_avg(in.data_as<int64_t>(), q, r, count, world_size_);
      allreduce_carrier(call, q, dtype::int64, count, reduce_op::sum,
                        opts.algorithm, pass_of(in.type(), opts.op, 0));
      allreduce_carrier(call, r, dtype::int64, count, reduce_op::sum,
                        opts.algorithm, pass_of(in.type(), opts.op, 1));
      join_avg(q, r, q, count, world_size_);
      return;
    }
    auto carrier = carrier_of(in.type(), opts.op);
    void* data = out.data();
    if (carrier == in.type()) {
      if (in.data() != out.data())
        std::memcpy(out.data(), in.data(), in.nbytes());
    } else {
      data = scratch_.reserve(count * size_of(carrier));
      convert(in.data(), in.type(), data, carrier, count);
    }
    if (world_size_ > 1)
      allreduce_carrier(call, data, carrier, count, opts.op, opts.algorithm,
                        pass_of(in.type(), opts.op, 0));
    if (opts.op == reduce_op::avg) divide(data, carrier, count, world_size_);
    if (carrier != in.type())
      convert(data, carrier, out.data(), out.type(), count);
  });
}

void gloo_backend::reduce_carrier(const op_call& call, void* source,
                                  void* target, dtype carrier, size_t count,
                                  reduce_op op, int root, uint64_t pass) {
  gloo::ReduceOptions opts{context_};
  opts.setTag(tag_of(call.seq, agreement_key({uint64_t(op_kind::reduce), count,
                                              uint64_t(carrier), uint64_t(op),
                                              uint64_t(root), pass})));
  opts.setTimeout(call.timeout);
  opts.setRoot(root);
  visit_carrier(carrier, [&](auto tag) {
    using T = decltype(tag);
    opts.setInput(static_cast<T*>(source), count);
    opts.setOutput(static_cast<T*>(target), count);
  });
  opts.setReduceFunction(kernel_of(carrier, op));
  gloo::reduce(opts);
}

caf::error gloo_backend::reduce(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const reduce_options& ropts) {
  return guarded(op_kind::reduce, call, [&] {
    auto count = in.numel();
    if (count == 0)
      return meet_empty(
        call, agreement_key({uint64_t(op_kind::reduce), 0, uint64_t(in.type()),
                             uint64_t(ropts.op), uint64_t(ropts.root)}));
    bool is_root = rank_ == ropts.root;
    if (needs_split_avg(in.type(), ropts.op) && world_size_ > 1) {
      // Split first: the root's output may be its input.
      auto bytes = in.nbytes();
      auto* q = reinterpret_cast<int64_t*>(scratch_.reserve(bytes));
      auto* r = reinterpret_cast<int64_t*>(scratch_avg_.reserve(bytes));
      split_for_avg(in.data_as<int64_t>(), q, r, count, world_size_);
      auto* r_sum = reinterpret_cast<int64_t*>(scratch_recv_.reserve(bytes));
      auto* q_sum = is_root ? out.data_as<int64_t>() : r_sum;
      reduce_carrier(call, q, q_sum, dtype::int64, count, reduce_op::sum,
                     ropts.root, pass_of(in.type(), ropts.op, 0));
      reduce_carrier(call, r, r_sum, dtype::int64, count, reduce_op::sum,
                     ropts.root, pass_of(in.type(), ropts.op, 1));
      if (is_root) join_avg(q_sum, r_sum, q_sum, count, world_size_);
      return;
    }
    auto carrier = carrier_of(in.type(), ropts.op);
    auto carrier_bytes = count * size_of(carrier);
    // Gloo reduces from one buffer into another; widen into scratch when
    // the carrier differs, and give non-roots a scratch output.
    void* source = in.data();
    if (carrier != in.type() || (is_root && in.data() == out.data())) {
      source = scratch_.reserve(carrier_bytes);
      if (carrier != in.type())
        convert(in.data(), in.type(), source, carrier, count);
      else
        std::memcpy(source, in.data(), carrier_bytes);
    }
    void* target = (is_root && carrier == in.type())
                     ? out.data()
                     : scratch_recv_.reserve(carrier_bytes);
    if (world_size_ == 1)
      std::memcpy(target, source, carrier_bytes);
    else
      reduce_carrier(call, source, target, carrier, count, ropts.op, ropts.root,
                     pass_of(in.type(), ropts.op, 0));
    if (!is_root) return;
    if (ropts.op == reduce_op::avg) divide(target, carrier, count, world_size_);
    if (carrier != in.type())
      convert(target, carrier, out.data(), out.type(), count);
  });
}

} // namespace caf_collective::detail
