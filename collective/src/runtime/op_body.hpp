// What group::submit runs for one op: its arguments, the call into the
// backend's blocking form and, for ops a backend may start without
// blocking, the call into its start_* form.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include <caf/error.hpp>

#include "caf_collective/backend.hpp"
#include "caf_collective/tensor.hpp"

namespace caf_collective::detail {

/// One argument of an op (a view or an options struct). While the op runs
/// inside the call that submitted it, the argument is the caller's own
/// object, borrowed; `keep` copies it once the op must outlive that call
/// (queued on the lane). A tensor_view's shape is a vector, so a copy is an
/// allocation: the blocking form of a small op used to make four of them.
template<class T>
class op_arg {
 public:
  explicit op_arg(const T& x) noexcept : ptr_(&x) {}

  op_arg(const op_arg& other)
    : copy_(other.copy_ ? std::make_unique<T>(*other.copy_) : nullptr),
      ptr_(copy_ ? copy_.get() : other.ptr_) {}

  op_arg(op_arg&& other) noexcept
    : copy_(std::move(other.copy_)), ptr_(copy_ ? copy_.get() : other.ptr_) {}

  op_arg& operator=(const op_arg&) = delete;
  op_arg& operator=(op_arg&&) = delete;

  /// Makes this argument independent of the caller's object. (A pointer,
  /// not a std::optional: GCC 12 with -O2 and sanitizers warns of
  /// uninitialized optional payloads in the copies.)
  void keep() {
    if (copy_) return;
    copy_ = std::make_unique<T>(*ptr_);
    ptr_ = copy_.get();
  }

  const T& get() const noexcept { return *ptr_; }

 private:
  std::unique_ptr<T> copy_;
  const T* ptr_;
};

/// The arguments of an op, borrowed from the caller.
template<class... Ts>
std::tuple<op_arg<Ts>...> borrow(const Ts&... xs) {
  return std::tuple<op_arg<Ts>...>{op_arg<Ts>{xs}...};
}

/// Stands for "this op has no start_* form".
struct no_start {};

/// Besides the call itself: the device and dtype for the capability query,
/// the size for the op history and the per-op timeout. `Run` is called as
/// run(backend, call, args...), `Start` as start(backend, call, args...,
/// done).
template<class Args, class Run, class Start = no_start>
struct op_body {
  static constexpr bool startable = !std::is_same_v<Start, no_start>;
  device dev;
  dtype type;
  size_t bytes;
  std::chrono::milliseconds timeout;
  Args args;
  Run run;
  Start starter;

  /// Copies every borrowed argument: call before the op leaves the
  /// submitting call (queued on a lane).
  void keep() {
    std::apply([](auto&... xs) { (xs.keep(), ...); }, args);
  }

  caf::error operator()(backend& be, const op_call& call) {
    return std::apply([&](auto&... xs) { return run(be, call, xs.get()...); },
                      args);
  }

  /// Starts the op without blocking (backend::start_*); false when the
  /// backend declines. The backend copies what it needs from the
  /// arguments before it returns.
  bool start(backend& be, const op_call& call, op_completion& done) {
    if constexpr (startable)
      return std::apply(
        [&](auto&... xs) { return starter(be, call, xs.get()..., done); },
        args);
    else
      return false;
  }
};

template<class Args, class Run, class Start = no_start>
op_body<Args, Run, Start> make_body(const tensor_view& sample,
                                    std::chrono::milliseconds timeout,
                                    Args args, Run run, Start start = {}) {
  return {sample.dev(),    sample.type(),  sample.nbytes(), timeout,
          std::move(args), std::move(run), std::move(start)};
}

} // namespace caf_collective::detail
