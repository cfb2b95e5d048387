// Gloo backend: operations that move data without reducing it. They treat
// every tensor as bytes, so one code path serves every dtype.
#include <cstring>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/scatter.h>

#include "backends/gloo/gloo_backend.hpp"
#include "backends/gloo/slots.hpp"

namespace caf_collective::detail {

namespace {

uint8_t* bytes_of(const tensor_view& x) {
  return static_cast<uint8_t*>(non_null(x.data()));
}

void copy_bytes(const tensor_view& dst, const tensor_view& src) {
  if (src.nbytes() > 0 && dst.data() != src.data())
    std::memcpy(dst.data(), src.data(), src.nbytes());
}

template<class Options>
void tag_and_timeout(Options& opts, const op_call& call, uint64_t key) {
  opts.setTag(tag_of(call.seq, key));
  opts.setTimeout(call.timeout);
}

} // namespace

caf::error gloo_backend::broadcast(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const broadcast_options& bopts) {
  return guarded(op_kind::broadcast, call, [&] {
    if (rank_ == bopts.root) copy_bytes(out, in);
    if (world_size_ == 1) return;
    auto key = agreement_key({uint64_t(op_kind::broadcast), out.numel(),
                              uint64_t(out.type()), uint64_t(bopts.root)});
    if (out.nbytes() == 0) return meet_empty(call, key);
    gloo::BroadcastOptions opts{context_};
    tag_and_timeout(opts, call, key);
    opts.setRoot(bopts.root);
    opts.setOutput(bytes_of(out), out.nbytes());
    gloo::broadcast(opts);
  });
}

caf::error gloo_backend::allgather(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const allgather_options&) {
  return guarded(op_kind::allgather, call, [&] {
    if (world_size_ == 1) return copy_bytes(out, in);
    auto key = agreement_key(
      {uint64_t(op_kind::allgather), in.numel(), uint64_t(in.type())});
    if (in.nbytes() == 0) return meet_empty(call, key);
    gloo::AllgatherOptions opts{context_};
    tag_and_timeout(opts, call, key);
    opts.setInput(bytes_of(in), in.nbytes());
    opts.setOutput(bytes_of(out), out.nbytes());
    gloo::allgather(opts);
  });
}

caf::error gloo_backend::allgatherv(const op_call& call, const tensor_view& in,
                                    const tensor_view& out,
                                    const allgatherv_options& vopts) {
  // One deadline for the headers and the payload.
  op_watch watch{*this, op_kind::allgatherv, call};
  if (world_size_ > 1)
    if (auto err = agree_allgatherv(call, in.type(), vopts.counts)) return err;
  auto err = guarded(op_kind::allgatherv, call, [&] {
    if (out.nbytes() == 0) return;
    if (world_size_ == 1) return copy_bytes(out, in);
    std::vector<size_t> byte_counts;
    for (auto count : vopts.counts)
      byte_counts.push_back(count * size_of(in.type()));
    gloo::AllgathervOptions opts{context_};
    // Ranks agreed on dtype and counts above.
    tag_and_timeout(opts, call,
                    agreement_key({uint64_t(op_kind::allgatherv), out.numel(),
                                   uint64_t(in.type())}));
    opts.setInput(bytes_of(in), in.nbytes());
    opts.setOutput(bytes_of(out), std::move(byte_counts));
    gloo::allgatherv(opts);
  });
  return settled(op_kind::allgatherv, call, watch, std::move(err));
}

caf::error gloo_backend::gather(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const gather_options& gopts) {
  return guarded(op_kind::gather, call, [&] {
    if (world_size_ == 1) return copy_bytes(out, in);
    auto key = agreement_key({uint64_t(op_kind::gather), in.numel(),
                              uint64_t(in.type()), uint64_t(gopts.root)});
    if (in.nbytes() == 0) return meet_empty(call, key);
    gloo::GatherOptions opts{context_};
    tag_and_timeout(opts, call, key);
    opts.setRoot(gopts.root);
    opts.setInput(bytes_of(in), in.nbytes());
    if (rank_ == gopts.root) opts.setOutput(bytes_of(out), out.nbytes());
    gloo::gather(opts);
  });
}

caf::error gloo_backend::scatter(const op_call& call, const tensor_view& in,
                                 const tensor_view& out,
                                 const scatter_options& sopts) {
  return guarded(op_kind::scatter, call, [&] {
    if (world_size_ == 1) return copy_bytes(out, in);
    auto key = agreement_key({uint64_t(op_kind::scatter), out.numel(),
                              uint64_t(out.type()), uint64_t(sopts.root)});
    if (out.nbytes() == 0) return meet_empty(call, key);
    gloo::ScatterOptions opts{context_};
    tag_and_timeout(opts, call, key);
    opts.setRoot(sopts.root);
    if (rank_ == sopts.root) {
      std::vector<uint8_t*> blocks;
      for (int r = 0; r < world_size_; ++r)
        blocks.push_back(bytes_of(in) + r * out.nbytes());
      opts.setInputs(blocks, out.nbytes());
    }
    opts.setOutput(bytes_of(out), out.nbytes());
    gloo::scatter(opts);
  });
}

// Gloo's alltoall(v) receives into block j of the output while block j of
// the input may not be sent yet: in place, it sends from a copy.
uint8_t* gloo_backend::apart_from_output(const tensor_view& in,
                                         const tensor_view& out) {
  if (in.data() != out.data() || in.nbytes() == 0) return bytes_of(in);
  auto* copy = scratch_.reserve(in.nbytes());
  std::memcpy(copy, in.data(), in.nbytes());
  return reinterpret_cast<uint8_t*>(copy);
}

caf::error gloo_backend::alltoall(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const alltoall_options&) {
  return guarded(op_kind::alltoall, call, [&] {
    if (world_size_ == 1) return copy_bytes(out, in);
    auto key = agreement_key(
      {uint64_t(op_kind::alltoall), in.numel(), uint64_t(in.type())});
    if (in.nbytes() == 0) return meet_empty(call, key);
    gloo::AlltoallOptions opts{context_};
    tag_and_timeout(opts, call, key);
    opts.setInput(apart_from_output(in, out), in.nbytes());
    opts.setOutput(bytes_of(out), out.nbytes());
    gloo::alltoall(opts);
  });
}

caf::error gloo_backend::alltoallv(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const alltoallv_options& vopts) {
  // One deadline for the headers and the payload.
  op_watch watch{*this, op_kind::alltoallv, call};
  if (world_size_ > 1)
    if (auto err = agree_alltoallv(call, in.type(), vopts.send_counts,
                                   vopts.recv_counts))
      return err;
  auto err = guarded(op_kind::alltoallv, call, [&] {
    if (world_size_ == 1) return copy_bytes(out, in);
    auto to_bytes = [&](const std::vector<size_t>& counts) {
      std::vector<int64_t> result;
      for (auto count : counts)
        result.push_back(static_cast<int64_t>(count * size_of(in.type())));
      return result;
    };
    gloo::AlltoallvOptions opts{context_};
    // Ranks agreed on dtype and counts above.
    tag_and_timeout(
      opts, call,
      agreement_key({uint64_t(op_kind::alltoallv), uint64_t(in.type())}));
    opts.setInput(apart_from_output(in, out), to_bytes(vopts.send_counts));
    opts.setOutput(bytes_of(out), to_bytes(vopts.recv_counts));
    gloo::alltoallv(opts);
  });
  return settled(op_kind::alltoallv, call, watch, std::move(err));
}

} // namespace caf_collective::detail
