// shm backend: ops started without blocking (shm_arrivals.hpp), the
// arrival of a rank that does not wait and the finisher that ends them.
#include <cstring>

#include <sched.h>

#include "backends/shm/shm_backend.hpp"

namespace caf_collective::detail::shm {

bool shm_backend::can_start(size_t bytes,
                            size_t finisher_bytes) const noexcept {
  // A peer's abort is reported by the blocking path, which names it.
  return hub_ && bytes <= seg_.small_bytes() &&
         finisher_bytes <= max_finisher_bytes && !aborted_anywhere();
}

bool shm_backend::arrive(const op_call& call, op_notice notice,
                         std::span<const std::byte> payload,
                         op_completion& done) {
  if (arrival_test_hook != nullptr) [[unlikely]]
    arrival_test_hook(*this);
  auto target = epoch_ + 1;
  auto parity = static_cast<int>(target % 2);
  auto& mine = seg_.control(rank_);
  notice.no_waiter = 1;
  notice.seq = call.seq;
  publish(parity, notice, payload);
  auto& record = hub_->at(rank_);
  record.done = std::move(done);
  record.op = static_cast<op_kind>(notice.op);
  record.seq = call.seq;
  record.timeout = call.timeout;
  hub_->publish(rank_, target, clock::now() + call.timeout);
  epoch_ = target;
  hub_->arrived(rank_).store(target, std::memory_order_release);
  mine.line(target).cpu.store(sched_getcpu(), std::memory_order_relaxed);
  announce(); // as step() does before every epoch it sets
  // Sequentially consistent: of two ranks arriving at once, at least one
  // sees the other's epoch, so somebody always finishes the step.
  mine.line(target).epoch.store(target, std::memory_order_seq_cst);
  ring(); // ranks that wait for this step
  if (aborted_.load(std::memory_order_seq_cst)) {
    // Aborted on another thread since can_start: its abort may have ended
    // the ops in flight before this one was published.
    if (hub_->claim(rank_, target))
      hub_->fail(rank_, errc::aborted, "backend aborted: " + abort_reason_);
    return true;
  }
  if (auto mark = first_aborter(); mark.rank >= 0) {
    // A peer aborted since can_start: its fail_all could not see this op,
    // and no finisher may come. End it as fail_all would have.
    if (hub_->claim(rank_, target))
      hub_->fail_aborted(rank_, -1, mark.rank, mark.code);
    return true;
  }
  for (int r = 0; r < world_size_; ++r)
    if (!seg_.control(r).reached(target, std::memory_order_seq_cst))
      return true; // a later arrival finishes it
  serve_arrivals(target, disagreement(parity));
  return true;
}

void shm_backend::serve_arrivals(uint64_t target, const std::string& mismatch) {
  auto parity = static_cast<int>(target % 2);
  int sample = -1;
  for (int r = 0; r < world_size_ && sample < 0; ++r)
    if (seg_.control(r).sync[parity].no_waiter != 0) sample = r;
  if (sample < 0 || !hub_->win(target)) return;
  // The ranks agree (else `mismatch` says why): any notice stands for all.
  const auto& n = seg_.control(sample).notice[parity];
  auto op = static_cast<op_kind>(n.op);
  auto type = static_cast<dtype>(n.type);
  std::string failure = mismatch;
  auto code = errc::mismatch;
  // A rank aborted: end every op as its own abort does (fail_all).
  auto mark = failure.empty() ? first_aborter() : aborter{};
  auto by = mark.rank;
  auto cause = mark.code;
  if (by >= 0) take_announcements(); // its reason, for TSan
  // An allreduce's result is the same for everyone: computed once.
  const std::byte* shared = nullptr;
  if (failure.empty() && by < 0 && op == op_kind::allreduce) {
    op_state st{op, nullptr, lazy_deadline::never(), target};
    st.how = path::small;
    if (auto err =
          reduce_range(st, 0, 0, n.count, type,
                       static_cast<reduce_op>(n.reduce), served_.data())) {
      code = errc::backend_error;
      failure = render(err);
    }
    shared = served_.data();
  }
  // This rank's own op last: its owner may start the next one from the
  // completion, on another thread, and reuse this backend's scratch.
  auto end_op = [&](int r) {
    if (seg_.control(r).sync[parity].no_waiter == 0 || !hub_->claim(r, target))
      return;
    if (by >= 0) {
      hub_->fail_aborted(r, -1, by, cause);
      return;
    }
    if (!failure.empty()) {
      hub_->fail(r, code, failure);
      return;
    }
    auto* out =
      reinterpret_cast<std::byte*>(seg_.control(r).notice[parity].out_addr);
    auto err = write_result(r, n, parity, out, shared);
    hub_->finish(r, std::move(err));
  };
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_) end_op(r);
  end_op(rank_);
}

caf::error shm_backend::write_result(int r, const op_notice& n, int parity,
                                     std::byte* out, const std::byte* shared) {
  auto op = static_cast<op_kind>(n.op);
  auto type = static_cast<dtype>(n.type);
  auto es = size_of(type);
  auto slot = [&](int q) { return seg_.small_input(q, parity); };
  auto w = size_t(world_size_);
  op_state st{op, nullptr, lazy_deadline::never(),
              static_cast<uint64_t>(parity)};
  st.how = path::small;
  switch (op) {
    case op_kind::allreduce:
      if (out != shared) std::memcpy(out, shared, n.count * es);
      return {};
    case op_kind::broadcast:
      std::memcpy(out, slot(n.root), n.count * es);
      return {};
    case op_kind::reduce: // the root's output only
      if (r != n.root) return {};
      return reduce_range(st, 0, 0, n.count, type,
                          static_cast<reduce_op>(n.reduce), out);
    case op_kind::reduce_scatter: { // slice r of the reduction
      auto m = n.count / w;
      return reduce_range(st, 0, size_t(r) * m, m, type,
                          static_cast<reduce_op>(n.reduce), out);
    }
    case op_kind::allgather:
    case op_kind::gather: // the root's output only
      if (op == op_kind::gather && r != n.root) return {};
      for (int q = 0; q < world_size_; ++q)
        std::memcpy(out + size_t(q) * n.count * es, slot(q), n.count * es);
      return {};
    case op_kind::scatter: // block r of the root's input
      std::memcpy(out, slot(n.root) + size_t(r) * n.count * es, n.count * es);
      return {};
    case op_kind::alltoall: { // block r of every rank's input
      auto block = n.count / w * es;
      for (int q = 0; q < world_size_; ++q)
        std::memcpy(out + size_t(q) * block, slot(q) + size_t(r) * block,
                    block);
      return {};
    }
    default: return {}; // barrier
  }
}

} // namespace caf_collective::detail::shm
