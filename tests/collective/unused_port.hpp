// TCP ports on the loopback address that nobody listens on, for tests that
// start a store server or expect nobody to answer.
#pragma once

#include <cstdint>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

/// A port bound but not listening, for as long as this object lives: a
/// connect there is refused, and no other socket of the machine can take
/// the port meanwhile (a port merely free could be taken by a Gloo pair of
/// a test beside this one).
class refusing_port {
 public:
  refusing_port() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }

  ~refusing_port() { ::close(fd_); }

  refusing_port(const refusing_port&) = delete;
  refusing_port& operator=(const refusing_port&) = delete;

  uint16_t port() const noexcept { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

/// A port that is free right now, for a server the test starts on it later.
inline uint16_t unused_port() {
  return refusing_port{}.port();
}
