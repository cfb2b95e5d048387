#include "runtime/cancelable_store.hpp"

#include <algorithm>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "runtime/time_left.hpp"

namespace caf_collective::detail {

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class cancelable_store : public rendezvous_store {
 public:
  cancelable_store(rendezvous_store_ptr base, const std::atomic<bool>* cancel,
                   std::string why, milliseconds set_budget)
    : base_(std::move(base)), cancel_(cancel), why_(std::move(why)),
      set_budget_(set_budget) {
    // nop
  }

  caf::error set(const std::string& key,
                 const std::vector<char>& value) override {
    // Per set, not from the view's creation: backends keep the store and
    // set keys long after formation (NCCL's communicators per pair).
    return set_within(key, value, set_budget_);
  }

  // A set waits only where the store cannot be reached yet (a TCP store's
  // server not up): it retries in slices, like a get.
  caf::error set_within(const std::string& key, const std::vector<char>& value,
                        milliseconds timeout) override {
    return in_slices(
      key, timeout, "could not set rendezvous key '" + key + "'",
      [&](milliseconds slice) { return base_->set_within(key, value, slice); });
  }

  caf::expected<std::vector<char>> get(const std::string& key,
                                       milliseconds timeout) override {
    return in_slices(
      key, timeout, "rendezvous key '" + key + "' did not appear",
      [&](milliseconds slice) { return base_->get(key, slice); });
  }

 private:
  static caf::error error_of(const caf::error& err) { return err; }

  static caf::error error_of(const caf::expected<std::vector<char>>& value) {
    return value ? caf::error{} : value.error();
  }

  // Calls `attempt(slice)`, one get or set on the store below of at most
  // cancel_poll, until it succeeds, fails otherwise than by timeout, the
  // group is aborted, or `budget` is spent. `what` names the wait in the
  // final timeout, which carries the store's last answer (or is that answer,
  // when one attempt took the whole budget).
  template<class Attempt>
  auto in_slices(const std::string& key, milliseconds budget,
                 const std::string& what, Attempt attempt)
    -> decltype(attempt(budget)) {
    budget = bounded_wait(budget);
    auto deadline = clock::now() + budget;
    for (bool first = true;; first = false) {
      if (cancelled()) return stopped(key);
      auto result = attempt(std::min(time_left(deadline), cancel_poll));
      auto err = error_of(result);
      if (!err || code_of(err) != errc::timeout) return result;
      if (time_left(deadline) > milliseconds{0})
        continue; // time left: look again
      if (cancelled()) return stopped(key);
      if (first) return result;
      return make_error(errc::timeout,
                        what + " within " + std::to_string(budget.count()) +
                          " ms (the store's last answer: " + detail_of(err) +
                          ")");
    }
  }

  bool cancelled() const noexcept {
    return cancel_ != nullptr && cancel_->load(std::memory_order_acquire);
  }

  caf::error stopped(const std::string& key) const {
    return make_error(errc::aborted, "stopped waiting for rendezvous key '" +
                                       key + "': " + why_);
  }

  rendezvous_store_ptr base_;
  const std::atomic<bool>* cancel_;
  std::string why_;
  milliseconds set_budget_;
};

} // namespace

rendezvous_store_ptr make_cancelable_store(rendezvous_store_ptr base,
                                           const std::atomic<bool>* cancel,
                                           std::string why,
                                           milliseconds set_budget) {
  return std::make_shared<cancelable_store>(std::move(base), cancel,
                                            std::move(why), set_budget);
}

} // namespace caf_collective::detail
