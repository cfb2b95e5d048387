#include "backends/gloo/gloo_peer_check.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"
#include "runtime/time_left.hpp"

namespace caf_collective::detail {

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string numeric_name(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (::getnameinfo(sa, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return {};
  // "host port": an IPv6 host contains ':' itself.
  return std::string{host} + " " + port;
}

// Whether something listens at `where` ("host port"), within `limit`.
bool answers(const std::string& where, milliseconds limit) {
  auto space = where.rfind(' ');
  if (space == std::string::npos) return false;
  auto host = where.substr(0, space);
  auto port = where.substr(space + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0)
    return false;
  bool ok = accepts_connection(found->ai_addr, found->ai_addrlen, limit);
  ::freeaddrinfo(found);
  return ok;
}

// Reads `key`; a timeout is no error here (nullopt), anything else is.
caf::expected<std::optional<std::string>>
read_key(rendezvous_store& store, const std::string& key, milliseconds wait) {
  auto value = store.get(key, wait);
  if (value)
    return std::optional<std::string>{
      std::string{value->begin(), value->end()}};
  if (code_of(value.error()) == errc::timeout)
    return std::optional<std::string>{};
  return value.error();
}

std::string alive_key(int rank) {
  return "alive/" + std::to_string(rank);
}

std::string checked_key(int rank, int peer) {
  return "checked/" + std::to_string(rank) + "/" + std::to_string(peer);
}

} // namespace

peer_check::peer_check(int rank, int world_size)
  : rank_(rank), world_size_(world_size) {
  // nop
}

bool accepts_connection(const sockaddr* addr, socklen_t len,
                        std::chrono::milliseconds limit) {
  int fd =
    ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = ::connect(fd, addr, len) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(limit.count())) == 1) {
      int err = 0;
      socklen_t err_len = sizeof(err);
      ok =
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 && err == 0;
    }
  }
  ::close(fd);
  return ok;
}

peer_check::~peer_check() {
  if (fd_ >= 0) ::close(fd_);
}

caf::error peer_check::run(rendezvous_store& store, const std::string& host,
                           clock::time_point deadline) {
  // 0. This rank's liveness socket, on the address its Gloo device uses.
  //    Nobody accepts on it: each peer's check stays in the backlog, so the
  //    backlog must hold one per peer (up to max_world_size - 1).
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0)
    return make_error(errc::backend_error, "cannot resolve this rank's host '" +
                                             host + "': " + ::gai_strerror(rc));
  fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool bound = fd_ >= 0 &&
               ::bind(fd_, found->ai_addr, found->ai_addrlen) == 0 &&
               ::listen(fd_, std::max(SOMAXCONN, max_world_size)) == 0;
  ::freeaddrinfo(found);
  if (!bound)
    return make_error(errc::backend_error,
                      "cannot open a liveness socket on '" + host +
                        "': " + std::strerror(errno));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  auto mine = numeric_name(reinterpret_cast<sockaddr*>(&ss), len);
  if (auto err = store.set(alive_key(rank_), {mine.begin(), mine.end()}))
    return err;
  // 1. Every peer published a liveness address that answers. Wait for each
  //    key with what is left of the deadline; once it passed, the rest are
  //    only looked up, so the error names every missing rank.
  std::map<int, std::string> alive;
  std::vector<int> unpublished;
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    auto value = read_key(store, alive_key(peer), time_left(deadline));
    if (!value) return value.error();
    if (*value)
      alive[peer] = std::move(**value);
    else
      unpublished.push_back(peer);
  }
  if (!unpublished.empty())
    return make_error(errc::timeout,
                      "rank(s) " + list_ranks(unpublished) +
                        " never joined by the formation deadline (not "
                        "started, crashed, or forming another group)");
  std::vector<int> silent;
  for (auto& entry : alive)
    silent.push_back(entry.first);
  auto pause = milliseconds{5};
  for (;;) {
    std::vector<int> still_silent;
    for (int peer : silent)
      if (!answers(alive[peer], std::clamp(time_left(deadline), milliseconds{1},
                                           milliseconds{200})))
        still_silent.push_back(peer);
    silent = std::move(still_silent);
    if (silent.empty()) break;
    if (clock::now() >= deadline) {
      std::string where;
      for (int peer : silent) {
        auto shown = alive[peer];
        if (auto pos = shown.rfind(' '); pos != std::string::npos)
          shown[pos] = ':';
        where += (where.empty() ? "rank " : ", rank ") + std::to_string(peer) +
                 " at " + shown;
      }
      return make_error(errc::timeout,
                        "rank(s) " + list_ranks(silent) +
                          " did not answer at their published addresses "
                          "by the formation deadline (" +
                          where +
                          "): they died, or the store holds addresses "
                          "from an earlier run");
    }
    std::this_thread::sleep_for(std::min(pause, time_left(deadline)));
    pause = std::min(pause * 2, milliseconds{100});
    for (int peer : silent) {
      auto fresh = read_key(store, alive_key(peer), milliseconds{0});
      if (!fresh) return fresh.error();
      if (*fresh) alive[peer] = std::move(**fresh);
    }
  }
  // 2. Tell each peer "I reached you at the address you published", and wait
  //    for the same from every peer. Each rank then starts Gloo's connects
  //    only when all its peers are about to, so no pair waits for a rank
  //    that gave up.
  for (auto& [peer, where] : alive)
    if (auto err =
          store.set(checked_key(rank_, peer), {where.begin(), where.end()}))
      return err;
  // A value other than this rank's address is a confirmation left by an
  // earlier formation of a group of this name on this store (destroyed and
  // formed again): read again until the peer's own comes.
  std::vector<int> unconfirmed;
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    auto key = checked_key(peer, rank_);
    auto seen = read_key(store, key, time_left(deadline));
    auto retry = milliseconds{5};
    while (seen && *seen && **seen != mine && clock::now() < deadline) {
      std::this_thread::sleep_for(std::min(retry, time_left(deadline)));
      retry = std::min(retry * 2, milliseconds{100});
      seen = read_key(store, key, milliseconds{0});
    }
    if (!seen) return seen.error();
    if (!*seen || **seen != mine) unconfirmed.push_back(peer);
  }
  if (!unconfirmed.empty())
    return make_error(errc::timeout,
                      "rank(s) " + list_ranks(unconfirmed) +
                        " did not confirm by the formation deadline that "
                        "they reached every peer (one of their peers is "
                        "missing or unreachable from them)");
  return {};
}

} // namespace caf_collective::detail
