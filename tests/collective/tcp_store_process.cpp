// A process of the TCP store tests: serves a store, or acts as one client
// (set, get) or one rank forming a Gloo group over a store.
//
//   serve <host> <port file> <secret>
//       serves on <host> (system-chosen port, written to <port file>) until
//       SIGTERM
//   set <port> <secret> <run> <key> <value>
//   get <port> <secret> <run> <key> <expected value> <timeout ms>
//   rank <port> <secret> <run> <world> <rank> <timeout ms>
//       joins group "tcp" through the store at 127.0.0.1:<port>, checks an
//       allreduce and a broadcast
//   file-rank <dir> <world> <rank> <timeout ms>
//       the same through a file store
//
// Exit codes: 0 ok, 1 wrong result or other error, 3 refused
// (invalid_argument), 4 timeout. Errors go to stderr.
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

namespace col = caf_collective;

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
  if (mode == "rank" && argc == 8)
    return form_group(client(argv + 2), std::atoi(argv[5]), std::atoi(argv[6]),
                      std::atol(argv[7]));
  if (mode == "file-rank" && argc == 6)
    return form_group(col::make_file_store(argv[2]), std::atoi(argv[3]),
                      std::atoi(argv[4]), std::atol(argv[5]));
  std::fprintf(stderr, "usage: see the comment at the top of %s\n", __FILE__);
  return 2;
}
