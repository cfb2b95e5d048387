#include "backends/gloo/gloo_formation_watchdog.hpp"

#include "backends/gloo/gloo_peer_check.hpp"

#include <cerrno>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/transport/tcp/address.h>

namespace caf_collective::detail {

formation_watchdog::formation_watchdog(
  int rank, int world_size, std::chrono::steady_clock::time_point deadline,
  std::function<std::vector<char>()> own_addresses)
  : rank_(rank), world_size_(world_size),
    own_addresses_(std::move(own_addresses)) {
  // The alarm's stop() returns only once fire() is over, so the formation
  // sees either no poke or all of them.
  if (world_size_ >= 2) alarm_.emplace(deadline, [this] { fire(); });
}

formation_watchdog::~formation_watchdog() {
  stop();
}

void formation_watchdog::stop() {
  if (alarm_) alarm_->stop();
}

std::vector<int> formation_watchdog::late_peers() {
  stop();
  return late_;
}

void formation_watchdog::fire() {
  // Our value under Gloo's key "<rank>": one tcp::Address per peer, the
  // listening socket of our pair with that peer. A pair that connected (or
  // connects out itself) has closed its listener, so only waiting pairs
  // accept the poke.
  static const size_t size = gloo::transport::tcp::Address{}.bytes().size();
  auto value = own_addresses_();
  if (value.size() != size * static_cast<size_t>(world_size_ - 1)) return;
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    auto index = static_cast<size_t>(peer < rank_ ? peer : peer - 1);
    std::vector<char> chunk{value.begin() + index * size,
                            value.begin() + (index + 1) * size};
    gloo::transport::tcp::Address addr{chunk};
    const auto& ss = addr.getSockaddr();
    auto len = static_cast<socklen_t>(
      ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    if (accepts_connection(reinterpret_cast<const sockaddr*>(&ss), len,
                           std::chrono::milliseconds{200}))
      late_.push_back(peer);
  }
}

deadline_alarm::deadline_alarm(std::chrono::steady_clock::time_point deadline,
                               std::function<void()> ring)
  : thread_{[this, deadline, ring = std::move(ring)] {
      std::unique_lock<std::mutex> guard{mtx_};
      if (cv_.wait_until(guard, deadline, [this] { return stopped_; })) return;
      // Under the lock: stop() returns only once the ring is over.
      ring();
    }} {
  // nop
}

deadline_alarm::~deadline_alarm() {
  stop();
}

void deadline_alarm::stop() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopped_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

} // namespace caf_collective::detail
