// A process of the TCP store tests: serves a store, or acts as one client
// (set, get) or one rank forming a Gloo group over a store.
//
//   serve <host> <port file> <secret>
//       serves on <host> (system-chosen port, written to <port file>) until
//       SIGTERM
//   set <port> <secret> <run> <key> <value>
//   get <port> <secret> <run> <key> <expected value> <timeout ms>
//   get-host <host> <port> <timeout ms>
//       one get from the store at <host>:<port>; prints the seconds it took
//       to stderr ("took 1.2 s")
//   gloo-host <hostname> <timeout ms>
//       forms a Gloo group of one rank whose device uses <hostname>; prints
//       the seconds it took
//   env-rank0 <host> <timeout ms>
//       rank 0 of two forming a Gloo group from a torchrun-style
//       environment whose MASTER_ADDR is <host> (rank 0 serves the store
//       there); prints the seconds it took
//   rank <port> <secret> <run> <world> <rank> <timeout ms>
//       joins group "tcp" through the store at 127.0.0.1:<port>, checks an
//       allreduce and a broadcast
//   file-rank <dir> <world> <rank> <timeout ms>
//       the same through a file store
//   fake-rank <port> <secret> <run> <rank> <hold ms>
//       rank <rank> of a group "tcp" of 2 that does everything a rank does
//       in the store (publishes Gloo addresses, passes the peer check) but
//       never connects; its listening port makes the real rank the waiting
//       side of the connection. Holds its sockets for <hold ms>.
//
// Exit codes: 0 ok, 1 wrong result or other error, 3 refused
// (invalid_argument), 4 timeout. Errors go to stderr.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>

#include <gloo/transport/tcp/address.h>

#include "runtime/formation_round.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace col = caf_collective;
using col::make_prefix_store;

namespace {

volatile std::sig_atomic_t stop_requested = 0;

int exit_code_of(const caf::error& err) {
  std::fprintf(stderr, "%s\n", col::render(err).c_str());
  switch (col::code_of(err)) {
    case col::errc::invalid_argument: return 3;
    case col::errc::timeout: return 4;
    default: return 1;
  }
}

col::rendezvous_store_ptr client(char** args) {
  col::tcp_store_options opts;
  opts.port = static_cast<uint16_t>(std::atoi(args[0]));
  opts.secret = args[1];
  opts.run_id = args[2];
  opts.connect_timeout = std::chrono::seconds{10};
  return col::make_tcp_store(std::move(opts));
}

int serve(const std::string& host, const std::string& port_file,
          const std::string& secret) {
  auto server = col::tcp_store_server::start(host, 0, secret);
  if (!server) return exit_code_of(server.error());
  std::signal(SIGTERM, [](int) { stop_requested = 1; });
  {
    std::ofstream out{port_file + ".tmp"};
    out << (*server)->port();
  }
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  while (stop_requested == 0)
    ::usleep(10000);
  return 0;
}

int form_group(col::rendezvous_store_ptr store, int world, int rank,
               long timeout_ms) {
  try {
    col::init_options opts;
    opts.store = std::move(store);
    opts.timeout = std::chrono::milliseconds{timeout_ms};
    col::init_collective_group(world, rank, "gloo", "tcp", opts);
    std::vector<int64_t> xs(1000, rank + 1);
    col::allreduce(col::view_of(xs), "tcp");
    int64_t expected = int64_t{world} * (world + 1) / 2;
    for (auto x : xs)
      if (x != expected) {
        std::fprintf(stderr, "rank %d: allreduce gave %lld, not %lld\n", rank,
                     static_cast<long long>(x),
                     static_cast<long long>(expected));
        return 1;
      }
    std::vector<int32_t> b(10, rank == 0 ? 42 : -1);
    col::broadcast(col::view_of(b), 0, "tcp");
    for (auto x : b)
      if (x != 42) {
        std::fprintf(stderr, "rank %d: broadcast gave %d\n", rank, x);
        return 1;
      }
    col::destroy_collective_group("tcp");
    return 0;
  } catch (const col::collective_error& ex) {
    return exit_code_of(ex.error());
  }
}

// A listening socket on 127.0.0.1; `port` 0: any.
int listen_on(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int fake_rank(char** args, int rank, long hold_ms) {
  // Joins the formation as every rank does first, then speaks Gloo's part.
  col::detail::formation_seat seat;
  seat.group = "tcp";
  seat.rank = rank;
  seat.world_size = 2;
  seat.backend = "gloo";
  seat.timeout = std::chrono::milliseconds{hold_ms};
  seat.deadline = std::chrono::steady_clock::now() + seat.timeout;
  auto joined = col::detail::join_formation(client(args), seat);
  if (!joined) return exit_code_of(joined.error());
  auto store = make_prefix_store("gloo/tcp", *joined);
  auto put = [&](const std::string& key, const std::string& value) {
    if (auto err = store->set(key, {value.begin(), value.end()}))
      std::exit(exit_code_of(err));
  };
  // Gloo's TCP pair compares the raw (network order) ports of both ends:
  // the lower one waits for the other to connect. Ports x*256+255 near the
  // top are higher than any ephemeral port of the real rank.
  int pair_fd = -1;
  for (uint16_t port = 65279; pair_fd < 0 && port > 40000; port -= 256)
    pair_fd = listen_on(port);
  int alive_fd = listen_on(0);
  if (pair_fd < 0 || alive_fd < 0) return 1;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(pair_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  auto addr = gloo::transport::tcp::Address{ss}.bytes();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  put("rank_" + std::to_string(rank), host);
  put(std::to_string(rank), std::string{addr.begin(), addr.end()});
  sockaddr_in alive{};
  len = sizeof(alive);
  ::getsockname(alive_fd, reinterpret_cast<sockaddr*>(&alive), &len);
  put("alive/" + std::to_string(rank),
      "127.0.0.1 " + std::to_string(ntohs(alive.sin_port)));
  int peer = 1 - rank;
  auto seen = store->get("alive/" + std::to_string(peer),
                         std::chrono::milliseconds{hold_ms});
  if (!seen) return exit_code_of(seen.error());
  put("checked/" + std::to_string(rank) + "/" + std::to_string(peer),
      std::string{seen->begin(), seen->end()});
  ::usleep(static_cast<useconds_t>(hold_ms) * 1000);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" && argc == 5) return serve(argv[2], argv[3], argv[4]);
  if (mode == "set" && argc == 7) {
    if (auto err = client(argv + 2)->set(
          argv[5], {argv[6], argv[6] + std::strlen(argv[6])}))
      return exit_code_of(err);
    return 0;
  }
  if (mode == "get" && argc == 8) {
    auto value = client(argv + 2)->get(
      argv[5], std::chrono::milliseconds{std::atol(argv[7])});
    if (!value) return exit_code_of(value.error());
    std::string got{value->begin(), value->end()};
    if (got != argv[6]) {
      std::fprintf(stderr, "get %s: '%s', expected '%s'\n", argv[5],
                   got.c_str(), argv[6]);
      return 1;
    }
    return 0;
  }
  if (mode == "get-host" && argc == 5) {
    col::tcp_store_options opts;
    opts.host = argv[2];
    opts.port = static_cast<uint16_t>(std::atoi(argv[3]));
    opts.secret = "unused";
    opts.run_id = "run";
    auto start = std::chrono::steady_clock::now();
    auto value = col::make_tcp_store(std::move(opts))
                   ->get("k", std::chrono::milliseconds{std::atol(argv[4])});
    std::chrono::duration<double> took =
      std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "took %.1f s\n", took.count());
    return value ? 0 : exit_code_of(value.error());
  }
  if (mode == "gloo-host" && argc == 4) {
    col::init_options opts;
    opts.store = col::make_in_process_store();
    opts.hostname = argv[2];
    opts.timeout = std::chrono::milliseconds{std::atol(argv[3])};
    auto start = std::chrono::steady_clock::now();
    int code = 0;
    try {
      col::init_collective_group(1, 0, "gloo", "gloo-host", opts);
    } catch (const col::collective_error& e) {
      code = exit_code_of(e.error());
    }
    std::chrono::duration<double> took =
      std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "took %.1f s\n", took.count());
    return code;
  }
  if (mode == "env-rank0" && argc == 4) {
    ::setenv("MASTER_ADDR", argv[2], 1);
    ::setenv("MASTER_PORT", "29400", 1);
    ::setenv("RANK", "0", 1);
    ::setenv("WORLD_SIZE", "2", 1); // one rank alone needs no store
    ::setenv("CAF_COLLECTIVE_SECRET", "env-rank0", 1);
    col::init_options opts;
    opts.timeout = std::chrono::milliseconds{std::atol(argv[3])};
    auto start = std::chrono::steady_clock::now();
    int code = 0;
    try {
      col::init_collective_group_from_env("gloo", "env-rank0", opts);
    } catch (const col::collective_error& e) {
      std::fprintf(stderr, "%s\n", col::render(e.error()).c_str());
      code = exit_code_of(e.error());
    }
    std::chrono::duration<double> took =
      std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "took %.1f s\n", took.count());
    return code;
  }
  if (mode == "rank" && argc == 8)
    return form_group(client(argv + 2), std::atoi(argv[5]), std::atoi(argv[6]),
                      std::atol(argv[7]));
  if (mode == "file-rank" && argc == 6)
    return form_group(col::make_file_store(argv[2]), std::atoi(argv[3]),
                      std::atoi(argv[4]), std::atol(argv[5]));
  if (mode == "fake-rank" && argc == 7)
    return fake_rank(argv + 2, std::atoi(argv[5]), std::atol(argv[6]));
  std::fprintf(stderr, "usage: see the comment at the top of %s\n", __FILE__);
  return 2;
}
