// The TCP rendezvous store's server: an accept thread and one thread per
// client connection (a group has at most max_world_size members; each
// client keeps one pooled connection per request it has in flight, see
// tcp_store_client.cpp). Keys live in memory, apart per run id.
#include "caf_collective/rendezvous.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <list>
#include <map>
#include <mutex>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <system_error>
#include <thread>
#include <unistd.h>

#include "caf_collective/error.hpp"
#include "runtime/tcp_store_wire.hpp"
#include "vocabulary/log.hpp"

namespace caf_collective {

namespace wire = detail::tcp_store_wire;

namespace {

// A client must finish its handshake within this time, so a connection
// that never speaks cannot hold a thread for long.
constexpr auto handshake_limit = std::chrono::seconds{10};

// Clients that have not proven the secret yet, each on a thread of its own
// for up to handshake_limit: beyond this many, a new connection is closed
// at once (its client retries). Without a bound, anyone who reaches the
// port started a thread per connection (3000 idle connections: 3000
// threads, against the user's process limit that the ranks share).
constexpr int max_handshakes = 256;

// Whether the n-th refusal (from 1) is logged: the first ten, then every
// power of two, so a flood does not flood the log too.
bool worth_logging(size_t n) {
  return n <= 10 || (n & (n - 1)) == 0;
}

// Longest wait a get may ask for; keeps deadlines far from overflow.
constexpr auto longest_wait = std::chrono::hours{24};

spdlog::logger& log() {
  return detail::logger_for("store");
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return "an unknown peer";
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host),
                    port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown peer";
  return wire::endpoint(host, static_cast<uint16_t>(std::atoi(port)));
}

} // namespace

struct tcp_store_server::impl {
  std::string host;
  uint16_t port = 0;
  std::string secret;
  int listen_fd = -1;
  // Written once at shutdown; every thread polls the read end, so one
  // write wakes them all.
  int wake[2] = {-1, -1};
  std::atomic<bool> stopping{false};
  bool warned_out_of_fds = false; // accept_loop only
  std::atomic<size_t> refused{0};
  std::atomic<int> handshaking{0}; // connections not admitted yet

  // Keys per (run id, key): a separator inside one string could be forged
  // by a run id containing it.
  std::mutex entries_mtx;
  std::condition_variable entries_cv;
  std::map<std::pair<std::string, std::string>, std::vector<char>> entries;

  struct connection {
    int fd = -1;
    std::thread worker;
    std::atomic<bool> done{false};
  };
  std::mutex conns_mtx;
  std::list<connection> conns;
  std::thread acceptor;

  ~impl() {
    stopping = true;
    if (wake[1] >= 0) {
      char byte = 1;
      [[maybe_unused]] auto n = ::write(wake[1], &byte, 1);
    }
    { std::lock_guard<std::mutex> guard{entries_mtx}; }
    entries_cv.notify_all();
    if (acceptor.joinable()) acceptor.join();
    for (auto& c : conns) {
      if (c.worker.joinable()) c.worker.join();
      ::close(c.fd);
    }
    for (int fd : {listen_fd, wake[0], wake[1]})
      if (fd >= 0) ::close(fd);
  }

  caf::error bind_and_listen() {
    if (::pipe2(wake, O_CLOEXEC) != 0)
      return make_error(errc::backend_error,
                        std::string{"TCP store: pipe failed: "} +
                          std::strerror(errno));
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    auto service = std::to_string(port);
    if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
        rc != 0)
      return make_error(errc::invalid_argument,
                        "TCP store: cannot resolve address '" + host +
                          "': " + ::gai_strerror(rc));
    std::string why = "no usable address";
    for (auto* ai = found; ai != nullptr; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                        ai->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
          ::listen(fd, 1024) == 0) {
        listen_fd = fd;
        break;
      }
      why = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(found);
    if (listen_fd < 0)
      return make_error(errc::backend_error, "TCP store: cannot listen on " +
                                               wire::endpoint(host, port) +
                                               ": " + why);
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
    port = ntohs(ss.ss_family == AF_INET6
                   ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return {};
  }

  void accept_loop() {
    for (;;) {
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
      if (stopping || (fds[1].revents & POLLIN) != 0) return;
      if ((fds[0].revents & POLLIN) == 0) continue;
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (out_of_resources(errno)) back_off();
        continue;
      }
      if (handshaking.load() >= max_handshakes) {
        ::close(fd);
        if (worth_logging(++refused))
          log().warn("TCP store at {}: turned a client away: {} connections "
                     "are still in their handshake ({} refused so far)",
                     wire::endpoint(host, port), max_handshakes,
                     refused.load());
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ++handshaking;
      std::lock_guard<std::mutex> guard{conns_mtx};
      reap_finished();
      auto& c = conns.emplace_back();
      c.fd = fd;
      try {
        c.worker = std::thread{[this, &c] {
          serve(c.fd);
          c.done = true;
        }};
      } catch (const std::system_error& ex) {
        // No thread to spare (a process or container limit): turn this
        // client away, and keep serving the others.
        log().warn("TCP store at {}: turned a client away: cannot start a "
                   "thread for it ({})",
                   wire::endpoint(host, port), ex.what());
        ::close(fd);
        conns.pop_back();
        --handshaking;
      }
    }
  }

  static bool out_of_resources(int err) {
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
  }

  // accept failed for want of descriptors or memory: the client stays
  // queued and poll would report it again at once. Say so once, then look
  // again a little later (or when stopped) instead of spinning.
  void back_off() {
    if (!warned_out_of_fds) {
      warned_out_of_fds = true;
      log().warn("TCP store at {}: cannot accept clients ({}); raise the "
                 "process's descriptor limit (ulimit -n)",
                 wire::endpoint(host, port), std::strerror(errno));
    }
    pollfd stop{wake[0], POLLIN, 0};
    ::poll(&stop, 1, 50);
  }

  // Joins the threads of closed connections; called with conns_mtx held.
  void reap_finished() {
    for (auto i = conns.begin(); i != conns.end();) {
      if (!i->done) {
        ++i;
        continue;
      }
      i->worker.join();
      ::close(i->fd);
      i = conns.erase(i);
    }
  }

  // Checks the handshake; returns the client's run id, or an empty string
  // after refusing it.
  std::string admit(int fd, const std::string& who) {
    auto deadline = wire::clock::now() + handshake_limit;
    std::string reason;
    std::string given_secret;
    std::string run_id;
    char hello[wire::magic.size()];
    if (wire::recv_all(fd, hello, sizeof(hello), deadline, wake[0]) !=
          wire::io_result::done ||
        std::string_view{hello, sizeof(hello)} != wire::magic)
      reason = "malformed handshake (not a caf_collective store client)";
    else if (wire::recv_sized(fd, given_secret, wire::max_secret_size, deadline,
                              wake[0]) != wire::io_result::done ||
             wire::recv_sized(fd, run_id, wire::max_run_id_size, deadline,
                              wake[0]) != wire::io_result::done)
      reason = "malformed or incomplete handshake";
    else if (given_secret.empty())
      reason = "no secret";
    else if (!wire::same_secret(given_secret, secret))
      reason = "wrong secret";
    else if (run_id.empty())
      reason = "no run id";
    std::vector<char> reply;
    wire::put_u8(reply, reason.empty() ? 0 : 1);
    wire::put_bytes(reply, reason);
    wire::send_all(fd, reply.data(), reply.size(),
                   wire::clock::now() + handshake_limit, wake[0]);
    if (!reason.empty()) {
      if (stopping) return {};
      if (auto n = ++refused; worth_logging(n))
        log().warn("TCP store at {}: refused a client from {}: {} ({} "
                   "refused so far)",
                   wire::endpoint(host, port), who, reason, n);
      return {};
    }
    log().debug("TCP store at {}: a client from {} joined run '{}'",
                wire::endpoint(host, port), who, run_id);
    return run_id;
  }

  void serve(int fd) {
    auto who = peer_name(fd);
    auto run_id = admit(fd, who);
    --handshaking;
    if (run_id.empty()) return;
    for (;;) {
      // Between requests a client may stay idle for as long as it likes.
      auto idle = wire::clock::now() + longest_wait;
      uint8_t code = 0;
      if (wire::recv_all(fd, &code, 1, idle, wake[0]) != wire::io_result::done)
        return;
      auto deadline = wire::clock::now() + handshake_limit;
      std::string key;
      if (wire::recv_sized(fd, key, wire::max_key_size, deadline, wake[0]) !=
          wire::io_result::done) {
        log().warn("TCP store at {}: dropped {} (run '{}'): malformed request",
                   wire::endpoint(host, port), who, run_id);
        return;
      }
      std::vector<char> reply;
      if (code == static_cast<uint8_t>(wire::op::set)) {
        std::string value;
        if (wire::recv_sized(fd, value, wire::max_value_size, deadline,
                             wake[0]) != wire::io_result::done)
          return;
        {
          std::lock_guard<std::mutex> guard{entries_mtx};
          entries[{run_id, key}] =
            std::vector<char>{value.begin(), value.end()};
        }
        entries_cv.notify_all();
        wire::put_u8(reply, 0);
        wire::put_bytes(reply, {});
      } else if (code == static_cast<uint8_t>(wire::op::get)) {
        char raw[8];
        if (wire::recv_all(fd, raw, sizeof(raw), deadline, wake[0]) !=
            wire::io_result::done)
          return;
        // Clamped as unsigned: 2^63 ms or more read as a signed count
        // would be negative and end the wait at once.
        auto wait =
          std::chrono::milliseconds{static_cast<int64_t>(std::min<uint64_t>(
            wire::decode_u64(raw),
            static_cast<uint64_t>(
              std::chrono::milliseconds{longest_wait}.count())))};
        std::unique_lock<std::mutex> guard{entries_mtx};
        std::pair<std::string, std::string> id{run_id, key};
        auto present = [&] { return stopping || entries.count(id) > 0; };
        entries_cv.wait_for(guard, wait, present);
        if (stopping) return;
        auto i = entries.find(id);
        if (i == entries.end()) {
          wire::put_u8(reply, 1);
          wire::put_bytes(reply, {});
        } else {
          wire::put_u8(reply, 0);
          wire::put_bytes(reply, {i->second.data(), i->second.size()});
        }
      } else {
        log().warn("TCP store at {}: dropped {} (run '{}'): unknown request {}",
                   wire::endpoint(host, port), who, run_id, int{code});
        return;
      }
      if (wire::send_all(fd, reply.data(), reply.size(),
                         wire::clock::now() + handshake_limit,
                         wake[0]) != wire::io_result::done)
        return;
    }
  }
};

tcp_store_server::tcp_store_server(std::unique_ptr<impl> ptr)
  : impl_(std::move(ptr)) {
  // nop
}

tcp_store_server::~tcp_store_server() {
  // nop: impl's destructor stops and joins every thread
}

caf::expected<std::unique_ptr<tcp_store_server>>
tcp_store_server::start(std::string host, uint16_t port, std::string secret) {
  if (secret.empty())
    return make_error(errc::invalid_argument,
                      "TCP store: refusing to serve without a secret "
                      "(anyone who reaches the address could join the run)");
  if (host.empty()) host = "127.0.0.1";
  auto state = std::make_unique<impl>();
  state->host = std::move(host);
  state->port = port;
  state->secret = std::move(secret);
  if (auto err = state->bind_and_listen()) return err;
  auto* raw = state.get();
  state->acceptor = std::thread{[raw] { raw->accept_loop(); }};
  log().debug("TCP store serving at {}",
              wire::endpoint(state->host, state->port));
  return std::unique_ptr<tcp_store_server>{
    new tcp_store_server(std::move(state))};
}

const std::string& tcp_store_server::host() const noexcept {
  return impl_->host;
}

uint16_t tcp_store_server::port() const noexcept {
  return impl_->port;
}

size_t tcp_store_server::refused_clients() const noexcept {
  return impl_->refused.load();
}

} // namespace caf_collective
