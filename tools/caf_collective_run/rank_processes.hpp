// The rank processes of one launch: started in process groups of their
// own, their output read through pipes and printed line by line with a
// "[rank R] " prefix (a line left unfinished for a moment, a prompt or
// progress dots, is printed as it stands), signals forwarded, and the group
// stopped when one rank fails.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace caf_collective::launcher {

/// One output stream of a rank, as the launcher reads it.
struct rank_output {
  /// The pipe's read end; -1 once closed.
  int fd = -1;
  /// Output not yet printed: the part after the last newline.
  std::string pending;
  /// When `pending`, a line still waiting for its newline, is printed as
  /// it stands (max: nothing waits).
  std::chrono::steady_clock::time_point unfinished_due =
    std::chrono::steady_clock::time_point::max();
};

struct rank_process {
  int rank = 0;
  pid_t pid = -1;
  rank_output out;
  rank_output err;
  bool running = false;
  /// Exit code, or 128 + signal number.
  int status = 0;
};

/// The launcher's first argument when it runs as a rank's trampoline.
inline constexpr std::string_view trampoline_flag = "--rank-of";

/// What the launcher binary does when started with trampoline_flag (by
/// start_rank, never by a user): arranges to be killed when the launcher
/// dies, then becomes the rank's command. Returns only on failure.
int rank_trampoline(int argc, char** argv);

/// Starts `command` (looked up in PATH) with `env` as the rank `rank`,
/// through the trampoline, with standard input from /dev/null.
/// Returns an error text, or an empty string.
std::string start_rank(int rank, const std::vector<std::string>& command,
                       const std::vector<std::string>& env, rank_process& out);

/// Installs the signal handlers supervise() relies on. Call before the
/// first start_rank, so no child exit or signal is missed.
void install_signal_handlers();

/// Raises the soft limit on open files to the hard one: each rank takes
/// two pipes here, and the store one socket per client connection (the
/// usual soft limit of 1024 ended a launch of 600 ranks).
void raise_open_file_limit();

/// Runs until every rank has exited and its output is printed. Forwards
/// SIGINT, SIGTERM and SIGHUP (a second SIGINT kills the ranks at once, a
/// repeated SIGTERM does not), forwards SIGUSR1 and SIGUSR2 without
/// stopping, stops the ranks with SIGTERM on other signals that would end
/// the launcher (install_signal_handlers); when a rank fails, sends SIGTERM to
/// the others and SIGKILL after `grace`. Returns the launcher's exit status:
/// the first failed rank's status, else 128 + the signal that stopped the
/// launch, else 0.
int supervise(std::vector<rank_process>& ranks,
              std::chrono::milliseconds grace);

/// Stops ranks already started (SIGKILL) and reaps them: for a launch that
/// could not start every rank.
void kill_all(std::vector<rank_process>& ranks);

} // namespace caf_collective::launcher
