#include "backends/gloo/gloo_store_adapter.hpp"

#include <algorithm>

#include <gloo/common/error.h>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective::detail {

gloo_store_adapter::gloo_store_adapter(rendezvous_store_ptr store,
                                       std::chrono::milliseconds timeout)
  : store_(std::move(store)),
    deadline_(std::chrono::steady_clock::now() + timeout) {
  // nop
}

std::chrono::milliseconds
gloo_store_adapter::time_left(std::chrono::milliseconds limit) const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
    deadline_ - std::chrono::steady_clock::now());
  return std::clamp(left, std::chrono::milliseconds{0}, limit);
}

void gloo_store_adapter::set(const std::string& key,
                             const std::vector<char>& data) {
  if (auto err = store_->set(key, data)) throw gloo::IoException(render(err));
}

std::vector<char> gloo_store_adapter::get(const std::string& key) {
  auto value = store_->get(key, time_left(std::chrono::milliseconds::max()));
  if (!value) throw gloo::IoException(render(value.error()));
  return std::move(*value);
}

void gloo_store_adapter::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds::max());
}

void gloo_store_adapter::wait(const std::vector<std::string>& keys,
                              const std::chrono::milliseconds& timeout) {
  auto limit = time_left(timeout);
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (const auto& key : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    auto value = store_->get(key, std::max(left, std::chrono::milliseconds{0}));
    if (!value) throw gloo::IoException(render(value.error()));
  }
}

} // namespace caf_collective::detail
