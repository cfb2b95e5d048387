// An op's deadline, read from the clock only once the op has to wait.
// Many small ops never wait for a peer (it arrived first), and a clock read
// costs ~20 ns here, against 0.11-0.15 us for a whole one-rank shm op
// (docs/benchmarks.md, "Fewer clock reads and locks per op").
#pragma once

#include <chrono>

namespace caf_collective::detail {

class lazy_deadline {
 public:
  using clock = std::chrono::steady_clock;

  /// Ends `timeout` after the first call of `given`: the op's first wait,
  /// which comes at most its first step's own work after its start. So the
  /// op never gives up before its timeout, and at most that much later.
  explicit lazy_deadline(clock::duration timeout) noexcept : timeout_(timeout) {
    // nop
  }

  /// A deadline fixed already (formation: one deadline for all its steps).
  static lazy_deadline fixed(clock::time_point at) noexcept {
    lazy_deadline result{clock::duration::zero()};
    result.at_ = at;
    result.set_ = true;
    return result;
  }

  /// No deadline (ops finished for others, which never wait).
  static lazy_deadline never() noexcept {
    return fixed(clock::time_point::max());
  }

  /// The deadline, fixed at `now + timeout` by the first call.
  clock::time_point given(clock::time_point now) noexcept {
    if (!set_) {
      at_ = now + timeout_;
      set_ = true;
    }
    return at_;
  }

 private:
  clock::duration timeout_;
  clock::time_point at_{};
  bool set_ = false;
};

} // namespace caf_collective::detail
