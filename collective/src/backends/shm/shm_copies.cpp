// shm backend: the collectives that move data without reducing it
// (broadcast, allgather(v), gather, scatter, alltoall(v), barrier), as
// rounds over the sync steps of shm_sync.cpp, and their starts without
// blocking. See shm_backend.hpp for direct and staged mode.
#include <algorithm>
#include <cstring>

#include "backends/shm/shm_backend.hpp"
#include "backends/shm/shm_notice.hpp"

namespace caf_collective::detail::shm {

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
    case path::small:
      // Its own input a rank reads from its buffer, not from its slot,
      // whose lines its peers fetch at the same moment: reading them too
      // cost a 64-256 B reduction 0.05-0.12 us more as processes
      // (docs/benchmarks.md, "A rank's own input from its own buffer").
      if (rank != rank_) return seg_.small_input(rank, st.parity());
      [[fallthrough]];
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

caf::error shm_backend::run_copies(op_state& st, const std::byte* mine,
                                   size_t mine_bytes, size_t longest,
                                   std::span<const need> needs,
                                   std::byte* out) {
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
    if (st.how == path::staged && stages_round(st, c)) {
      // Staged: this round's window of the contribution goes to area A.
      stage_window(mine, mine_bytes, chunk, c, 0);
      if (auto err = step(st)) return err;
    }
    reading_mark reading{*this, st};
    if (auto err = reading.start()) return err;
    for (const auto& n : needs) {
      if (n.peer == rank_) continue;
      auto lo = std::max(n.src_offset, start);
      auto hi = std::min(n.src_offset + n.bytes, end);
      if (lo >= hi) continue;
      auto* to = out + n.dst_offset + (lo - n.src_offset);
      const auto* from = source(st, n.peer, start) + (lo - start);
      if (auto err = copy_from(st, n.peer, from, to, hi - lo)) return err;
    }
    reading.stop();
    // Nobody reuses its buffer or area before every rank read it.
    if (auto err = step(st)) return err;
  }
  return {};
}

void shm_backend::stage_window(const std::byte* mine, size_t mine_bytes,
                               size_t window, size_t c, int area) noexcept {
  auto start = c * window;
  if (start < mine_bytes)
    std::memcpy(seg_.area(rank_, area), mine + start,
                std::min(window, mine_bytes - start));
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
  // Round 0 only stages: done already if staged ahead.
  for (size_t c = st.staged_ahead ? 1 : 0; c <= rounds; ++c) {
    auto start = c * chunk;
    if (c < rounds) stage_window(mine, mine_bytes, chunk, c, int(c % 2));
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
  op_state st{op_kind::broadcast, &call, lazy_deadline{call.timeout}};
  bool root = rank_ == opts.root;
  const auto& src = root ? in : out;
  stage_ahead(st, out.nbytes(), [&] {
    if (root) stage_window(bytes_of(in), in.nbytes(), seg_.area_bytes(), 0, 0);
  });
  // Off the root: the root's input, which only the root published.
  if (!root) st.reads = slot_window{0, out.nbytes()};
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
  return gather_blocks(op_kind::allgather, call, in, out, -1);
}

caf::error shm_backend::gather(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const gather_options& opts) {
  return gather_blocks(op_kind::gather, call, in, out, opts.root);
}

// allgather (root -1: every rank collects) and gather: every rank's input
// is block r of the collecting ranks' outputs.
caf::error shm_backend::gather_blocks(op_kind op, const op_call& call,
                                      const tensor_view& in,
                                      const tensor_view& out, int root) {
  op_state st{op, &call, lazy_deadline{call.timeout}};
  stage_ahead(st, in.nbytes(), [&] {
    stage_window(bytes_of(in), in.nbytes(), seg_.area_bytes(), 0, 0);
  });
  // A gather's other ranks read nothing.
  if (root >= 0 && rank_ != root) st.reads = slot_window{};
  if (auto err =
        begin(st,
              make_notice(op, in, out, in.numel(), root, reduce_op::sum,
                          key_of(op, in.type(), in.numel(), root)),
              {}, payload_of(in)))
    return err;
  auto& needs = needs_; // reused: no allocation per call once grown
  needs.clear();
  if (root < 0 || rank_ == root)
    for (int r = 0; r < world_size_; ++r)
      needs.push_back({r, 0, in.nbytes(), size_t(r) * in.nbytes()});
  return run_copies(st, bytes_of(in), in.nbytes(), in.nbytes(), needs,
                    bytes_of(out));
}

caf::error shm_backend::scatter(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const scatter_options& opts) {
  op_state st{op_kind::scatter, &call, lazy_deadline{call.timeout}};
  bool root = rank_ == opts.root;
  auto block = out.nbytes();
  stage_ahead(st, block * size_t(world_size_), [&] {
    if (root) stage_window(bytes_of(in), in.nbytes(), seg_.area_bytes(), 0, 0);
  });
  // Off the root: this rank's block of the root's input.
  if (!root) st.reads = slot_window{size_t(rank_) * block, block};
  if (auto err =
        begin(st,
              make_notice(
                op_kind::scatter, root ? in : out, out, out.numel(), opts.root,
                reduce_op::sum,
                key_of(op_kind::scatter, out.type(), out.numel(), opts.root)),
              {}, root ? payload_of(in) : std::span<const std::byte>{}))
    return err;
  need mine{opts.root, size_t(rank_) * block, block, 0};
  return run_copies(st, root ? bytes_of(in) : nullptr, root ? in.nbytes() : 0,
                    block * size_t(world_size_), {&mine, 1}, bytes_of(out));
}

caf::error shm_backend::alltoall(const op_call& call, const tensor_view& in,
                                 const tensor_view& out,
                                 const alltoall_options&) {
  op_state st{op_kind::alltoall, &call, lazy_deadline{call.timeout}};
  auto source_view = contribution_of(in, out);
  auto block = in.nbytes() / size_t(world_size_);
  stage_ahead(st, in.nbytes(),
              [&] { stage_alltoall_round(bytes_of(source_view), block, 0); });
  // Of each peer's input, the block meant for this rank.
  st.reads = slot_window{size_t(rank_) * block, block};
  if (auto err =
        begin(st,
              make_notice(op_kind::alltoall, source_view, out, in.numel(), -1,
                          reduce_op::sum,
                          key_of(op_kind::alltoall, in.type(), in.numel())),
              {}, payload_of(source_view)))
    return err;
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

size_t shm_backend::alltoall_window() const noexcept {
  return std::max<size_t>(1, seg_.area_bytes() / size_t(world_size_));
}

void shm_backend::stage_alltoall_round(const std::byte* mine, size_t block,
                                       size_t c) noexcept {
  auto window = alltoall_window();
  auto first = c * window;
  stage_block_windows(mine, block, window, first,
                      std::min(window, block - std::min(block, first)));
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
  auto window = alltoall_window();
  auto rounds = std::max<size_t>(1, (block + window - 1) / window);
  for (size_t c = 0; c < rounds; ++c) {
    auto first = c * window;
    auto bytes = std::min(window, block - std::min(block, first));
    if (stages_round(st, c)) {
      stage_alltoall_round(mine, block, c);
      if (auto err = step(st)) return err;
    }
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
  op_state st{op_kind::allgatherv, &call, lazy_deadline{call.timeout}};
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
  st.how = path_for(st.op, longest);
  return run_copies(st, bytes_of(in), in.nbytes(), longest, needs,
                    bytes_of(out));
}

caf::error shm_backend::alltoallv(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const alltoallv_options& opts) {
  op_state st{op_kind::alltoallv, &call, lazy_deadline{call.timeout}};
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
  st.how = path_for(st.op, longest);
  return run_copies(st, bytes_of(source_view), in.nbytes(), longest, needs,
                    bytes_of(out));
}

caf::error shm_backend::barrier(const op_call& call, const barrier_options&) {
  op_state st{op_kind::barrier, &call, lazy_deadline{call.timeout}};
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
// The start of the copy ops: `contribution` is what the notice names as
// this rank's input (its output off a broadcast's or scatter's root),
// `payload` what goes to its slot; `slot_bytes` and `finisher_bytes` as in
// can_start.
bool shm_backend::start_copy(op_kind op, const op_call& call,
                             const tensor_view& contribution,
                             const tensor_view& out, int root,
                             std::span<const std::byte> payload,
                             size_t slot_bytes, size_t finisher_bytes,
                             op_completion& done) {
  if (!can_start(slot_bytes, finisher_bytes)) return false;
  // broadcast and scatter agree on their output, which every rank has.
  const auto& agreed =
    op == op_kind::broadcast || op == op_kind::scatter ? out : contribution;
  return arrive(call,
                make_notice(op, contribution, out, agreed.numel(), root,
                            reduce_op::sum,
                            key_of(op, agreed.type(), agreed.numel(), root)),
                payload, done);
}

bool shm_backend::start_allgather(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const allgather_options&,
                                  op_completion& done) {
  auto w = size_t(world_size_);
  return start_copy(op_kind::allgather, call, in, out, -1, payload_of(in),
                    in.nbytes(), in.nbytes() * w * w, done);
}

bool shm_backend::start_gather(const op_call& call, const tensor_view& in,
                               const tensor_view& out,
                               const gather_options& opts,
                               op_completion& done) {
  return start_copy(op_kind::gather, call, in, out, opts.root, payload_of(in),
                    in.nbytes(), in.nbytes() * size_t(world_size_), done);
}

bool shm_backend::start_scatter(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const scatter_options& opts,
                                op_completion& done) {
  // Every rank knows the root's contribution: W blocks of its output.
  auto all = out.nbytes() * size_t(world_size_);
  bool root = rank_ == opts.root;
  return start_copy(op_kind::scatter, call, root ? in : out, out, opts.root,
                    root ? payload_of(in) : std::span<const std::byte>{}, all,
                    all, done);
}

bool shm_backend::start_alltoall(const op_call& call, const tensor_view& in,
                                 const tensor_view& out,
                                 const alltoall_options&, op_completion& done) {
  // The input goes to the slot: in place needs no copy of its own.
  return start_copy(op_kind::alltoall, call, in, out, -1, payload_of(in),
                    in.nbytes(), in.nbytes() * size_t(world_size_), done);
}

bool shm_backend::start_broadcast(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const broadcast_options& opts,
                                  op_completion& done) {
  bool root = rank_ == opts.root;
  return start_copy(op_kind::broadcast, call, root ? in : out, out, opts.root,
                    root ? payload_of(in) : std::span<const std::byte>{},
                    out.nbytes(), out.nbytes() * size_t(world_size_), done);
}
} // namespace caf_collective::detail::shm
