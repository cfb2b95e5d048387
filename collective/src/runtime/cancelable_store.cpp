#include "runtime/cancelable_store.hpp"

#include <algorithm>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective::detail {

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class cancelable_store : public rendezvous_store {
 public:
  cancelable_store(rendezvous_store_ptr base, const std::atomic<bool>* cancel,
                   std::string why)
    : base_(std::move(base)), cancel_(cancel), why_(std::move(why)) {
    // nop
  }

  caf::error set(const std::string& key,
                 const std::vector<char>& value) override {
    if (cancelled()) return stopped(key);
    return base_->set(key, value);
  }

  caf::expected<std::vector<char>> get(const std::string& key,
                                       milliseconds timeout) override {
    auto deadline = clock::now() + timeout;
    for (;;) {
      if (cancelled()) return stopped(key);
      auto left = std::max(
        milliseconds{0},
        std::chrono::duration_cast<milliseconds>(deadline - clock::now()));
      auto slice = std::min(left, cancel_poll);
      auto value = base_->get(key, slice);
      if (value || code_of(value.error()) != errc::timeout) return value;
      if (slice == left) {
        if (cancelled()) return stopped(key);
        if (slice == timeout) return value; // one slice: its own words
        return make_error(
          errc::timeout,
          "rendezvous key '" + key + "' did not appear within " +
            std::to_string(timeout.count()) +
            " ms (the store's last answer: " + detail_of(value.error()) + ")");
      }
    }
  }

 private:
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
};

} // namespace

rendezvous_store_ptr make_cancelable_store(rendezvous_store_ptr base,
                                           const std::atomic<bool>* cancel,
                                           std::string why) {
  return std::make_shared<cancelable_store>(std::move(base), cancel,
                                            std::move(why));
}

} // namespace caf_collective::detail
