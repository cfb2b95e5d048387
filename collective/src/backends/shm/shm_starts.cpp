// shm backend: ops started without blocking (shm_arrivals.hpp), the
// arrival of a rank that does not wait and the finisher that ends them.
#include <cstring>

#include <sched.h>

#include "backends/shm/shm_backend.hpp"

namespace caf_collective::detail::shm {

bool shm_backend::can_start(size_t bytes) const noexcept {
  // A peer's abort is reported by the blocking path, which names it.
  return hub_ && bytes <= seg_.small_bytes() &&
         !aborted_.load(std::memory_order_acquire) &&
         seg_.header().aborted_by.load(std::memory_order_acquire) == -1;
}

bool shm_backend::arrive(const op_call& call, op_notice notice,
                         std::span<const std::byte> payload,
                         op_completion& done) {
  auto target = epoch_ + 1;
  auto parity = static_cast<int>(target % 2);
  auto& mine = seg_.control(rank_);
  notice.no_waiter = 1;
  mine.notice[parity] = notice;
  if (!payload.empty())
    std::memcpy(seg_.small_slot(rank_, parity), payload.data(), payload.size());
  auto& record = hub_->at(rank_);
  record.done = std::move(done);
  record.op = static_cast<op_kind>(notice.op);
  record.seq = call.seq;
  record.timeout = call.timeout;
  hub_->publish(rank_, target, clock::now() + call.timeout);
  epoch_ = target;
  hub_->arrived(rank_).store(target, std::memory_order_release);
  mine.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  // Sequentially consistent: of two ranks arriving at once, at least one
  // sees the other's epoch, so somebody always finishes the step.
  mine.epoch.store(target, std::memory_order_seq_cst);
  ring(); // ranks that wait for this step
  for (int r = 0; r < world_size_; ++r)
    if (seg_.control(r).epoch.load(std::memory_order_seq_cst) < target)
      return true; // a later arrival finishes it
  serve_arrivals(target, disagreement(parity));
  return true;
}

void shm_backend::serve_arrivals(uint64_t target, const std::string& mismatch) {
  auto parity = static_cast<int>(target % 2);
  int sample = -1;
  for (int r = 0; r < world_size_ && sample < 0; ++r)
    if (seg_.control(r).notice[parity].no_waiter != 0) sample = r;
  if (sample < 0 || !hub_->win(target)) return;
  // The ranks agree (else `mismatch` says why): any notice stands for all.
  const auto& n = seg_.control(sample).notice[parity];
  auto op = static_cast<op_kind>(n.op);
  auto type = static_cast<dtype>(n.type);
  std::string failure = mismatch;
  auto code = errc::mismatch;
  auto by = seg_.header().aborted_by.load(std::memory_order_acquire);
  if (failure.empty() && by >= 0) {
    code = errc::peer_lost;
    failure = "rank " + std::to_string(by) + " left the group";
  }
  // The result, computed once from the small slots.
  const std::byte* result = nullptr;
  size_t bytes = 0;
  if (failure.empty() && op == op_kind::allreduce) {
    op_state st{op, nullptr, clock::time_point::max(), target};
    st.how = path::small;
    bytes = n.count * size_of(type);
    if (auto err =
          reduce_range(st, 0, 0, n.count, type,
                       static_cast<reduce_op>(n.reduce), served_.data())) {
      code = errc::backend_error;
      failure = render(err);
    }
    result = served_.data();
  } else if (failure.empty() && op == op_kind::broadcast) {
    bytes = n.count * size_of(type);
    result = seg_.small_slot(n.root, parity);
  }
  // This rank's own op last: its owner may start the next one from the
  // completion, on another thread, and reuse this backend's scratch.
  auto end_op = [&](int r) {
    if (seg_.control(r).notice[parity].no_waiter == 0 ||
        !hub_->claim(r, target))
      return;
    if (!failure.empty()) {
      hub_->fail(r, code, failure);
      return;
    }
    auto* out =
      reinterpret_cast<std::byte*>(seg_.control(r).notice[parity].out_addr);
    if (bytes > 0 && out != result) std::memcpy(out, result, bytes);
    hub_->finish(r, {});
  };
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_) end_op(r);
  end_op(rank_);
}

} // namespace caf_collective::detail::shm
