#include "gloo/gloo_store_adapter.hpp"

#include <gloo/common/error.h>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective::detail {

gloo_store_adapter::gloo_store_adapter(rendezvous_store_ptr store,
                                       std::chrono::milliseconds timeout)
  : store_(std::move(store)), timeout_(timeout) {
  // nop
}

void gloo_store_adapter::set(const std::string& key,
                             const std::vector<char>& data) {
  if (auto err = store_->set(key, data)) throw gloo::IoException(render(err));
}

std::vector<char> gloo_store_adapter::get(const std::string& key) {
  auto value = store_->get(key, timeout_);
  if (!value) throw gloo::IoException(render(value.error()));
  return std::move(*value);
}

void gloo_store_adapter::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void gloo_store_adapter::wait(const std::vector<std::string>& keys,
                              const std::chrono::milliseconds& timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& key : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    auto value = store_->get(key, std::max(left, std::chrono::milliseconds{0}));
    if (!value) throw gloo::IoException(render(value.error()));
  }
}

} // namespace caf_collective::detail
