// Groups formed from what a launcher set: the store the environment names
// (served by rank 0 when nobody else serves it) and the rank and world size
// it gives.
#include "caf_collective/launch.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "caf_collective/error.hpp"
#include "runtime/bounded_resolve.hpp"

namespace caf_collective {

namespace {

using std::chrono::milliseconds;

// Whether `host` is an IPv4 or IPv6 address rather than a name.
bool is_address(const std::string& host) {
  in6_addr any{};
  return ::inet_pton(AF_INET, host.c_str(), &any) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &any) == 1;
}

// Whether every address of `list` is a loopback address.
bool all_loopback(const addrinfo* list) {
  bool result = list != nullptr;
  for (auto* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      auto* in = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      result &= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (ai->ai_family == AF_INET6) {
      auto* in6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      result &= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) != 0;
    }
  }
  return result;
}

// Where rank 0's server may listen for the store's address `addr.host`,
// as numeric addresses to try in turn, resolved within `timeout`
// (getaddrinfo has no deadline: a resolver that does not answer held rank
// 0 for its own timeouts, twice). What the host names, except for a host
// name that resolves to loopback here (Debian's /etc/hosts maps the
// machine's own name to 127.0.1.1) while the other hosts reach it at
// another address: binding that would shut them out, so the server takes
// every IPv4 interface then. Clients still connect to the host as named.
caf::expected<std::vector<std::string>> listen_hosts(const store_address& addr,
                                                     milliseconds timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  detail::bounded_resolver resolver{addr.host, {}, hints};
  auto found = resolver.resolve(std::chrono::steady_clock::now() + timeout);
  if (!found.list)
    return make_error(found.timed_out ? errc::timeout : errc::invalid_argument,
                      "rank 0 serves the TCP store at '" + addr.host +
                        "' (from " + addr.origin + ") but " +
                        (found.timed_out
                           ? "the resolver did not answer within " +
                               std::to_string(timeout.count()) + " ms"
                           : found.why));
  bool is_name = addr.host != "localhost" && !is_address(addr.host);
  if (is_name && all_loopback(found.list.get()))
    return std::vector<std::string>{"0.0.0.0"};
  std::vector<std::string> hosts;
  for (auto* ai = found.list.get(); ai != nullptr; ai = ai->ai_next) {
    char text[NI_MAXHOST];
    if (::getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof(text), nullptr,
                      0, NI_NUMERICHOST) == 0 &&
        std::find(hosts.begin(), hosts.end(), text) == hosts.end())
      hosts.emplace_back(text);
  }
  return hosts;
}

// Servers this process runs, by address: one per address however many
// groups are formed over it, alive until the process exits (members of a
// later group may still need them).
caf::error serve_once(const store_address& addr, milliseconds timeout) {
  static std::mutex mtx;
  static std::map<std::pair<std::string, uint16_t>,
                  std::unique_ptr<tcp_store_server>>
    servers;
  std::lock_guard<std::mutex> guard{mtx};
  auto& slot = servers[{addr.host, addr.port}];
  if (slot) return {};
  auto hosts = listen_hosts(addr, timeout);
  if (!hosts) return hosts.error();
  caf::error why =
    make_error(errc::invalid_argument, "'" + addr.host + "' names no address");
  for (const auto& host : *hosts) {
    auto started = tcp_store_server::start(host, addr.port, addr.secret);
    if (started) {
      slot = std::move(*started);
      return {};
    }
    why = started.error();
  }
  return make_error(code_of(why),
                    "rank 0 serves the TCP store (from " + addr.origin +
                      ") but cannot: " + render(why) +
                      " (set CAF_COLLECTIVE_STORE_SERVER=external if "
                      "another process serves it)");
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
        if (auto err = serve_once(addr, timeout)) return err;
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
