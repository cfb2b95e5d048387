// A non-owning reference to a callable: what std::function is to a
// parameter that is only called during the call, without std::function's
// heap allocation for a lambda capturing more than two pointers. The
// callable must outlive the function_ref (pass temporaries as arguments
// only).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace caf_collective::detail {

template<class Signature>
class function_ref;

template<class R, class... Args>
class function_ref<R(Args...)> {
 public:
  template<class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> &&
           std::is_invocable_r_v<R, F&, Args...>)
    function_ref(F&& fn) noexcept // NOLINT: converts like std::function
    : object_(const_cast<void*>(static_cast<const void*>(std::addressof(fn)))),
      call_([](void* object, Args... xs) -> R {
        return (*static_cast<std::remove_reference_t<F>*>(object))(
          std::forward<Args>(xs)...);
      }) {}

  R operator()(Args... xs) const {
    return call_(object_, std::forward<Args>(xs)...);
  }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

} // namespace caf_collective::detail
