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
    return set_until(key, value, clock::now() + set_budget_, set_budget_);
  }

  caf::error set_within(const std::string& key, const std::vector<char>& value,
                        milliseconds timeout) override {
    return set_until(key, value, clock::now() + timeout, timeout);
  }

  caf::expected<std::vector<char>> get(const std::string& key,
                                       milliseconds timeout) override {
    auto deadline = clock::now() + timeout;
    for (bool first = true;; first = false) {
      if (cancelled()) return stopped(key);
      auto slice = std::min(time_left(deadline), cancel_poll);
      auto value = base_->get(key, slice);
      if (value || code_of(value.error()) != errc::timeout) return value;
      if (time_left(deadline) > milliseconds{0})
        continue; // time left: look again
      if (cancelled()) return stopped(key);
      if (first) return value; // one slice: the store's own words
      return make_error(
        errc::timeout,
        "rendezvous key '" + key + "' did not appear within " +
          std::to_string(timeout.count()) +
          " ms (the store's last answer: " + detail_of(value.error()) + ")");
    }
  }

 private:
  // A set waits only where the store cannot be reached yet (a TCP store's
  // server not up): it retries in slices, like a get. `budget`: the whole
  // time it may take, as its error names it.
  caf::error set_until(const std::string& key, const std::vector<char>& value,
                       clock::time_point deadline, milliseconds budget) {
    for (bool first = true;; first = false) {
      if (cancelled()) return stopped(key);
      auto slice = std::min(time_left(deadline), cancel_poll);
      auto err = base_->set_within(key, value, slice);
      if (!err || code_of(err) != errc::timeout) return err;
      if (time_left(deadline) > milliseconds{0})
        continue; // time left: look again
      if (cancelled()) return stopped(key);
      if (first) return err; // one slice: the store's own words
      return make_error(errc::timeout,
                        "could not set rendezvous key '" + key + "' within " +
                          std::to_string(budget.count()) +
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
