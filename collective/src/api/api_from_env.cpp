// Groups formed from what a launcher set: the store the environment names
// (served by rank 0 when nobody else serves it) and the rank and world size
// it gives.
#include "caf_collective/launch.hpp"

#include <map>
#include <mutex>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "caf_collective/error.hpp"

namespace caf_collective {

namespace {

// Whether `host` is a name (not an address, not "localhost") that this
// machine resolves to loopback addresses only.
bool name_of_loopback(const std::string& host) {
  if (host == "localhost") return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* numeric = nullptr;
  hints.ai_flags = AI_NUMERICHOST;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &numeric) == 0) {
    ::freeaddrinfo(numeric);
    return false; // an address: bound as given
  }
  hints.ai_flags = 0;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool all_loopback = found != nullptr;
  for (auto* ai = found; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      all_loopback &= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (ai->ai_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      all_loopback &= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) != 0;
    }
  }
  ::freeaddrinfo(found);
  return all_loopback;
}

// Where rank 0's server listens for the store's address `host`: what it
// names, except for a host name that resolves to loopback here (Debian's
// /etc/hosts maps the machine's own name to 127.0.1.1) while the other
// hosts reach it at another address: binding that would shut them out,
// so the server takes every IPv4 interface then. Clients still connect
// to `host`.
std::string listen_host(const std::string& host) {
  return name_of_loopback(host) ? "0.0.0.0" : host;
}

// Servers this process runs, by address: one per address however many
// groups are formed over it, alive until the process exits (members of a
// later group may still need them).
caf::error serve_once(const store_address& addr) {
  static std::mutex mtx;
  static std::map<std::pair<std::string, uint16_t>,
                  std::unique_ptr<tcp_store_server>>
    servers;
  std::lock_guard<std::mutex> guard{mtx};
  auto& slot = servers[{addr.host, addr.port}];
  if (slot) return {};
  auto started =
    tcp_store_server::start(listen_host(addr.host), addr.port, addr.secret);
  if (!started)
    return make_error(code_of(started.error()),
                      "rank 0 serves the TCP store (from " + addr.origin +
                        ") but cannot: " + render(started.error()) +
                        " (set CAF_COLLECTIVE_STORE_SERVER=external if "
                        "another process serves it)");
  slot = std::move(*started);
  return {};
}

} // namespace

caf::expected<rendezvous_store_ptr>
open_store(const store_address& addr, int rank,
           std::chrono::milliseconds timeout) {
  switch (addr.kind) {
    case store_address::kind_t::none: return rendezvous_store_ptr{};
    case store_address::kind_t::file: return make_file_store(addr.directory);
    case store_address::kind_t::tcp: {
      if (rank == 0 && addr.rank0_serves)
        if (auto err = serve_once(addr)) return err;
      tcp_store_options opts;
      opts.host = addr.host;
      opts.port = addr.port;
      opts.secret = addr.secret;
      opts.run_id = addr.run_id;
      opts.connect_timeout = timeout;
      return make_tcp_store(std::move(opts));
    }
  }
  return rendezvous_store_ptr{};
}

caf::expected<rendezvous_store_ptr>
open_group_store(const store_address& addr, std::string_view group_name,
                 int rank, std::chrono::milliseconds timeout) {
  std::string name{group_name};
  if (addr.kind == store_address::kind_t::file)
    return make_file_store(addr.directory + "/" + name);
  auto store = open_store(addr, rank, timeout);
  if (!store || !*store) return store;
  return make_prefix_store("group/" + name, std::move(*store));
}

void init_collective_group_from_env(std::string_view backend,
                                    std::string_view group_name,
                                    init_options opts) {
  auto info = read_launch_environment();
  if (!info) throw collective_error{info.error()};
  if (!opts.store) {
    auto store =
      open_group_store(info->store, group_name, info->rank, opts.timeout);
    if (!store) throw collective_error{store.error()};
    opts.store = std::move(*store);
  }
  init_collective_group(info->world_size, info->rank, backend, group_name,
                        std::move(opts));
}

} // namespace caf_collective
