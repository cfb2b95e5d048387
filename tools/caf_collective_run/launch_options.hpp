// caf_collective_run's command line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace caf_collective::launcher {

struct launch_options {
  /// Ranks to start on this host.
  int nproc = 0;
  /// Address the store binds to and the ranks connect to.
  std::string store_host = "127.0.0.1";
  /// Port of the store; 0: the system picks a free one.
  uint16_t store_port = 0;
  /// Names the run in the store; empty: a fresh random id.
  std::string run_id;
  /// How long ranks get to exit after SIGTERM before SIGKILL.
  std::chrono::milliseconds grace = std::chrono::seconds{5};
  /// The program and its arguments.
  std::vector<std::string> command;
};

/// The usage text, printed for --help and after a command line error.
std::string usage();

/// Parses argv. Returns an error text (naming the bad option) or an empty
/// string; sets `help` for --help.
std::string parse(int argc, char** argv, launch_options& out, bool& help);

} // namespace caf_collective::launcher
