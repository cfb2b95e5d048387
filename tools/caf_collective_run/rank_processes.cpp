#include "rank_processes.hpp"

#include "output_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace caf_collective::launcher {

namespace {

using clock = std::chrono::steady_clock;

// The soft limit on open files ranks start with: the launcher's own
// before raise_open_file_limit.
rlim_t rank_open_file_limit = RLIM_INFINITY;

// Signal handlers only write the signal number here; the loop reads it.
int signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  auto saved = errno;
  auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] auto n = ::write(signal_pipe[1], &byte, 1);
  errno = saved;
}

void note(const std::string& text) {
  queue_output(2, "[caf_collective_run] " + text + "\n");
}

// How long an unfinished line waits for its newline before it is printed
// as it stands (so a prompt or a progress bar shows), and how much of one
// is held at most.
constexpr auto unfinished_line_wait = std::chrono::milliseconds{200};
constexpr size_t longest_held_line = 64 * 1024;

// How much output may wait for the launcher's own reader before it stops
// reading its ranks' output.
constexpr size_t max_output_backlog = 16 * 1024 * 1024;

// Prints every complete line of `stream.pending` with the rank's prefix,
// and the unfinished rest too (ended with a newline of its own) when
// `flush` says so or it grew too long.
void emit_lines(int rank, rank_output& stream, int to_fd, bool flush) {
  auto& pending = stream.pending;
  std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::string out;
  size_t start = 0;
  // A line too long to hold goes out in parts of longest_held_line, also
  // one whose end came in the same read as its last 64 KiB or more.
  auto print_parts_until = [&](size_t end) {
    while (end - start >= longest_held_line) {
      out += prefix;
      out.append(pending, start, longest_held_line);
      out += '\n';
      start += longest_held_line;
    }
  };
  for (;;) {
    auto nl = pending.find('\n', start);
    if (nl == std::string::npos) break;
    // A complete line of exactly longest_held_line stays whole.
    if (nl > start) print_parts_until(nl - 1);
    out += prefix;
    out.append(pending, start, nl - start + 1);
    start = nl + 1;
  }
  print_parts_until(pending.size());
  pending.erase(0, start);
  if (!pending.empty() && flush) {
    out += prefix + pending + "\n";
    pending.clear();
  }
  if (pending.empty())
    stream.unfinished_due = clock::time_point::max();
  else if (start > 0 || stream.unfinished_due == clock::time_point::max())
    stream.unfinished_due = clock::now() + unfinished_line_wait; // a new one
  // One write per batch of lines: lines of different ranks never mix.
  queue_output(to_fd, std::move(out));
}

// Reads what is available on the stream; closes it at end of stream.
void drain(int rank, rank_output& stream, int to_fd) {
  char buf[65536];
  auto n = ::read(stream.fd, buf, sizeof(buf));
  if (n > 0) {
    stream.pending.append(buf, static_cast<size_t>(n));
    emit_lines(rank, stream, to_fd, false);
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  emit_lines(rank, stream, to_fd, true);
  ::close(stream.fd);
  stream.fd = -1;
}

// When the next unfinished line is due to be printed as it stands.
clock::time_point next_unfinished_due(const std::vector<rank_process>& ranks) {
  auto due = clock::time_point::max();
  for (auto& r : ranks)
    due = std::min({due, r.out.unfinished_due, r.err.unfinished_due});
  return due;
}

void print_unfinished_lines_due(std::vector<rank_process>& ranks) {
  auto now = clock::now();
  for (auto& r : ranks) {
    if (now >= r.out.unfinished_due) emit_lines(r.rank, r.out, 1, true);
    if (now >= r.err.unfinished_due) emit_lines(r.rank, r.err, 2, true);
  }
}

int status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

// From the raw wait status: a rank that exits with 130 exited, it was not
// killed by SIGINT, though both give the launcher's exit status 130.
std::string describe(int wait_status) {
  if (WIFSIGNALED(wait_status))
    return "was killed by signal " + std::to_string(WTERMSIG(wait_status)) +
           " (" + ::strsignal(WTERMSIG(wait_status)) + ")";
  return "exited with status " + std::to_string(status_of(wait_status));
}

// Whether processes other than `leader` are in process group `group`
// (read from /proc: the leader's zombie keeps the group alive by itself).
bool others_in_group(pid_t group, pid_t leader) {
  DIR* procs = ::opendir("/proc");
  if (procs == nullptr) return false;
  bool found = false;
  while (auto* entry = ::readdir(procs)) {
    char* end = nullptr;
    auto pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == leader) continue;
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    std::FILE* stat = std::fopen(path, "r");
    if (stat == nullptr) continue;
    char line[1024] = {};
    auto got = std::fgets(line, sizeof(line), stat);
    std::fclose(stat);
    // pid (comm) state ppid pgrp ...: comm may hold anything but ')'.
    const char* close = got != nullptr ? std::strrchr(line, ')') : nullptr;
    char state = 0;
    long parent = 0;
    long pgrp = 0;
    if (close != nullptr &&
        std::sscanf(close + 1, " %c %ld %ld", &state, &parent, &pgrp) == 3 &&
        pgrp == group) {
      found = true;
      break;
    }
  }
  ::closedir(procs);
  return found;
}

// Signals the rank's whole process group: programs the rank started go too.
void signal_rank(const rank_process& r, int sig) {
  if (r.running) ::kill(-r.pid, sig);
}

} // namespace

int rank_trampoline(int argc, char** argv) {
  // argv: caf_collective_run --rank-of <launcher pid> <open-file soft limit>
  // <command...>
  if (argc < 5) return 2;
  // The rank gets the soft limit the launcher was started with, not the
  // one the launcher raised for itself (programs using select() rely on
  // the usual 1024).
  if (rlimit limit{}; ::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur =
      std::min<rlim_t>(std::strtoull(argv[3], nullptr, 10), limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  // Killed when the launcher dies (SIGKILL, the OOM killer): no rank runs
  // on without the store it relies on. The signal is kept across execvp.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (std::to_string(::getppid()) != argv[2]) return 1; // it died already
  ::execvp(argv[4], argv + 4);
  std::fprintf(stderr, "caf_collective_run: cannot start '%s': %s\n", argv[4],
               std::strerror(errno));
  return 127;
}

void install_signal_handlers() {
  if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  // Every signal that would end the launcher by default is caught: dying
  // of it would take the ranks down with SIGKILL (their parent-death
  // signal), with no grace, and orphan what they started.
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT,
                  SIGALRM, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF})
    ::sigaction(sig, &sa, nullptr);
  // A closed stdout (| head) must not kill the launcher mid-run.
  std::signal(SIGPIPE, SIG_IGN);
}

void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  rank_open_file_limit = limit.rlim_cur;
  if (limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit); // on failure the old limit stays
}

std::string start_rank(int rank, const std::vector<std::string>& command,
                       const std::vector<std::string>& env, rank_process& out) {
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return std::strerror(errno);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return std::strerror(errno);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Ranks run in process groups of their own, in the background of a
  // terminal: one that read the terminal would be stopped for good. They
  // read end of input instead.
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group: a terminal's Ctrl-C reaches the launcher only,
  // which forwards it once, and stopping a rank stops what it started.
  posix_spawnattr_setpgroup(&attr, 0);
  // The launcher's handlers and ignored SIGPIPE must not leak into ranks.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGPIPE})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                    POSIX_SPAWN_SETSIGDEF |
                                    POSIX_SPAWN_SETSIGMASK);
  // Through the launcher itself (rank_trampoline): the rank dies with the
  // launcher, however the launcher ends.
  std::vector<std::string> args{
    "caf_collective_run", std::string{trampoline_flag},
    std::to_string(::getpid()), std::to_string(rank_open_file_limit)};
  args.insert(args.end(), command.begin(), command.end());
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> vars = env;
  std::vector<char*> envp;
  for (auto& v : vars)
    envp.push_back(v.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv.data(),
                         envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return "cannot start '" + command[0] + "': " + std::strerror(rc);
  }
  out.rank = rank;
  out.pid = pid;
  out.out.fd = out_pipe[0];
  out.err.fd = err_pipe[0];
  out.running = true;
  return {};
}

void kill_all(std::vector<rank_process>& ranks) {
  for (auto& r : ranks)
    if (r.running) {
      signal_rank(r, SIGKILL);
      int ws = 0;
      ::waitpid(r.pid, &ws, 0);
      r.running = false;
    }
}

int supervise(std::vector<rank_process>& ranks,
              std::chrono::milliseconds grace) {
  int first_failed = -1;
  int stop_signal = 0;
  bool stopping = false;
  auto kill_at = clock::time_point::max();
  auto stop_all = [&](int sig) {
    for (auto& r : ranks)
      signal_rank(r, sig);
    if (!stopping) kill_at = clock::now() + grace;
    stopping = true;
  };
  auto reap = [&] {
    for (;;) {
      // Seen exited but not reaped yet: its pid, its process group's id,
      // cannot go to another process until the waitpid below, so what a
      // rank left behind in its group (a program it started in the
      // background, a wrapper script's child) is stopped here and nothing
      // else: nothing of the launch lives on unnoticed, as under mpirun.
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
          info.si_pid == 0)
        return;
      pid_t pid = info.si_pid;
      auto r =
        std::find_if(ranks.begin(), ranks.end(),
                     [&](const rank_process& x) { return x.pid == pid; });
      if (r != ranks.end() && others_in_group(pid, pid)) {
        note("rank " + std::to_string(r->rank) +
             " left processes behind; stopping them (SIGKILL)");
        ::kill(-pid, SIGKILL);
      }
      int ws = 0;
      ::waitpid(pid, &ws, 0);
      if (r == ranks.end()) continue;
      r->running = false;
      r->status = status_of(ws);
      if (r->status != 0 && first_failed < 0 && stop_signal == 0) {
        first_failed = r->rank;
        note("rank " + std::to_string(r->rank) + " " + describe(ws) +
             "; stopping the other ranks");
        stop_all(SIGTERM);
      }
    }
  };
  // Once every rank exited, programs they left behind may still hold their
  // pipes open: give the output a moment, then stop reading.
  auto drain_until = clock::time_point::max();
  for (;;) {
    bool any_running = std::any_of(ranks.begin(), ranks.end(),
                                   [](auto& r) { return r.running; });
    bool any_open = std::any_of(ranks.begin(), ranks.end(), [](auto& r) {
      return r.out.fd >= 0 || r.err.fd >= 0;
    });
    if (!any_running && drain_until == clock::time_point::max())
      drain_until = clock::now() + std::chrono::seconds{1};
    if (!any_running && (!any_open || clock::now() >= drain_until)) break;
    // While our own reader lags far behind, the ranks' output waits in
    // their pipes (they wait to write, as under a blocking launcher); the
    // loop still forwards signals, reaps ranks and keeps the grace period.
    bool backed_up = output_backlog() > max_output_backlog;
    short rank_events = backed_up ? 0 : POLLIN;
    std::vector<pollfd> fds{{signal_pipe[0], POLLIN, 0}};
    std::vector<std::pair<rank_process*, bool>> owners{{nullptr, false}};
    for (auto& r : ranks) {
      if (r.out.fd >= 0) {
        fds.push_back({r.out.fd, rank_events, 0});
        owners.emplace_back(&r, true);
      }
      if (r.err.fd >= 0) {
        fds.push_back({r.err.fd, rank_events, 0});
        owners.emplace_back(&r, false);
      }
    }
    auto wake_at = std::min({kill_at, drain_until, next_unfinished_due(ranks)});
    if (backed_up) // look again for room soon
      wake_at = std::min(wake_at, clock::now() + std::chrono::milliseconds{50});
    int timeout_ms = -1;
    if (wake_at != clock::time_point::max())
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(wake_at -
                                                              clock::now())
            .count() +
          1,
        0, 60000));
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if ((fds[0].revents & POLLIN) != 0) {
      unsigned char sig = 0;
      while (::read(signal_pipe[0], &sig, 1) == 1) {
        if (sig == SIGCHLD) continue;
        std::string got = std::string{"got "} + ::strsignal(sig);
        if (sig == SIGUSR1 || sig == SIGUSR2) {
          // A message to the ranks (Slurm's --signal=USR1@T asks a job
          // to checkpoint before its time is up), not a stop.
          note(got + "; forwarding it to every rank");
          for (auto& r : ranks)
            signal_rank(r, sig);
          continue;
        }
        // SIGINT, SIGTERM and SIGHUP go to the ranks as they came; other
        // signals that would end the launcher stop the ranks with SIGTERM.
        bool as_is = sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
        if (stop_signal == 0) {
          stop_signal = sig;
          note(got + (as_is ? "; forwarding it to every rank"
                            : "; stopping every rank with SIGTERM"));
          stop_all(as_is ? sig : SIGTERM);
        } else if (sig == SIGINT) {
          // A second Ctrl-C: do not wait for the grace period.
          note(got + " while stopping: SIGKILL to every rank");
          stop_all(SIGKILL);
        } else {
          // A repeated SIGTERM (Slurm signals the tasks and srun forwards
          // its own) must not cut short the ranks' grace period: they may
          // be writing a checkpoint.
          note(got + " while stopping; the ranks keep their grace period "
                     "(a second Ctrl-C kills them at once)");
        }
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [r, is_out] = owners[i];
      if (is_out)
        drain(r->rank, r->out, 1);
      else
        drain(r->rank, r->err, 2);
    }
    print_unfinished_lines_due(ranks);
    reap();
    if (stopping && clock::now() >= kill_at) {
      for (auto& r : ranks)
        if (r.running) {
          note("rank " + std::to_string(r.rank) +
               " did not stop within the grace period: SIGKILL");
          signal_rank(r, SIGKILL);
        }
      kill_at = clock::time_point::max();
    }
  }
  for (auto& r : ranks) {
    if (r.out.fd >= 0) {
      emit_lines(r.rank, r.out, 1, true);
      ::close(r.out.fd);
    }
    if (r.err.fd >= 0) {
      emit_lines(r.rank, r.err, 2, true);
      ::close(r.err.fd);
    }
  }
  flush_output();
  if (first_failed >= 0) return ranks[first_failed].status;
  if (stop_signal != 0) return 128 + stop_signal;
  return 0;
}

} // namespace caf_collective::launcher
