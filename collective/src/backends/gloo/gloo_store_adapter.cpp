#include "backends/gloo/gloo_store_adapter.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

#include <gloo/common/error.h>

#include <caf/expected.hpp>

#include "backends/gloo/gloo_peer_check.hpp"
#include "caf_collective/error.hpp"

namespace caf_collective::detail {

gloo_store_adapter::gloo_store_adapter(rendezvous_store_ptr store, int rank,
                                       int world_size, std::string host,
                                       std::chrono::milliseconds timeout)
  : store_(std::move(store)), rank_(rank), world_size_(world_size),
    host_(std::move(host)),
    deadline_(std::chrono::steady_clock::now() + timeout),
    check_(rank, world_size) {
  // nop
}

std::chrono::milliseconds
gloo_store_adapter::time_left(std::chrono::milliseconds limit) const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
    deadline_ - std::chrono::steady_clock::now());
  return std::clamp(left, std::chrono::milliseconds{0}, limit);
}

int gloo_store_adapter::peer_of(const std::string& key) const {
  if (key.empty() || key.size() > 9 ||
      !std::all_of(key.begin(), key.end(),
                   [](unsigned char c) { return std::isdigit(c); }))
    return -1;
  auto peer = std::stoi(key);
  return peer != rank_ && peer < world_size_ ? peer : -1;
}

bool gloo_store_adapter::names_peer_host(const std::string& key) const {
  // Gloo's full mesh reads the hostname key "rank_<r>" of each lower rank
  // before any address: a rank that never published it (it failed on its
  // own) would hold this one there until the deadline, before the peer
  // check that lets rank 0 tell the ranks that came from those that did
  // not.
  constexpr std::string_view prefix = "rank_";
  return key.starts_with(prefix) && peer_of(key.substr(prefix.size())) >= 0;
}

void gloo_store_adapter::fail(caf::error err) {
  failure_ = std::move(err);
  throw gloo::IoException(render(failure_));
}

void gloo_store_adapter::meet_peers() {
  if (met_) return;
  met_ = true;
  if (auto err = check_.run(*store_, host_, deadline_)) fail(std::move(err));
}

std::vector<char> gloo_store_adapter::own_addresses() const {
  std::lock_guard<std::mutex> guard{own_mtx_};
  return own_;
}

void gloo_store_adapter::set(const std::string& key,
                             const std::vector<char>& data) {
  if (key == std::to_string(rank_)) {
    std::lock_guard<std::mutex> guard{own_mtx_};
    own_ = data;
  }
  if (auto err = store_->set(key, data)) fail(std::move(err));
}

std::vector<char> gloo_store_adapter::get(const std::string& key) {
  if (peer_of(key) >= 0 || names_peer_host(key)) meet_peers();
  auto value = store_->get(key, time_left(std::chrono::milliseconds::max()));
  if (!value) fail(value.error());
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
    if (peer_of(key) >= 0) {
      meet_peers();
      continue;
    }
    if (names_peer_host(key)) meet_peers(); // then wait for the key itself
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    auto value = store_->get(key, std::max(left, std::chrono::milliseconds{0}));
    if (!value) fail(value.error());
  }
}

} // namespace caf_collective::detail
