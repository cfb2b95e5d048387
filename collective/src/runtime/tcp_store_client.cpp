// The TCP rendezvous store's client. A request takes an idle connection or
// opens one (retrying until the request's deadline: the server may start
// after its clients) and hands it back when done, so threads sharing one
// store object never wait for each other's blocking gets.
#include "caf_collective/rendezvous.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "runtime/tcp_store_wire.hpp"
#include "runtime/time_left.hpp"

namespace caf_collective {

namespace wire = detail::tcp_store_wire;

namespace {

using std::chrono::milliseconds;

// How long after its own timeout a get waits for the server's answer
// before it declares the connection dead.
constexpr auto reply_grace = std::chrono::seconds{5};

// A handshake gets at least this long, even when a request's deadline is
// nearly spent, so a reachable server is not refused for lack of time.
constexpr auto handshake_floor = std::chrono::seconds{2};

class tcp_store_client : public rendezvous_store {
 public:
  explicit tcp_store_client(tcp_store_options opts) : opts_(std::move(opts)) {
    // nop
  }

  ~tcp_store_client() override {
    for (int fd : idle_)
      ::close(fd);
  }

  caf::error set(const std::string& key,
                 const std::vector<char>& value) override {
    return set_within(key, value, opts_.connect_timeout);
  }

  caf::error set_within(const std::string& key, const std::vector<char>& value,
                        milliseconds timeout) override {
    if (value.size() > wire::max_value_size || key.size() > wire::max_key_size)
      return make_error(errc::invalid_argument,
                        "TCP store: key '" + key + "' or its value (" +
                          std::to_string(value.size()) +
                          " bytes) exceeds the store's limits");
    auto limit = std::clamp(timeout, milliseconds{0}, opts_.connect_timeout);
    auto deadline = wire::clock::now() + limit;
    auto fd = lease(deadline, limit);
    if (!fd) return fd.error();
    std::vector<char> frame;
    wire::put_u8(frame, static_cast<uint8_t>(wire::op::set));
    wire::put_bytes(frame, key);
    wire::put_bytes(frame, {value.data(), value.size()});
    auto answer = exchange(
      *fd, frame, std::max(deadline, wire::clock::now()) + reply_grace);
    if (!answer) return answer.error();
    return {};
  }

  caf::expected<std::vector<char>> get(const std::string& key,
                                       milliseconds timeout) override {
    if (key.size() > wire::max_key_size)
      return make_error(errc::invalid_argument,
                        "TCP store: key '" + key + "' is too long");
    timeout = detail::bounded_wait(timeout);
    auto deadline = wire::clock::now() + timeout;
    auto fd = lease(deadline, timeout);
    if (!fd) return fd.error();
    // The wait left after connecting: the deadline holds for the whole get.
    auto left = std::max(
      milliseconds{0},
      std::chrono::duration_cast<milliseconds>(deadline - wire::clock::now()));
    std::vector<char> frame;
    wire::put_u8(frame, static_cast<uint8_t>(wire::op::get));
    wire::put_bytes(frame, key);
    wire::put_u64(frame, static_cast<uint64_t>(left.count()));
    auto answer = exchange(*fd, frame, deadline + reply_grace);
    if (!answer) return answer.error();
    if (answer->first != 0)
      return make_error(errc::timeout,
                        "rendezvous key '" + key +
                          "' did not appear in the TCP store at " + where() +
                          " (run '" + opts_.run_id + "') within " +
                          std::to_string(timeout.count()) + " ms");
    return std::move(answer->second);
  }

 private:
  std::string where() const { return wire::endpoint(opts_.host, opts_.port); }

  // An idle connection, or a new one.
  caf::expected<int> lease(wire::clock::time_point deadline,
                           milliseconds limit) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (!idle_.empty()) {
        int fd = idle_.back();
        idle_.pop_back();
        return fd;
      }
    }
    return connect(deadline, limit);
  }

  // Sends one request frame on `fd` and reads the reply's status and value.
  // Hands the connection back when the exchange completed, closes it
  // otherwise (a late reply would answer the next request).
  caf::expected<std::pair<uint8_t, std::vector<char>>>
  exchange(int fd, const std::vector<char>& frame,
           wire::clock::time_point deadline) {
    auto broken = [&](const char* what) {
      ::close(fd);
      return make_error(errc::backend_error, std::string{"TCP store: "} + what +
                                               " the store at " + where() +
                                               " (run '" + opts_.run_id +
                                               "'); the server is gone or "
                                               "stopped answering");
    };
    if (wire::send_all(fd, frame.data(), frame.size(), deadline) !=
        wire::io_result::done)
      return broken("lost the connection while sending to");
    uint8_t code = 0;
    if (wire::recv_all(fd, &code, 1, deadline) != wire::io_result::done)
      return broken("no answer from");
    std::string value;
    if (wire::recv_sized(fd, value, wire::max_value_size, deadline) !=
        wire::io_result::done)
      return broken("incomplete answer from");
    {
      std::lock_guard<std::mutex> guard{mtx_};
      idle_.push_back(fd);
    }
    return std::make_pair(code, std::vector<char>{value.begin(), value.end()});
  }

  // One attempt to open a TCP connection; returns the socket or -1 with
  // `why` set.
  int try_open(wire::clock::time_point deadline, std::string& why) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    auto service = std::to_string(opts_.port);
    if (int rc =
          ::getaddrinfo(opts_.host.c_str(), service.c_str(), &hints, &found);
        rc != 0) {
      why = std::string{"cannot resolve the host: "} + ::gai_strerror(rc);
      return -1;
    }
    int result = -1;
    for (auto* ai = found; ai != nullptr && result < 0; ai = ai->ai_next) {
      int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                 ai->ai_protocol);
      if (fd < 0) continue;
      int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        auto left = std::chrono::duration_cast<milliseconds>(
          deadline - wire::clock::now());
        pollfd p{fd, POLLOUT, 0};
        rc = ::poll(&p, 1,
                    static_cast<int>(std::max<int64_t>(
                      0, std::min<int64_t>(left.count(), 1000)))) == 1
               ? 0
               : -1;
        int soerr = rc == 0 ? 0 : ETIMEDOUT;
        socklen_t len = sizeof(soerr);
        if (rc == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        errno = soerr;
        rc = soerr == 0 ? 0 : -1;
      }
      if (rc == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        result = fd;
      } else {
        why = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(found);
    return result;
  }

  // Opens a connection and proves membership, retrying refused or
  // unanswered connection attempts until `deadline`. A refusal by the server
  // is final.
  caf::expected<int> connect(wire::clock::time_point deadline,
                             milliseconds limit) {
    if (opts_.run_id.empty())
      return make_error(errc::invalid_argument,
                        "TCP store client for " + where() +
                          ": the run id is empty (every key of a run "
                          "carries it)");
    std::string why = "no attempt made";
    auto pause = milliseconds{5};
    int fd = -1;
    for (;;) {
      fd = try_open(deadline, why);
      if (fd >= 0) break;
      auto now = wire::clock::now();
      if (now >= deadline)
        return make_error(errc::timeout,
                          "no rendezvous store answered at tcp://" + where() +
                            " within " + std::to_string(limit.count()) +
                            " ms (last attempt: " + why + ")");
      std::this_thread::sleep_for(std::min(
        pause, std::chrono::duration_cast<milliseconds>(deadline - now)));
      pause = std::min(pause * 2, milliseconds{200});
    }
    std::vector<char> hello{wire::magic.begin(), wire::magic.end()};
    wire::put_bytes(hello, opts_.secret);
    wire::put_bytes(hello, opts_.run_id);
    auto limit_at = std::max(deadline, wire::clock::now() + handshake_floor);
    uint8_t code = 1;
    std::string reason;
    auto sent = wire::send_all(fd, hello.data(), hello.size(), limit_at);
    auto answered = sent == wire::io_result::done
                      ? wire::recv_all(fd, &code, 1, limit_at)
                      : sent;
    if (answered == wire::io_result::done)
      answered = wire::recv_sized(fd, reason, wire::max_key_size, limit_at);
    if (answered != wire::io_result::done) {
      ::close(fd);
      // Silence: a server that accepted nothing (out of descriptors or
      // threads: its log says so) or is not a store; anything else: not
      // a caf_collective store.
      return make_error(
        errc::backend_error,
        "TCP store at " + where() +
          (answered == wire::io_result::timed_out
             ? ": connected, but no answer to the handshake (a server out "
               "of descriptors or threads: see its log; or not a "
               "caf_collective store)"
             : ": the handshake failed (is this a caf_collective store?)"));
    }
    if (code != 0) {
      ::close(fd);
      return make_error(errc::invalid_argument,
                        "TCP store at " + where() +
                          " refused this client (run '" + opts_.run_id +
                          "'): " + reason + " (check CAF_COLLECTIVE_SECRET)");
    }
    return fd;
  }

  tcp_store_options opts_;
  std::mutex mtx_;
  /// Connections that finished their last request.
  std::vector<int> idle_;
};

} // namespace

rendezvous_store_ptr make_tcp_store(tcp_store_options opts) {
  return std::make_shared<tcp_store_client>(std::move(opts));
}

} // namespace caf_collective
