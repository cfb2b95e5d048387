// shm backend: the collectives, as rounds over the sync steps of
// shm_sync.cpp. See shm_backend.hpp for direct and staged mode.
#include <algorithm>
#include <cstring>

#include "backends/common/agreement.hpp"
#include "backends/common/reduce_kernels.hpp"
#include "backends/shm/shm_backend.hpp"

namespace caf_collective::detail::shm {

namespace {

// Elements reduced at once: the carrier accumulator of one block stays in
// L1 while every rank's elements stream through it.
constexpr size_t block_elements = 2048;

std::byte* bytes_of(const tensor_view& x) {
  return static_cast<std::byte*>(x.data());
}

std::span<const std::byte> payload_of(const tensor_view& x) {
  return {bytes_of(x), x.nbytes()};
}

// Elements [first, last) of `n` that rank `r` of `w` reduces.
std::pair<size_t, size_t> slice_of(size_t n, int r, int w) {
  auto first = n * size_t(r) / size_t(w);
  auto last = n * size_t(r + 1) / size_t(w);
  return {first, last};
}

op_notice make_notice(op_kind op, const tensor_view& in, const tensor_view& out,
                      size_t count, int root, reduce_op red, uint64_t key) {
  op_notice n{};
  n.key = key;
  n.in_addr = reinterpret_cast<uint64_t>(in.data());
  n.out_addr = reinterpret_cast<uint64_t>(out.data());
  n.count = count;
  n.root = root;
  n.op = uint8_t(op);
  n.type = uint8_t(in.type());
  n.reduce = uint8_t(red);
  return n;
}

uint64_t key_of(op_kind op, dtype type, size_t count, int root = -1,
                reduce_op red = reduce_op::sum) {
  return agreement_key(
    {uint64_t(op), uint64_t(type), count, uint64_t(root), uint64_t(red)});
}

} // namespace

tensor_view shm_backend::contribution_of(const tensor_view& in,
                                         const tensor_view& out) {
  if (in.data() != out.data() || in.nbytes() == 0) return in;
  // In place: peers read the input while this rank writes the output, so
  // they read a copy (kept and grown, never shrunk).
  if (inplace_.size() < in.nbytes()) inplace_.resize(in.nbytes());
  std::memcpy(inplace_.data(), in.data(), in.nbytes());
  return tensor_view{inplace_.data(), in.type(), in.numel()};
}

std::vector<uint64_t> shm_backend::published_headers(const op_state& st,
                                                     size_t size) const {
  std::vector<uint64_t> all;
  all.reserve(size * size_t(world_size_));
  for (int r = 0; r < world_size_; ++r) {
    const auto* h = seg_.counts(r, st.parity());
    all.insert(all.end(), h, h + size);
  }
  return all;
}

const std::byte* shm_backend::source(const op_state& st, int rank,
                                     size_t round_start) const noexcept {
  switch (st.how) {
    case path::small: return seg_.small_input(rank, st.parity());
    case path::staged:
      // A rank's own contribution need not go through the segment for
      // itself: it reads its input, as in direct mode.
      if (rank != rank_) return seg_.area(rank, 0);
      [[fallthrough]];
    default: {
      auto addr = seg_.control(rank).notice[st.parity()].in_addr;
      return reinterpret_cast<const std::byte*>(addr) + round_start;
    }
  }
}

caf::error shm_backend::reduce_range(const op_state& st, size_t round_start,
                                     size_t first, size_t count, dtype type,
                                     reduce_op op, std::byte* dst) {
  auto es = size_of(type);
  for (int r = 0; r < world_size_; ++r)
    sources_[size_t(r)] = source(st, r, round_start) + first * es - round_start;
  return reduce_sources(st, count, type, op, dst);
}

caf::error shm_backend::reduce_sources(const op_state& st, size_t count,
                                       dtype type, reduce_op op,
                                       std::byte* dst) {
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
      // bits, two passes over the accumulator fewer).
      for (int r = 1; r < world_size_; ++r)
        kernel(r + 1 == world_size_ ? out : acc,
               r == 1 ? srcs[0] + done * es : acc, srcs[size_t(r)] + done * es,
               k);
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
    if (carrier == type)
      std::memcpy(out, acc, k * es);
    else
      convert(acc, carrier, out, type, k);
  }
  return {};
}

caf::error shm_backend::run_copies(op_state& st, const std::byte* mine,
                                   size_t mine_bytes, size_t longest,
                                   std::span<const need> needs,
                                   std::byte* out) {
  st.how = path_for(longest);
  for (const auto& n : needs)
    if (n.peer == rank_ && n.bytes > 0 &&
        out + n.dst_offset != mine + n.src_offset)
      std::memmove(out + n.dst_offset, mine + n.src_offset, n.bytes);
  if (st.how == path::small) {
    // Every contribution came with the op's first step.
    for (const auto& n : needs)
      if (n.peer != rank_ && n.bytes > 0)
        std::memcpy(out + n.dst_offset,
                    seg_.small_input(n.peer, st.parity()) + n.src_offset,
                    n.bytes);
    return {};
  }
  bool rooted = st.op == op_kind::broadcast || st.op == op_kind::scatter ||
                st.op == op_kind::gather;
  if (st.how == path::staged && rooted)
    return pipelined_copies(st, mine, mine_bytes, longest, needs, out);
  auto chunk =
    st.how != path::staged ? std::max<size_t>(longest, 1) : seg_.area_bytes();
  auto rounds = std::max<size_t>(1, (longest + chunk - 1) / chunk);
  for (size_t c = 0; c < rounds; ++c) {
    auto start = c * chunk;
    auto end = start + chunk;
    if (st.how == path::staged) {
      // Staged: this round's window of the contribution goes to area A.
      if (start < mine_bytes)
        std::memcpy(seg_.area(rank_, 0), mine + start,
                    std::min(chunk, mine_bytes - start));
      if (auto err = step(st)) return err;
    }
    if (auto err = start_reading(st)) return err;
    for (const auto& n : needs) {
      if (n.peer == rank_) continue;
      auto lo = std::max(n.src_offset, start);
      auto hi = std::min(n.src_offset + n.bytes, end);
      if (lo >= hi) continue;
      auto* to = out + n.dst_offset + (lo - n.src_offset);
      const auto* from = source(st, n.peer, start) + (lo - start);
      if (auto err = copy_from(st, n.peer, from, to, hi - lo)) {
        stop_reading(st);
        return err;
      }
    }
    stop_reading(st);
    // Nobody reuses its buffer or area before every rank read it.
    if (auto err = step(st)) return err;
  }
  return {};
}

// Staged copies of a rooted op, pipelined over the rank's two areas: in
// round c every rank stages window c of its contribution in area c % 2
// while its peers' window c - 1 is copied out of their other area, then
// steps. A broadcast's or scatter's root thus stages the next window while
// the others copy the last one out (a gather's root copies out while the
// others stage), instead of taking turns, and each window costs one step
// instead of two. An area is refilled two rounds later, after the step that
// every rank reaches only once it copied out of it. Ops where every rank
// stages and copies out (allgather, alltoallv) keep one area: there the
// turns were not idle, and the second area's footprint measured 3-5% slower
// at 4 ranks.
caf::error shm_backend::pipelined_copies(op_state& st, const std::byte* mine,
                                         size_t mine_bytes, size_t longest,
                                         std::span<const need> needs,
                                         std::byte* out) {
  auto chunk = seg_.area_bytes();
  auto rounds = std::max<size_t>(1, (longest + chunk - 1) / chunk);
  for (size_t c = 0; c <= rounds; ++c) {
    auto start = c * chunk;
    if (c < rounds && start < mine_bytes)
      std::memcpy(seg_.area(rank_, int(c % 2)), mine + start,
                  std::min(chunk, mine_bytes - start));
    if (c > 0) {
      auto window = start - chunk; // round c - 1's
      for (const auto& n : needs) {
        if (n.peer == rank_) continue;
        auto lo = std::max(n.src_offset, window);
        auto hi = std::min(n.src_offset + n.bytes, start);
        if (lo >= hi) continue;
        std::memcpy(out + n.dst_offset + (lo - n.src_offset),
                    seg_.area(n.peer, int((c - 1) % 2)) + (lo - window),
                    hi - lo);
      }
    }
    if (auto err = step(st)) return err;
  }
  return {};
}

caf::error shm_backend::broadcast(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const broadcast_options& opts) {
  op_state st{op_kind::broadcast, &call, clock::now() + call.timeout};
  bool root = rank_ == opts.root;
  const auto& src = root ? in : out;
  if (auto err = begin(
        st,
        make_notice(
          op_kind::broadcast, src, out, out.numel(), opts.root, reduce_op::sum,
          key_of(op_kind::broadcast, out.type(), out.numel(), opts.root)),
        {}, root ? payload_of(in) : std::span<const std::byte>{}))
    return err;
  need from_root{opts.root, 0, out.nbytes(), 0};
  return run_copies(st, root ? bytes_of(in) : nullptr, root ? in.nbytes() : 0,
                    out.nbytes(), {&from_root, 1}, bytes_of(out));
}

caf::error shm_backend::allgather(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const allgather_options&) {
  op_state st{op_kind::allgather, &call, clock::now() + call.timeout};
  if (auto err = begin(
        st,
        make_notice(op_kind::allgather, in, out, in.numel(), -1, reduce_op::sum,
                    key_of(op_kind::allgather, in.type(), in.numel())),
        {}, payload_of(in)))
    return err;
  auto& needs = needs_; // reused: no allocation per call once grown
  needs.clear();
  for (int r = 0; r < world_size_; ++r)
    needs.push_back({r, 0, in.nbytes(), size_t(r) * in.nbytes()});
  return run_copies(st, bytes_of(in), in.nbytes(), in.nbytes(), needs,
                    bytes_of(out));
}

caf::error shm_backend::gather(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const gather_options& opts) {
  op_state st{op_kind::gather, &call, clock::now() + call.timeout};
  if (auto err =
        begin(st,
              make_notice(
                op_kind::gather, in, out, in.numel(), opts.root, reduce_op::sum,
                key_of(op_kind::gather, in.type(), in.numel(), opts.root)),
              {}, payload_of(in)))
    return err;
  auto& needs = needs_; // reused: no allocation per call once grown
  needs.clear();
  if (rank_ == opts.root)
    for (int r = 0; r < world_size_; ++r)
      needs.push_back({r, 0, in.nbytes(), size_t(r) * in.nbytes()});
  return run_copies(st, bytes_of(in), in.nbytes(), in.nbytes(), needs,
                    bytes_of(out));
}

caf::error shm_backend::scatter(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const scatter_options& opts) {
  op_state st{op_kind::scatter, &call, clock::now() + call.timeout};
  bool root = rank_ == opts.root;
  if (auto err =
        begin(st,
              make_notice(
                op_kind::scatter, root ? in : out, out, out.numel(), opts.root,
                reduce_op::sum,
                key_of(op_kind::scatter, out.type(), out.numel(), opts.root)),
              {}, root ? payload_of(in) : std::span<const std::byte>{}))
    return err;
  auto block = out.nbytes();
  need mine{opts.root, size_t(rank_) * block, block, 0};
  return run_copies(st, root ? bytes_of(in) : nullptr, root ? in.nbytes() : 0,
                    block * size_t(world_size_), {&mine, 1}, bytes_of(out));
}

caf::error shm_backend::alltoall(const op_call& call, const tensor_view& in,
                                 const tensor_view& out,
                                 const alltoall_options&) {
  op_state st{op_kind::alltoall, &call, clock::now() + call.timeout};
  auto source_view = contribution_of(in, out);
  if (auto err =
        begin(st,
              make_notice(op_kind::alltoall, source_view, out, in.numel(), -1,
                          reduce_op::sum,
                          key_of(op_kind::alltoall, in.type(), in.numel())),
              {}, payload_of(source_view)))
    return err;
  auto block = in.nbytes() / size_t(world_size_);
  st.how = path_for(in.nbytes());
  if (st.how == path::staged)
    return staged_alltoall(st, bytes_of(source_view), block, bytes_of(out));
  auto& needs = needs_; // reused: no allocation per call once grown
  needs.clear();
  for (int r = 0; r < world_size_; ++r)
    needs.push_back({r, size_t(rank_) * block, block, size_t(r) * block});
  return run_copies(st, bytes_of(source_view), in.nbytes(), in.nbytes(), needs,
                    bytes_of(out));
}

void shm_backend::stage_block_windows(const std::byte* mine, size_t block,
                                      size_t window, size_t first,
                                      size_t bytes) noexcept {
  auto* area = seg_.area(rank_, 0);
  for (int b = 0; b < world_size_; ++b)
    if (b != rank_)
      std::memcpy(area + size_t(b) * window, mine + size_t(b) * block + first,
                  bytes);
}

// Staged alltoall, like staged reduce_scatter: round c moves window c of
// every block at once, so every rank copies out in every round, and no
// rank stages the block it keeps. (Rounds over the flat input staged that
// block too, and left every rank whose block the round missed waiting.)
caf::error shm_backend::staged_alltoall(op_state& st, const std::byte* mine,
                                        size_t block, std::byte* out) {
  auto own = size_t(rank_) * block;
  if (block > 0 && out + own != mine + own)
    std::memmove(out + own, mine + own, block);
  auto window = std::max<size_t>(1, seg_.area_bytes() / size_t(world_size_));
  auto rounds = std::max<size_t>(1, (block + window - 1) / window);
  for (size_t c = 0; c < rounds; ++c) {
    auto first = c * window;
    auto bytes = std::min(window, block - std::min(block, first));
    stage_block_windows(mine, block, window, first, bytes);
    if (auto err = step(st)) return err;
    for (int p = 0; p < world_size_; ++p)
      if (p != rank_)
        std::memcpy(out + size_t(p) * block + first,
                    seg_.area(p, 0) + size_t(rank_) * window, bytes);
    // Nobody refills its area before every rank copied out of it.
    if (auto err = step(st)) return err;
  }
  return {};
}

caf::error shm_backend::allgatherv(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const allgatherv_options& opts) {
  op_state st{op_kind::allgatherv, &call, clock::now() + call.timeout};
  std::vector<uint64_t> header{uint64_t(in.type())};
  header.insert(header.end(), opts.counts.begin(), opts.counts.end());
  // The key names the op only: the counts are compared below, with a
  // better message than "the keys differ".
  if (auto err =
        begin(st,
              make_notice(op_kind::allgatherv, in, out, out.numel(), -1,
                          reduce_op::sum,
                          key_of(op_kind::allgatherv, dtype::uint8, 0)),
              header, payload_of(in)))
    return err;
  auto all = published_headers(st, header.size());
  // Every rank sees every header: all fail here, or none.
  if (auto err = check_allgatherv_headers(context(op_kind::allgatherv, &call),
                                          world_size_, all))
    return err;
  auto es = size_of(in.type());
  auto& needs = needs_; // reused: no allocation per call once grown
  needs.clear();
  size_t offset = 0;
  size_t longest = 0;
  for (int r = 0; r < world_size_; ++r) {
    auto bytes = opts.counts[size_t(r)] * es;
    needs.push_back({r, 0, bytes, offset});
    offset += bytes;
    longest = std::max(longest, bytes);
  }
  return run_copies(st, bytes_of(in), in.nbytes(), longest, needs,
                    bytes_of(out));
}

caf::error shm_backend::alltoallv(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const alltoallv_options& opts) {
  op_state st{op_kind::alltoallv, &call, clock::now() + call.timeout};
  auto w = size_t(world_size_);
  std::vector<uint64_t> header{uint64_t(in.type())};
  header.insert(header.end(), opts.send_counts.begin(), opts.send_counts.end());
  header.insert(header.end(), opts.recv_counts.begin(), opts.recv_counts.end());
  auto source_view = contribution_of(in, out);
  if (auto err = begin(st,
                       make_notice(op_kind::alltoallv, source_view, out,
                                   in.numel(), -1, reduce_op::sum,
                                   key_of(op_kind::alltoallv, dtype::uint8, 0)),
                       header, payload_of(source_view)))
    return err;
  auto all = published_headers(st, header.size());
  if (auto err = check_alltoallv_headers(context(op_kind::alltoallv, &call),
                                         world_size_, all))
    return err;
  auto es = size_of(in.type());
  auto header_of = [&](size_t r) { return all.data() + r * header.size(); };
  auto& needs = needs_; // reused: no allocation per call once grown
  needs.clear();
  size_t recv_offset = 0;
  size_t longest = 0;
  for (size_t r = 0; r < w; ++r) {
    // Rank r's block for us starts after its blocks for ranks before us.
    const auto* sends = header_of(r) + 1;
    size_t send_offset = 0;
    size_t total = 0;
    for (size_t j = 0; j < w; ++j) {
      if (j < size_t(rank_)) send_offset += sends[j];
      total += sends[j];
    }
    auto bytes = sends[size_t(rank_)] * es;
    needs.push_back({int(r), send_offset * es, bytes, recv_offset});
    recv_offset += bytes;
    longest = std::max(longest, total * es);
  }
  return run_copies(st, bytes_of(source_view), in.nbytes(), longest, needs,
                    bytes_of(out));
}

caf::error shm_backend::barrier(const op_call& call, const barrier_options&) {
  op_state st{op_kind::barrier, &call, clock::now() + call.timeout};
  return begin(st, make_notice(op_kind::barrier, {}, {}, 0, -1, reduce_op::sum,
                               key_of(op_kind::barrier, dtype::uint8, 0)));
}

bool shm_backend::start_barrier(const op_call& call, const barrier_options&,
                                op_completion& done) {
  if (!can_start(0, 0)) return false;
  return arrive(call,
                make_notice(op_kind::barrier, {}, {}, 0, -1, reduce_op::sum,
                            key_of(op_kind::barrier, dtype::uint8, 0)),
                {}, done);
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

bool shm_backend::start_allgather(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const allgather_options&,
                                  op_completion& done) {
  if (!can_start(in.nbytes(),
                 in.nbytes() * size_t(world_size_) * size_t(world_size_)))
    return false;
  return arrive(call,
                make_notice(op_kind::allgather, in, out, in.numel(), -1,
                            reduce_op::sum,
                            key_of(op_kind::allgather, in.type(), in.numel())),
                payload_of(in), done);
}

bool shm_backend::start_gather(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const gather_options& opts,
                               op_completion& done) {
  if (!can_start(in.nbytes(), in.nbytes() * size_t(world_size_))) return false;
  return arrive(
    call,
    make_notice(op_kind::gather, in, out, in.numel(), opts.root, reduce_op::sum,
                key_of(op_kind::gather, in.type(), in.numel(), opts.root)),
    payload_of(in), done);
}

bool shm_backend::start_scatter(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const scatter_options& opts,
                                op_completion& done) {
  // Every rank knows the root's contribution: W blocks of its output.
  if (!can_start(out.nbytes() * size_t(world_size_),
                 out.nbytes() * size_t(world_size_)))
    return false;
  bool root = rank_ == opts.root;
  return arrive(
    call,
    make_notice(op_kind::scatter, root ? in : out, out, out.numel(), opts.root,
                reduce_op::sum,
                key_of(op_kind::scatter, out.type(), out.numel(), opts.root)),
    root ? payload_of(in) : std::span<const std::byte>{}, done);
}

bool shm_backend::start_alltoall(const op_call& call, const tensor_view& in,
                                 const tensor_view& out,
                                 const alltoall_options&, op_completion& done) {
  // The input goes to the slot: in place needs no copy of its own.
  if (!can_start(in.nbytes(), in.nbytes() * size_t(world_size_))) return false;
  return arrive(call,
                make_notice(op_kind::alltoall, in, out, in.numel(), -1,
                            reduce_op::sum,
                            key_of(op_kind::alltoall, in.type(), in.numel())),
                payload_of(in), done);
}

bool shm_backend::start_broadcast(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const broadcast_options& opts,
                                  op_completion& done) {
  if (!can_start(out.nbytes(), out.nbytes() * size_t(world_size_)))
    return false;
  bool root = rank_ == opts.root;
  return arrive(
    call,
    make_notice(op_kind::broadcast, root ? in : out, out, out.numel(),
                opts.root, reduce_op::sum,
                key_of(op_kind::broadcast, out.type(), out.numel(), opts.root)),
    root ? payload_of(in) : std::span<const std::byte>{}, done);
}

caf::error shm_backend::allreduce(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const allreduce_options& opts) {
  op_state st{op_kind::allreduce, &call, clock::now() + call.timeout};
  auto n = in.numel();
  if (auto err = begin(
        st,
        make_notice(op_kind::allreduce, in, out, n, -1, opts.op,
                    key_of(op_kind::allreduce, in.type(), n, -1, opts.op)),
        {}, payload_of(in)))
    return err;
  auto es = size_of(in.type());
  st.how = path_for(n * es);
  // Small: every rank reduces everything from the slots, in rank order.
  if (st.how == path::small)
    return reduce_range(st, 0, 0, n, in.type(), opts.op, bytes_of(out));
  // Direct, single copy: one round over everything; staged: rounds of one
  // area.
  auto chunk_elems =
    st.how != path::staged ? std::max<size_t>(n, 1) : seg_.area_bytes() / es;
  auto rounds = std::max<size_t>(1, (n + chunk_elems - 1) / chunk_elems);
  for (size_t c = 0; c < rounds; ++c) {
    auto first = c * chunk_elems;
    auto count = std::min(chunk_elems, n - std::min(n, first));
    auto start = first * es;
    bool staged = st.how == path::staged;
    auto [lo, hi] = slice_of(count, rank_, world_size_);
    if (staged) {
      // The peers reduce all but my slice: only that goes to the area (at
      // its place in the round); my slice I read from my input (source()).
      std::memcpy(seg_.area(rank_, 0), bytes_of(in) + start, lo * es);
      std::memcpy(seg_.area(rank_, 0) + hi * es, bytes_of(in) + start + hi * es,
                  (count - hi) * es);
      if (auto err = step(st)) return err;
    }
    // Phase 1: my slice of this round, across every rank's input.
    if (auto err = start_reading(st)) return err;
    auto reduced = reduce_range(st, start, first + lo, hi - lo, in.type(),
                                opts.op, bytes_of(out) + start + lo * es);
    stop_reading(st);
    if (reduced) return reduced;
    if (staged)
      std::memcpy(seg_.area(rank_, 1) + lo * es,
                  bytes_of(out) + start + lo * es, (hi - lo) * es);
    if (auto err = step(st)) return err;
    // Phase 2: every other slice from the rank that reduced it.
    if (auto err = start_reading(st)) return err;
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
      if (auto err = copy_from(st, r, from, to, bytes)) {
        stop_reading(st);
        return err;
      }
    }
    stop_reading(st);
    if (auto err = step(st)) return err;
  }
  return {};
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
  op_state st{kind, &call, clock::now() + call.timeout};
  auto n = in.numel();
  if (auto err = begin(st, make_notice(kind, in, out, n, root, op, key), {},
                       payload_of(in)))
    return err;
  auto es = size_of(in.type());
  st.how = path_for(n * es);
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
    if (auto err = start_reading(st)) return err;
    auto reduced =
      reduce_range(st, 0, want_first, want_count, in.type(), op, bytes_of(out));
    stop_reading(st);
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
  auto window = std::max<size_t>(1, seg_.area_bytes() / es);
  auto rounds = std::max<size_t>(1, (n + window - 1) / window);
  for (size_t c = 0; c <= rounds; ++c) {
    if (c < rounds && rank_ != root) {
      auto first = c * window;
      std::memcpy(seg_.area(rank_, int(c % 2)), bytes_of(in) + first * es,
                  std::min(window, n - first) * es);
    }
    if (c > 0 && rank_ == root) {
      auto first = (c - 1) * window;
      for (int r = 0; r < world_size_; ++r)
        sources_[size_t(r)] = r == rank_ ? bytes_of(in) + first * es
                                         : seg_.area(r, int((c - 1) % 2));
      if (auto err = reduce_sources(st, std::min(window, n - first), in.type(),
                                    op, bytes_of(out) + first * es))
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
  auto window =
    std::max<size_t>(1, seg_.area_bytes() / (es * size_t(world_size_)));
  auto rounds = std::max<size_t>(1, (block + window - 1) / window);
  for (size_t c = 0; c < rounds; ++c) {
    auto first = c * window;
    auto count = std::min(window, block - std::min(block, first));
    stage_block_windows(bytes_of(in), block * es, window * es, first * es,
                        count * es);
    if (auto err = step(st)) return err;
    for (int r = 0; r < world_size_; ++r)
      sources_[size_t(r)] =
        r == rank_ ? bytes_of(in) + (size_t(rank_) * block + first) * es
                   : seg_.area(r, 0) + size_t(rank_) * window * es;
    if (auto err =
          reduce_sources(st, count, in.type(), op, bytes_of(out) + first * es))
      return err;
    // Nobody refills its area before every rank reduced from it.
    if (auto err = step(st)) return err;
  }
  return {};
}

} // namespace caf_collective::detail::shm
