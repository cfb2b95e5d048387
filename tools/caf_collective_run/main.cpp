// caf_collective_run: starts N ranks of a program on this host with the
// environment init_collective_group_from_env reads, and serves their TCP
// rendezvous store. See `caf_collective_run --help` and docs/config.md.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/random.h>
#include <unistd.h>
#include <vector>

#include <caf/expected.hpp>

#include <caf_collective/error.hpp>
#include <caf_collective/rendezvous.hpp>

#include "launch_options.hpp"
#include "rank_processes.hpp"

extern char** environ;

namespace launcher = caf_collective::launcher;

namespace {

// `bytes` random bytes from the kernel, as hex.
std::string random_hex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    auto n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n <= 0) continue;
    got += static_cast<size_t>(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (auto b : raw) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

// Variables the launcher sets; inherited values of them are dropped so a
// rank never sees two descriptions of its place.
const char* const owned_vars[] = {
  "CAF_COLLECTIVE_RANK",
  "CAF_COLLECTIVE_WORLD_SIZE",
  "CAF_COLLECTIVE_LOCAL_RANK",
  "CAF_COLLECTIVE_LOCAL_WORLD_SIZE",
  "CAF_COLLECTIVE_STORE",
  "CAF_COLLECTIVE_STORE_SERVER",
  "CAF_COLLECTIVE_SECRET",
  "CAF_COLLECTIVE_RUN_ID",
  "RANK",
  "WORLD_SIZE",
  "LOCAL_RANK",
  "LOCAL_WORLD_SIZE",
};

std::vector<std::string> inherited_environment() {
  std::vector<std::string> result;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    auto name = entry.substr(0, entry.find('='));
    bool owned = false;
    for (const char* var : owned_vars)
      owned = owned || name == var;
    if (!owned) result.push_back(std::move(entry));
  }
  return result;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && argv[1] == launcher::trampoline_flag)
    return launcher::rank_trampoline(argc, argv);
  launcher::launch_options opts;
  bool help = false;
  if (auto err = launcher::parse(argc, argv, opts, help); !err.empty()) {
    std::fprintf(stderr, "caf_collective_run: %s\n\n%s", err.c_str(),
                 launcher::usage().c_str());
    return 2;
  }
  if (help) {
    std::printf("%s", launcher::usage().c_str());
    return 0;
  }
  // A fresh secret per run: only the ranks started here learn it.
  auto secret = random_hex(32);
  auto run_id = opts.run_id.empty() ? "run-" + random_hex(8) : opts.run_id;
  auto server = caf_collective::tcp_store_server::start(
    opts.store_host, opts.store_port, secret);
  if (!server) {
    std::fprintf(stderr, "caf_collective_run: %s\n",
                 caf_collective::render(server.error()).c_str());
    return 1;
  }
  auto port = std::to_string((*server)->port());
  auto host = (*server)->host();
  auto store =
    "tcp://" + (host.find(':') != std::string::npos ? "[" + host + "]:" + port
                                                    : host + ":" + port);
  launcher::install_signal_handlers();
  launcher::raise_open_file_limit();
  auto base = inherited_environment();
  auto n = std::to_string(opts.nproc);
  std::vector<launcher::rank_process> ranks(static_cast<size_t>(opts.nproc));
  for (int r = 0; r < opts.nproc; ++r) {
    auto env = base;
    auto rank = std::to_string(r);
    for (auto& var : std::vector<std::string>{
           "CAF_COLLECTIVE_RANK=" + rank,
           "CAF_COLLECTIVE_WORLD_SIZE=" + n,
           "CAF_COLLECTIVE_LOCAL_RANK=" + rank,
           "CAF_COLLECTIVE_LOCAL_WORLD_SIZE=" + n,
           "CAF_COLLECTIVE_STORE=" + store,
           "CAF_COLLECTIVE_STORE_SERVER=external",
           "CAF_COLLECTIVE_SECRET=" + secret,
           "CAF_COLLECTIVE_RUN_ID=" + run_id,
           "RANK=" + rank,
           "WORLD_SIZE=" + n,
           "LOCAL_RANK=" + rank,
           "LOCAL_WORLD_SIZE=" + n,
         })
      env.push_back(var);
    if (auto err = launcher::start_rank(r, opts.command, env, ranks[r]);
        !err.empty()) {
      std::fprintf(stderr, "caf_collective_run: rank %d: %s%s\n", r,
                   err.c_str(),
                   err == std::strerror(EMFILE)
                     ? " (the launcher holds two descriptors per rank and "
                       "its store one per connection: raise the hard "
                       "open-file limit, ulimit -Hn)"
                     : "");
      ranks.resize(static_cast<size_t>(r));
      launcher::kill_all(ranks);
      // Not 127 (a program that cannot start): the launcher itself failed.
      return 1;
    }
  }
  return launcher::supervise(ranks, opts.grace);
}
