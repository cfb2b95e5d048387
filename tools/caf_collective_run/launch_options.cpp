#include "launch_options.hpp"

#include <charconv>
#include <string_view>

namespace caf_collective::launcher {

namespace {

bool to_int(std::string_view text, long lo, long hi, long& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc{} &&
         end == text.data() + text.size() && out >= lo && out <= hi;
}

} // namespace

std::string usage() {
  return "usage: caf_collective_run -n N [options] [--] program [args...]\n"
         "\n"
         "Starts N ranks of `program` on this host, serves their TCP\n"
         "rendezvous store, and prefixes every line they print with\n"
         "\"[rank R] \". Each rank finds its place in the environment:\n"
         "CAF_COLLECTIVE_RANK, CAF_COLLECTIVE_WORLD_SIZE,\n"
         "CAF_COLLECTIVE_LOCAL_RANK (also as RANK, WORLD_SIZE, LOCAL_RANK),\n"
         "CAF_COLLECTIVE_STORE=tcp://host:port, CAF_COLLECTIVE_SECRET (fresh\n"
         "and random per run), CAF_COLLECTIVE_RUN_ID and\n"
         "CAF_COLLECTIVE_STORE_SERVER=external; "
         "init_collective_group_from_env\n"
         "reads them.\n"
         "\n"
         "SIGINT, SIGTERM and SIGHUP are forwarded to every rank, which\n"
         "then have the grace period to end (a second Ctrl-C kills them at\n"
         "once; a repeated SIGTERM does not). SIGUSR1 and SIGUSR2 are\n"
         "forwarded and the run goes on. SIGQUIT, SIGALRM, SIGXCPU and other\n"
         "signals that would end the launcher stop the ranks with SIGTERM.\n"
         "When a rank fails, the others get SIGTERM (SIGKILL after the grace\n"
         "period) and the launcher exits with the failed rank's status (128\n"
         "+ signal for a rank killed by a signal; 128 + signal for a run a\n"
         "signal stopped; 1 when the launcher itself could not start a\n"
         "rank). Ranks die with a launcher that is killed, and read their\n"
         "standard input from /dev/null.\n"
         "\n"
         "options:\n"
         "  -n, --nproc N        ranks to start (1-1024)\n"
         "  --store-host ADDR    address the store binds to and ranks use\n"
         "                       (default 127.0.0.1; one host only)\n"
         "  --store-port PORT    store port (default 0: any free port)\n"
         "  --run-id ID          run id in the store (default: random)\n"
         "  --grace-ms MS        time between SIGTERM and SIGKILL when\n"
         "                       stopping ranks (default 5000)\n"
         "  --hosts H1,H2,...    not implemented: for several hosts, start\n"
         "                       ranks with mpirun, srun or torchrun, or set\n"
         "                       the variables above on each host yourself\n"
         "                       (docs/config.md, \"Several hosts\")\n"
         "  -h, --help           this text\n";
}

std::string parse(int argc, char** argv, launch_options& out, bool& help) {
  help = false;
  int i = 1;
  auto value = [&](std::string_view name, std::string& text) -> std::string {
    if (i + 1 >= argc) return "option " + std::string{name} + " needs a value";
    text = argv[++i];
    return {};
  };
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string text;
    long n = 0;
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      help = true;
      return {};
    }
    if (arg == "-n" || arg == "--nproc") {
      if (auto err = value(arg, text); !err.empty()) return err;
      if (!to_int(text, 1, 1024, n))
        return "-n '" + text + "' is not a rank count in 1-1024";
      out.nproc = static_cast<int>(n);
    } else if (arg == "--store-host") {
      if (auto err = value(arg, text); !err.empty()) return err;
      out.store_host = text;
    } else if (arg == "--store-port") {
      if (auto err = value(arg, text); !err.empty()) return err;
      if (!to_int(text, 0, 65535, n))
        return "--store-port '" + text + "' is not a port in 0-65535";
      out.store_port = static_cast<uint16_t>(n);
    } else if (arg == "--run-id") {
      if (auto err = value(arg, text); !err.empty()) return err;
      if (text.empty()) return "--run-id must not be empty";
      out.run_id = text;
    } else if (arg == "--grace-ms") {
      if (auto err = value(arg, text); !err.empty()) return err;
      if (!to_int(text, 0, 3600000, n))
        return "--grace-ms '" + text + "' is not a time in 0-3600000 ms";
      out.grace = std::chrono::milliseconds{n};
    } else if (arg == "--hosts") {
      return "--hosts is not implemented: start the ranks of several hosts "
             "with mpirun, srun or torchrun, or set the variables of "
             "docs/config.md on each host";
    } else if (!arg.empty() && arg.front() == '-') {
      return "unknown option '" + std::string{arg} + "'";
    } else {
      break;
    }
  }
  for (; i < argc; ++i)
    out.command.emplace_back(argv[i]);
  if (out.nproc == 0) return "-n N is required";
  if (out.command.empty()) return "no program given";
  return {};
}

} // namespace caf_collective::launcher
