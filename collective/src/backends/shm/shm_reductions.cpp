// shm backend: the reductions (allreduce, reduce, reduce_scatter), as
// rounds over the sync steps of shm_sync.cpp, and their starts without
// blocking. See shm_backend.hpp for direct and staged mode.
#include <algorithm>
#include <cstring>

#include "backends/common/reduce_kernels.hpp"
#include "backends/common/stream_copy.hpp"
#include "backends/shm/shm_backend.hpp"
#include "backends/shm/shm_notice.hpp"

namespace caf_collective::detail::shm {

namespace {

// Elements reduced at once: the carrier accumulator of one block stays in
// L1 while every rank's elements stream through it.
constexpr size_t block_elements = 2048;

// Elements [first, last) of `n` that rank `r` of `w` reduces.
std::pair<size_t, size_t> slice_of(size_t n, int r, int w) {
  auto first = n * size_t(r) / size_t(w);
  auto last = n * size_t(r + 1) / size_t(w);
  return {first, last};
}

// Results of this many bytes and more bypass the caches (stream_copy) when
// no peer reads them next: they do not fit, and a plain store reads each
// line before it writes it. Measured with 2 ranks: streaming made reduce
// 1.15-1.3x and reduce_scatter 1.05-1.2x as fast at 64 and 256 MiB, but
// reduce 0.93x at 16 MiB, where the result is still read back from the
// caches; the threshold lies between (32 MiB itself was not measured).
constexpr size_t stream_min_bytes = size_t{32} << 20;

bool streams(size_t result_bytes) {
  return result_bytes >= stream_min_bytes;
}

// Copies `bytes` of a result of `result_bytes` to `dst`, streaming when
// streams(result_bytes); the stores are ordered before the caller's next
// sync step.
void store_result(std::byte* dst, const std::byte* src, size_t bytes,
                  size_t result_bytes) {
  if (!streams(result_bytes)) {
    std::memcpy(dst, src, bytes);
    return;
  }
  stream_copy(dst, src, bytes);
  stream_fence();
}

} // namespace

caf::error shm_backend::reduce_range(const op_state& st, size_t round_start,
                                     size_t first, size_t count, dtype type,
                                     reduce_op op, std::byte* dst,
                                     bool stream) {
  auto es = size_of(type);
  for (int r = 0; r < world_size_; ++r)
    sources_[size_t(r)] = source(st, r, round_start) + first * es - round_start;
  return reduce_sources(st, count, type, op, dst, stream);
}

caf::error shm_backend::reduce_sources(const op_state& st, size_t count,
                                       dtype type, reduce_op op, std::byte* dst,
                                       bool stream) {
  auto es = size_of(type);
  auto carrier = carrier_of(type, op);
  auto cs = size_of(carrier);
  auto kernel = kernel_of(carrier, op);
  const auto& srcs = sources_; // sized once: no allocation per call
  // Single copy: peers' blocks come through one scratch block each, in
  // larger blocks to spread the system call.
  bool remote = st.how == path::single_copy;
  auto block = remote ? single_copy_block_elements : block_elements;
  for (size_t done = 0; done < count; done += block) {
    auto k = std::min(block, count - done);
    // Points `in` at rank r's k elements of this block; valid until the
    // next fetch.
    const std::byte* in = nullptr;
    auto fetch = [&](int r) -> caf::error {
      in = srcs[size_t(r)] + done * es;
      if (!remote || pids_[size_t(r)] == pids_[size_t(rank_)]) return {};
      auto err =
        pull(st, r, reinterpret_cast<uint64_t>(in), pulled_.data(), k * es);
      in = pulled_.data();
      return err;
    };
    auto* out = dst + done * es;
    if (needs_split_avg(type, op)) {
      // The exact sum of int64 values needs 128 bits.
      auto* sums = reinterpret_cast<__int128*>(acc_.data());
      for (int r = 0; r < world_size_; ++r) {
        if (auto err = fetch(r)) return err;
        for (size_t i = 0; i < k; ++i) {
          int64_t x;
          std::memcpy(&x, in + i * 8, 8);
          sums[i] = (r == 0 ? 0 : sums[i]) + x;
        }
      }
      for (size_t i = 0; i < k; ++i) {
        auto avg = static_cast<int64_t>(sums[i] / world_size_);
        std::memcpy(out + i * 8, &avg, 8);
      }
      continue;
    }
    // Accumulate in rank order in the carrier: every element is reduced once,
    // by one rank, so every rank ends with the same bits.
    auto* acc = acc_.data();
    if (!remote && carrier == type && op != reduce_op::avg && world_size_ > 1) {
      // Nothing to fetch or convert: the kernels read the sources where
      // they are, and the last one writes the output (same order, same
      // bits, two passes over the accumulator fewer), unless it streams.
      for (int r = 1; r < world_size_; ++r)
        kernel(r + 1 == world_size_ && !stream ? out : acc,
               r == 1 ? srcs[0] + done * es : acc, srcs[size_t(r)] + done * es,
               k);
      if (stream) stream_copy(out, acc, k * es);
      continue;
    }
    if (auto err = fetch(0)) return err;
    if (carrier == type)
      std::memcpy(acc, in, k * cs);
    else
      convert(in, type, acc, carrier, k);
    for (int r = 1; r < world_size_; ++r) {
      if (auto err = fetch(r)) return err;
      if (carrier == type) {
        kernel(acc, acc, in, k);
      } else {
        convert(in, type, tmp_.data(), carrier, k);
        kernel(acc, acc, tmp_.data(), k);
      }
    }
    if (op == reduce_op::avg) divide(acc, carrier, k, world_size_);
    // Narrowed from the carrier straight into the output, unless it streams.
    const std::byte* result = acc;
    if (carrier != type) {
      auto* narrowed = stream ? tmp_.data() : out;
      convert(acc, carrier, narrowed, type, k);
      result = narrowed;
    }
    if (stream)
      stream_copy(out, result, k * es);
    else if (result != out)
      std::memcpy(out, result, k * es);
  }
  if (stream) stream_fence();
  return {};
}

bool shm_backend::start_reduction(op_kind op, const op_call& call,
                                  const tensor_view& in, const tensor_view& out,
                                  int root, reduce_op how,
                                  size_t finisher_bytes, op_completion& done) {
  auto n = in.numel();
  if (!can_start(in.nbytes(), finisher_bytes)) return false;
  return arrive(
    call,
    make_notice(op, in, out, n, root, how, key_of(op, in.type(), n, root, how)),
    payload_of(in), done);
}

bool shm_backend::start_allreduce(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const allreduce_options& opts,
                                  op_completion& done) {
  return start_reduction(op_kind::allreduce, call, in, out, -1, opts.op,
                         in.nbytes() * size_t(world_size_), done);
}

bool shm_backend::start_reduce(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const reduce_options& opts,
                               op_completion& done) {
  return start_reduction(op_kind::reduce, call, in, out, opts.root, opts.op,
                         in.nbytes(), done);
}

bool shm_backend::start_reduce_scatter(const op_call& call,
                                       const tensor_view& in,
                                       const tensor_view& out,
                                       const reduce_scatter_options& opts,
                                       op_completion& done) {
  return start_reduction(op_kind::reduce_scatter, call, in, out, -1, opts.op,
                         in.nbytes(), done);
}

caf::error shm_backend::allreduce(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const allreduce_options& opts) {
  op_state st{op_kind::allreduce, &call, lazy_deadline{call.timeout}};
  auto n = in.numel();
  auto es = size_of(in.type());
  stage_ahead(st, n * es,
              [&] { stage_allreduce_round(bytes_of(in), n, es, 0); });
  if (auto err = begin(
        st,
        make_notice(op_kind::allreduce, in, out, n, -1, opts.op,
                    key_of(op_kind::allreduce, in.type(), n, -1, opts.op)),
        {}, payload_of(in)))
    return err;
  // Small: every rank reduces everything, in rank order, from the peers'
  // slots and its own input (source()).
  if (st.how == path::small)
    return reduce_range(st, 0, 0, n, in.type(), opts.op, bytes_of(out));
  // Direct, single copy: one round over everything; staged: rounds of one
  // area.
  auto chunk_elems =
    st.how != path::staged ? std::max<size_t>(n, 1) : area_elements(es);
  auto rounds = std::max<size_t>(1, (n + chunk_elems - 1) / chunk_elems);
  for (size_t c = 0; c < rounds; ++c) {
    auto first = c * chunk_elems;
    auto count = std::min(chunk_elems, n - std::min(n, first));
    auto start = first * es;
    bool staged = st.how == path::staged;
    auto [lo, hi] = slice_of(count, rank_, world_size_);
    if (staged && stages_round(st, c)) {
      stage_allreduce_round(bytes_of(in), n, es, c);
      if (auto err = step(st)) return err;
    }
    // Phase 1: my slice of this round, across every rank's input. Staged,
    // it is reduced into area B, where the peers read it, and goes to the
    // output from there.
    reading_mark slice_reads{*this, st};
    if (auto err = slice_reads.start()) return err;
    auto* mine = bytes_of(out) + start + lo * es;
    auto reduced =
      reduce_range(st, start, first + lo, hi - lo, in.type(), opts.op,
                   staged ? seg_.area(rank_, 1) + lo * es : mine);
    slice_reads.stop();
    if (reduced) return reduced;
    if (staged)
      store_result(mine, seg_.area(rank_, 1) + lo * es, (hi - lo) * es, n * es);
    if (auto err = step(st)) return err;
    // Phase 2: every other slice from the rank that reduced it.
    reading_mark other_slices{*this, st};
    if (auto err = other_slices.start()) return err;
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      auto [rlo, rhi] = slice_of(count, r, world_size_);
      auto* to = bytes_of(out) + start + rlo * es;
      auto bytes = (rhi - rlo) * es;
      const std::byte* from =
        staged ? seg_.area(r, 1) + rlo * es
               : reinterpret_cast<const std::byte*>(
                   seg_.control(r).notice[st.parity()].out_addr) +
                   start + rlo * es;
      if (auto err = copy_from(st, r, from, to, bytes)) return err;
    }
    other_slices.stop();
    if (auto err = step(st)) return err;
  }
  return {};
}

void shm_backend::stage_allreduce_round(const std::byte* in, size_t n,
                                        size_t es, size_t c) noexcept {
  auto chunk_elems = area_elements(es);
  auto first = c * chunk_elems;
  auto count = std::min(chunk_elems, n - std::min(n, first));
  auto start = first * es;
  auto [lo, hi] = slice_of(count, rank_, world_size_);
  // The peers reduce all but my slice: only that goes to the area (at its
  // place in the round); my slice I read from my input (source()).
  std::memcpy(seg_.area(rank_, 0), in + start, lo * es);
  std::memcpy(seg_.area(rank_, 0) + hi * es, in + start + hi * es,
              (count - hi) * es);
}

caf::error shm_backend::reduce(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const reduce_options& opts) {
  return reduce_common(
    call, op_kind::reduce, in, out, opts.op, opts.root,
    key_of(op_kind::reduce, in.type(), in.numel(), opts.root, opts.op));
}

caf::error shm_backend::reduce_scatter(const op_call& call,
                                       const tensor_view& in,
                                       const tensor_view& out,
                                       const reduce_scatter_options& opts) {
  return reduce_common(
    call, op_kind::reduce_scatter, in, out, opts.op, -1,
    key_of(op_kind::reduce_scatter, in.type(), in.numel(), -1, opts.op));
}

// reduce: the root reduces everything; reduce_scatter: rank r reduces
// block r. Either way each rank reads what it reduces straight from the
// sources: one pass, no second phase.
caf::error shm_backend::reduce_common(const op_call& call, op_kind kind,
                                      const tensor_view& in,
                                      const tensor_view& out, reduce_op op,
                                      int root, uint64_t key) {
  op_state st{kind, &call, lazy_deadline{call.timeout}};
  auto n = in.numel();
  auto es = size_of(in.type());
  stage_ahead(st, n * es, [&] {
    if (kind == op_kind::reduce_scatter)
      stage_reduce_scatter_round(bytes_of(in), out.numel(), es, 0);
    else if (rank_ != root)
      stage_window(bytes_of(in), in.nbytes(), area_elements(es) * es, 0, 0);
  });
  // What this rank reads of each peer's input: reduce_scatter its block,
  // reduce's root everything, the other ranks of a reduce nothing.
  if (kind == op_kind::reduce_scatter)
    st.reads = slot_window{size_t(rank_) * out.nbytes(), out.nbytes()};
  else if (rank_ != root)
    st.reads = slot_window{};
  if (auto err = begin(st, make_notice(kind, in, out, n, root, op, key), {},
                       payload_of(in)))
    return err;
  // The elements this rank reduces.
  size_t want_first = 0;
  size_t want_count = 0;
  if (kind == op_kind::reduce) {
    if (rank_ == root) want_count = n;
  } else {
    want_count = out.numel();
    want_first = size_t(rank_) * want_count;
  }
  if (st.how == path::small)
    return want_count == 0 ? caf::error{}
                           : reduce_range(st, 0, want_first, want_count,
                                          in.type(), op, bytes_of(out));
  if (st.how == path::staged && kind == op_kind::reduce_scatter)
    return staged_reduce_scatter(st, in, out, op);
  if (st.how == path::staged) return staged_reduce(st, in, out, op, root);
  // Direct or single copy: one pass, straight from the peers' buffers.
  if (want_count > 0) {
    reading_mark reading{*this, st};
    if (auto err = reading.start()) return err;
    auto reduced = reduce_range(st, 0, want_first, want_count, in.type(), op,
                                bytes_of(out), streams(want_count * es));
    reading.stop();
    if (reduced) return reduced;
  }
  // Nobody reuses its buffer before every rank read it.
  return step(st);
}

// Staged reduce, pipelined over the ranks' two areas: in round c every rank
// but the root stages window c in area c % 2 while the root reduces window
// c - 1 from the other areas and its own input, then all step. (Taking
// turns, the others waited while the root reduced, and the root staged its
// own input for nobody.) An area is refilled two rounds later, after the
// step the root reaches only once it reduced from it.
caf::error shm_backend::staged_reduce(op_state& st, const tensor_view& in,
                                      const tensor_view& out, reduce_op op,
                                      int root) {
  auto es = size_of(in.type());
  auto n = in.numel();
  auto window = area_elements(es);
  auto rounds = std::max<size_t>(1, (n + window - 1) / window);
  // Round 0 only stages: done already if staged ahead.
  for (size_t c = st.staged_ahead ? 1 : 0; c <= rounds; ++c) {
    if (c < rounds && rank_ != root)
      stage_window(bytes_of(in), in.nbytes(), window * es, c, int(c % 2));
    if (c > 0 && rank_ == root) {
      auto first = (c - 1) * window;
      for (int r = 0; r < world_size_; ++r)
        sources_[size_t(r)] = r == rank_ ? bytes_of(in) + first * es
                                         : seg_.area(r, int((c - 1) % 2));
      if (auto err =
            reduce_sources(st, std::min(window, n - first), in.type(), op,
                           bytes_of(out) + first * es, streams(n * es)))
        return err;
    }
    if (auto err = step(st)) return err;
  }
  return {};
}

// Staged reduce_scatter: a round moves the same window of every block at
// once, so every rank reduces in every round. (Rounds over the flat input,
// as reduce uses, would leave all ranks but the block's owner idle while it
// reduces, and copy in blocks nobody reads.) Rank r copies the window of
// every block but its own into its area, at the block's place there; block
// r's window is then read from every peer's area and from r's own input,
// which never goes through the segment.
caf::error shm_backend::staged_reduce_scatter(op_state& st,
                                              const tensor_view& in,
                                              const tensor_view& out,
                                              reduce_op op) {
  auto es = size_of(in.type());
  auto block = out.numel();
  auto window = reduce_scatter_window(es);
  auto rounds = std::max<size_t>(1, (block + window - 1) / window);
  for (size_t c = 0; c < rounds; ++c) {
    auto first = c * window;
    auto count = std::min(window, block - std::min(block, first));
    if (stages_round(st, c)) {
      stage_reduce_scatter_round(bytes_of(in), block, es, c);
      if (auto err = step(st)) return err;
    }
    for (int r = 0; r < world_size_; ++r)
      sources_[size_t(r)] =
        r == rank_ ? bytes_of(in) + (size_t(rank_) * block + first) * es
                   : seg_.area(r, 0) + size_t(rank_) * window * es;
    if (auto err =
          reduce_sources(st, count, in.type(), op, bytes_of(out) + first * es,
                         streams(block * es)))
      return err;
    // Nobody refills its area before every rank reduced from it.
    if (auto err = step(st)) return err;
  }
  return {};
}

size_t shm_backend::area_elements(size_t es) const noexcept {
  return std::max<size_t>(1, seg_.area_bytes() / es);
}

size_t shm_backend::reduce_scatter_window(size_t es) const noexcept {
  return std::max<size_t>(1, seg_.area_bytes() / (es * size_t(world_size_)));
}

void shm_backend::stage_reduce_scatter_round(const std::byte* in, size_t block,
                                             size_t es, size_t c) noexcept {
  auto window = reduce_scatter_window(es);
  auto first = c * window;
  auto count = std::min(window, block - std::min(block, first));
  stage_block_windows(in, block * es, window * es, first * es, count * es);
}

} // namespace caf_collective::detail::shm
