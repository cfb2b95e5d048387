// The TCP rendezvous store's client. A request takes an idle connection or
// opens one (retrying until the request's deadline: the server may start
// after its clients) and hands it back when done, so threads sharing one
// store object never wait for each other's blocking gets. An idle
// connection the server closed meanwhile (it restarted, or dropped a client
// idle for a day) is never used: the request goes out on a fresh one.
#include "caf_collective/rendezvous.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <netdb.h>
#include <netinet/tcp.h>
#include <optional>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "runtime/bounded_resolve.hpp"
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
  explicit tcp_store_client(tcp_store_options opts)
    : opts_(std::move(opts)),
      resolver_(opts_.host, std::to_string(opts_.port), stream_hints()) {
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
    std::vector<char> frame;
    wire::put_u8(frame, static_cast<uint8_t>(wire::op::set));
    wire::put_bytes(frame, key);
    wire::put_bytes(frame, {value.data(), value.size()});
    return request(deadline, limit, [&] { return frame; }).failure;
  }

  caf::expected<std::vector<char>> get(const std::string& key,
                                       milliseconds timeout) override {
    if (key.size() > wire::max_key_size)
      return make_error(errc::invalid_argument,
                        "TCP store: key '" + key + "' is too long");
    timeout = detail::bounded_wait(timeout);
    auto deadline = wire::clock::now() + timeout;
    auto ask = [&] {
      return request(deadline, timeout, [&] {
        // The wait left after connecting: the deadline holds for the whole
        // get.
        std::vector<char> frame;
        wire::put_u8(frame, static_cast<uint8_t>(wire::op::get));
        wire::put_bytes(frame, key);
        wire::put_u64(
          frame, static_cast<uint64_t>(detail::time_left(deadline).count()));
        return frame;
      });
    };
    auto answer = ask();
    // The server waits at most a day per request: a longer wait asks again
    // until its own deadline.
    while (!answer.failure && answer.status != 0 &&
           detail::time_left(deadline).count() > 0)
      answer = ask();
    if (answer.failure) return std::move(answer.failure);
    if (answer.status != 0)
      return make_error(errc::timeout,
                        "rendezvous key '" + key +
                          "' did not appear in the TCP store at " + where() +
                          " (run '" + opts_.run_id + "') within " +
                          std::to_string(timeout.count()) + " ms");
    return std::move(answer.value);
  }

 private:
  std::string where() const { return wire::endpoint(opts_.host, opts_.port); }

  // A connection leased for one request.
  struct connection {
    int fd = -1;
    /// Taken from the idle ones: the server may have closed it meanwhile.
    bool pooled = false;
  };

  // One request's reply, or why there is none.
  struct outcome {
    caf::error failure;
    /// The connection closed before any byte of the reply arrived.
    bool closed_unanswered = false;
    uint8_t status = 0;
    std::vector<char> value;
  };

  // Sends the frame `make_frame` builds (after connecting) and reads the
  // reply, answered by `deadline` plus the grace. A request on a pooled
  // connection the server closed before answering (a restart or an idle
  // drop racing the request) goes out once more on a fresh connection, with
  // the same reply deadline: sets and gets may be repeated safely.
  template<class MakeFrame>
  outcome request(wire::clock::time_point deadline, milliseconds limit,
                  MakeFrame make_frame) {
    std::optional<wire::clock::time_point> reply_by;
    for (bool fresh = false;; fresh = true) {
      auto conn = lease(deadline, limit, fresh);
      if (!conn) {
        outcome refused;
        refused.failure = std::move(conn.error());
        return refused;
      }
      if (!reply_by)
        reply_by = std::max(deadline, wire::clock::now()) + reply_grace;
      auto answer = exchange(*conn, make_frame(), *reply_by);
      if (!answer.failure || !conn->pooled || !answer.closed_unanswered)
        return answer;
    }
  }

  // An idle connection still open, or a new one (`fresh`: always new).
  caf::expected<connection> lease(wire::clock::time_point deadline,
                                  milliseconds limit, bool fresh) {
    while (!fresh) {
      int fd = -1;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        if (idle_.empty()) break;
        fd = idle_.back();
        idle_.pop_back();
      }
      if (still_open(fd)) return connection{fd, true};
      ::close(fd);
    }
    auto fd = connect(deadline, limit);
    if (!fd) return fd.error();
    return connection{*fd, false};
  }

  // An idle connection has nothing to read: readable means the server
  // closed it (or broke the protocol), so it must not carry a request.
  static bool still_open(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, 0);
    } while (rc < 0 && errno == EINTR);
    return rc == 0;
  }

  // Sends one request frame on the leased connection and reads the reply's
  // status and value. Hands the connection back when the exchange
  // completed, closes it otherwise (a late reply would answer the next
  // request).
  outcome exchange(const connection& conn, const std::vector<char>& frame,
                   wire::clock::time_point deadline) {
    outcome result;
    auto broken = [&](const char* what, wire::io_result io, bool unanswered) {
      ::close(conn.fd);
      result.closed_unanswered = unanswered && io == wire::io_result::closed;
      result.failure =
        make_error(errc::backend_error,
                   std::string{"TCP store: "} + what + " the store at " +
                     where() + " (run '" + opts_.run_id +
                     "'); the server is gone or stopped answering");
      return std::move(result);
    };
    if (auto io = wire::send_all(conn.fd, frame.data(), frame.size(), deadline);
        io != wire::io_result::done)
      return broken("lost the connection while sending to", io, true);
    if (auto io = wire::recv_all(conn.fd, &result.status, 1, deadline);
        io != wire::io_result::done)
      return broken("no answer from", io, true);
    std::string value;
    if (auto io =
          wire::recv_sized(conn.fd, value, wire::max_value_size, deadline);
        io != wire::io_result::done)
      return broken("incomplete answer from", io, false);
    {
      std::lock_guard<std::mutex> guard{mtx_};
      idle_.push_back(conn.fd);
    }
    result.value.assign(value.begin(), value.end());
    return result;
  }

  // One attempt to open a TCP connection; returns the socket or -1 with
  // `why` set.
  int try_open(wire::clock::time_point deadline, std::string& why) {
    auto found = resolver_.resolve(deadline);
    if (!found.list) {
      why = found.why;
      return -1;
    }
    int result = -1;
    for (auto* ai = found.list.get(); ai != nullptr && result < 0;
         ai = ai->ai_next) {
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
    return result;
  }

  // Sends the handshake on `fd` and reads the server's verdict into `code`
  // and `reason`, by `limit_at`.
  wire::io_result handshake(int fd, uint8_t& code, std::string& reason,
                            wire::clock::time_point limit_at) {
    std::vector<char> hello{wire::magic.begin(), wire::magic.end()};
    wire::put_bytes(hello, opts_.secret);
    wire::put_bytes(hello, opts_.run_id);
    auto sent = wire::send_all(fd, hello.data(), hello.size(), limit_at);
    auto answered = sent == wire::io_result::done
                      ? wire::recv_all(fd, &code, 1, limit_at)
                      : sent;
    if (answered == wire::io_result::done)
      answered = wire::recv_sized(fd, reason, wire::max_key_size, limit_at);
    return answered;
  }

  // Opens a connection and proves membership, retrying refused or
  // unanswered connection attempts, and connections closed before the
  // handshake's answer, until `deadline`. A refusal by the server is final.
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
    // Each attempt may take the handshake floor: a get with no time to wait
    // ("is the key there now?") must still reach a server across a network
    // and answer, not fail for want of a round trip (a formation takes a
    // missing key for an answer).
    uint8_t code = 1;
    std::string reason;
    auto answered = wire::io_result::failed;
    for (;;) {
      fd =
        try_open(std::max(deadline, wire::clock::now() + handshake_floor), why);
      if (fd >= 0) {
        answered =
          handshake(fd, code, reason,
                    std::max(deadline, wire::clock::now() + handshake_floor));
        // Closed unanswered: the server turns clients away while many
        // handshakes are under way (or restarts): try again.
        if (answered != wire::io_result::closed &&
            answered != wire::io_result::failed)
          break;
        ::close(fd);
        fd = -1;
        why = "the server closed the connection during the handshake (it "
              "turns clients away while 256 handshakes are under way; or "
              "this is not a caf_collective store)";
      }
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

  static addrinfo stream_hints() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    return hints;
  }

  tcp_store_options opts_;
  // The server's name, resolved within each attempt's deadline.
  detail::bounded_resolver resolver_;
  std::mutex mtx_;
  /// Connections that finished their last request.
  std::vector<int> idle_;
};

} // namespace

rendezvous_store_ptr make_tcp_store(tcp_store_options opts) {
  return std::make_shared<tcp_store_client>(std::move(opts));
}

} // namespace caf_collective
