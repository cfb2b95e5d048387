#include "runtime/tcp_store_wire.hpp"

#include <algorithm>
#include <cerrno>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace caf_collective::detail::tcp_store_wire {

namespace {

// Waits until `fd` is ready for `events`, the deadline passes or `stop_fd`
// becomes readable.
io_result wait_ready(int fd, short events, clock::time_point deadline,
                     int stop_fd) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clock::now());
    if (left.count() <= 0) return io_result::timed_out;
    pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    auto timeout_ms =
      static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
    int rc = ::poll(fds, stop_fd >= 0 ? 2 : 1, timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return io_result::failed;
    }
    if (stop_fd >= 0 && (fds[1].revents & POLLIN) != 0)
      return io_result::stopped;
    if (fds[0].revents != 0) return io_result::done;
  }
}

} // namespace

io_result send_all(int fd, const void* data, size_t size,
                   clock::time_point deadline, int stop_fd) {
  auto* pos = static_cast<const char*>(data);
  while (size > 0) {
    auto sent = ::send(fd, pos, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      pos += sent;
      size -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (auto r = wait_ready(fd, POLLOUT, deadline, stop_fd);
          r != io_result::done)
        return r;
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    return errno == EPIPE || errno == ECONNRESET ? io_result::closed
                                                 : io_result::failed;
  }
  return io_result::done;
}

io_result recv_all(int fd, void* data, size_t size, clock::time_point deadline,
                   int stop_fd) {
  auto* pos = static_cast<char*>(data);
  while (size > 0) {
    auto got = ::recv(fd, pos, size, MSG_DONTWAIT);
    if (got > 0) {
      pos += got;
      size -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return io_result::closed;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (auto r = wait_ready(fd, POLLIN, deadline, stop_fd);
          r != io_result::done)
        return r;
      continue;
    }
    if (errno == EINTR) continue;
    return errno == ECONNRESET ? io_result::closed : io_result::failed;
  }
  return io_result::done;
}

void put_u8(std::vector<char>& out, uint8_t x) {
  out.push_back(static_cast<char>(x));
}

void put_u32(std::vector<char>& out, uint32_t x) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((x >> shift) & 0xff));
}

void put_u64(std::vector<char>& out, uint64_t x) {
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((x >> shift) & 0xff));
}

void put_bytes(std::vector<char>& out, std::string_view bytes) {
  put_u32(out, static_cast<uint32_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

uint32_t decode_u32(const char* in) {
  uint32_t x = 0;
  for (int i = 0; i < 4; ++i)
    x = (x << 8) | static_cast<unsigned char>(in[i]);
  return x;
}

uint64_t decode_u64(const char* in) {
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i)
    x = (x << 8) | static_cast<unsigned char>(in[i]);
  return x;
}

io_result recv_sized(int fd, std::string& out, uint32_t limit,
                     clock::time_point deadline, int stop_fd) {
  char header[4];
  if (auto r = recv_all(fd, header, sizeof(header), deadline, stop_fd);
      r != io_result::done)
    return r;
  auto size = decode_u32(header);
  if (size > limit) return io_result::failed;
  out.resize(size);
  return recv_all(fd, out.data(), size, deadline, stop_fd);
}

std::string endpoint(const std::string& host, uint16_t port) {
  auto shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return shown + ":" + std::to_string(port);
}

bool same_secret(std::string_view a, std::string_view b) {
  // Compare over the longer length so the time depends on neither content.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  auto n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

} // namespace caf_collective::detail::tcp_store_wire
