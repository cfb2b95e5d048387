// caf_collective_run: real processes under the real launcher, its output
// and exit status read as a user would.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process_support.hpp"

using namespace std::chrono_literals;

namespace {

const std::string launcher = CAF_COLLECTIVE_LAUNCHER;
const std::string rank_program = CAF_COLLECTIVE_LAUNCHED_RANK;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in{path};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The launcher with `args`, its stdout and stderr in files of `dir`, its
/// stdin the test's or `stdin_fd`.
pid_t start_launcher(const test::temp_dir& dir, std::vector<std::string> args,
                     int stdin_fd = -1, int stdout_fd = -1) {
  args.insert(args.begin(), launcher);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  auto out = (dir.path / "stdout").string();
  auto err = (dir.path / "stderr").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_fd >= 0)
    posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
  else
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (stdin_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, launcher.c_str(), &actions, nullptr, argv.data(),
                       environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

/// Pids the ranks wrote to `dir`, waiting until all `n` are there.
std::vector<pid_t> rank_pids(const test::temp_dir& dir, int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 3000; ++i) {
    pids.clear();
    for (int r = 0; r < n; ++r) {
      auto text = read_file(dir.path / ("pid." + std::to_string(r)));
      if (!text.empty()) pids.push_back(std::stoi(text));
    }
    if (int(pids.size()) == n) return pids;
    std::this_thread::sleep_for(10ms);
  }
  FAIL("the ranks never wrote their pids");
  return pids;
}

bool gone(pid_t pid) {
  return ::kill(pid, 0) == -1 && errno == ESRCH;
}

/// Gone, or dead and not reaped yet (a rank whose launcher died belongs to
/// whoever adopts orphans here).
bool dead(pid_t pid) {
  if (gone(pid)) return true;
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto end = stat.rfind(')');
  return end == std::string::npos ||
         (end + 2 < stat.size() && stat[end + 2] == 'Z');
}

} // namespace

TEST_CASE("4 ranks run every op through the launcher, each line prefixed "
          "with its rank") {
  test::temp_dir dir;
  auto pid = start_launcher(dir, {"-n", "4", rank_program, "every-op"});
  CHECK(test::wait_process(pid, 90s) == 0);
  auto out = read_file(dir.path / "stdout");
  INFO("stdout: " << out << "\nstderr: " << read_file(dir.path / "stderr"));
  for (int r = 0; r < 4; ++r) {
    auto rank = std::to_string(r);
    CHECK(
      contains(out, "[rank " + rank + "] rank " + rank + ": every op ok\n"));
  }
  std::istringstream lines{out};
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count)
    CHECK(line.rfind("[rank ", 0) == 0);
  CHECK(count == 4);
}

TEST_CASE("when one rank fails the launcher stops the others and exits with "
          "its status") {
  test::temp_dir dir;
  auto pid = start_launcher(dir, {"-n", "4", "--grace-ms", "2000", rank_program,
                                  "fail", "2", "7", dir.path.string()});
  auto pids = rank_pids(dir, 4);
  CHECK(test::wait_process(pid, 60s) == 7);
  // The other ranks would wait two minutes: they were stopped.
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(gone(pids[r]));
  }
  CHECK(contains(read_file(dir.path / "stdout"), "[rank 2] rank 2 fails now"));
  CHECK(contains(read_file(dir.path / "stderr"),
                 "rank 2 exited with status 7; stopping the other ranks"));
}

TEST_CASE("a rank that exits with a status above 128 is reported as having "
          "exited - not as killed by a signal") {
  test::temp_dir dir;
  auto pid = start_launcher(dir, {"-n", "2", "--grace-ms", "2000", rank_program,
                                  "fail", "1", "130", dir.path.string()});
  CHECK(test::wait_process(pid, 60s) == 130);
  auto text = read_file(dir.path / "stderr");
  INFO("stderr: " << text);
  CHECK(contains(text, "rank 1 exited with status 130"));
  CHECK_FALSE(contains(text, "killed"));
}

TEST_CASE("ranks die with a launcher that was killed") {
  test::temp_dir dir;
  // Rank 9 does not exist: every rank sleeps.
  auto pid = start_launcher(
    dir, {"-n", "2", rank_program, "fail", "9", "1", dir.path.string()});
  auto pids = rank_pids(dir, 2);
  ::kill(pid, SIGKILL);
  test::wait_process(pid, 10s);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    bool died = false;
    for (int i = 0; i < 500 && !died; ++i, std::this_thread::sleep_for(10ms))
      died = dead(pids[r]);
    CHECK(died);
    if (!died) ::kill(pids[r], SIGKILL);
  }
}

TEST_CASE("a process a rank left behind ends with the launch") {
  // Before: a rank's background child lived on after the launcher exited.
  test::temp_dir dir;
  auto pid_file = (dir.path / "pid.0").string();
  auto pid = start_launcher(
    dir, {"-n", "1", "/bin/sh", "-c",
          "sleep 300 > /dev/null 2>&1 & echo $! > " + pid_file + "; exit 0"});
  auto left = rank_pids(dir, 1);
  CHECK(test::wait_process(pid, 30s) == 0);
  bool died = false;
  for (int i = 0; i < 500 && !died; ++i, std::this_thread::sleep_for(10ms))
    died = dead(left[0]);
  CHECK(died);
  if (!died) ::kill(left[0], SIGKILL);
  CHECK(contains(read_file(dir.path / "stderr"), "left processes behind"));
}

TEST_CASE("a rank that reads its standard input reads end of input - it "
          "never waits on the launcher's") {
  test::temp_dir dir;
  int held_open[2];
  REQUIRE(::pipe(held_open) == 0);
  auto pid = start_launcher(
    dir, {"-n", "1", "/bin/sh", "-c", "read x; echo read ended with $?"},
    held_open[0]);
  ::close(held_open[0]);
  auto code = test::wait_process(pid, 30s);
  ::close(held_open[1]);
  CHECK(code == 0);
  CHECK(contains(read_file(dir.path / "stdout"), "[rank 0] read ended with 1"));
}

TEST_CASE("a rank killed by a signal stops the launch with 128 + the "
          "signal") {
  test::temp_dir dir;
  auto pid = start_launcher(dir, {"-n", "3", "--grace-ms", "2000", rank_program,
                                  "die", "1", dir.path.string()});
  auto pids = rank_pids(dir, 3);
  CHECK(test::wait_process(pid, 60s) == 128 + SIGKILL);
  for (int r = 0; r < 3; ++r)
    CHECK(gone(pids[r]));
  CHECK(
    contains(read_file(dir.path / "stderr"), "rank 1 was killed by signal 9"));
}

TEST_CASE("an unfinished line - a prompt - is printed while the rank still "
          "runs") {
  test::temp_dir dir;
  auto go = (dir.path / "go").string();
  // The rank prints a prompt without a newline, then waits (30 s at most)
  // for the test to have seen it.
  auto pid = start_launcher(
    dir, {"-n", "1", "/bin/sh", "-c",
          "printf 'continue? '; i=0; while [ ! -e '" + go +
            "' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
            "echo yes"});
  bool seen = false;
  for (int i = 0; i < 400 && !seen; ++i, std::this_thread::sleep_for(50ms))
    seen = contains(read_file(dir.path / "stdout"), "[rank 0] continue? ");
  std::ofstream{go} << "go";
  CHECK(test::wait_process(pid, 60s) == 0);
  auto out = read_file(dir.path / "stdout");
  INFO("stdout: " << out);
  CHECK_MESSAGE(seen, "the prompt was held until the rank went on");
  CHECK(out == "[rank 0] continue? \n[rank 0] yes\n");
}

TEST_CASE("a line too long to hold is printed in parts, none of it lost") {
  test::temp_dir dir;
  auto pid = start_launcher(
    dir, {"-n", "1", "/bin/sh", "-c",
          "head -c 300000 /dev/zero | tr '\\0' x; echo; echo after"});
  CHECK(test::wait_process(pid, 60s) == 0);
  auto out = read_file(dir.path / "stdout");
  std::istringstream lines{out};
  size_t xs = 0;
  int parts = 0;
  std::string last;
  for (std::string line; std::getline(lines, line); last = line) {
    REQUIRE(line.rfind("[rank 0] ", 0) == 0);
    auto body = line.substr(9);
    if (body == "after") continue;
    CHECK(body.find_first_not_of('x') == std::string::npos);
    CHECK(body.size() <= 64 * 1024);
    xs += body.size();
    ++parts;
  }
  CHECK(xs == 300000);
  CHECK(parts > 1);
  CHECK(last == "[rank 0] after");
}

namespace {

void check_forwarded(int sig) {
  test::temp_dir dir;
  auto pid =
    start_launcher(dir, {"-n", "3", rank_program, "trap", dir.path.string()});
  auto pids = rank_pids(dir, 3);
  REQUIRE(::kill(pid, sig) == 0);
  // The launcher reports the signal that stopped the run: 128 + signal.
  CHECK(test::wait_process(pid, 60s) == 128 + sig);
  auto out = read_file(dir.path / "stdout");
  for (int r = 0; r < 3; ++r) {
    auto rank = std::to_string(r);
    CHECK(contains(out, "[rank " + rank + "] rank " + rank + " got signal " +
                          std::to_string(sig)));
    CHECK(gone(pids[r]));
  }
}

/// The launcher with two ranks that checkpoint on SIGTERM (launched_rank's
/// "checkpoint" mode) and a grace period long enough for them; returns
/// once both are up, with the launcher's pid and theirs.
std::pair<pid_t, std::vector<pid_t>>
start_checkpointing(const test::temp_dir& dir) {
  auto pid =
    start_launcher(dir, {"-n", "2", "--grace-ms", "20000", rank_program,
                         "checkpoint", dir.path.string()});
  return {pid, rank_pids(dir, 2)};
}

/// Checks that both ranks of start_checkpointing wrote their checkpoint.
void check_checkpoints_written(const test::temp_dir& dir) {
  auto out = read_file(dir.path / "stdout");
  INFO(out);
  for (int r = 0; r < 2; ++r)
    CHECK(contains(out, "[rank " + std::to_string(r) + "] rank " +
                          std::to_string(r) + " checkpoint written"));
}

} // namespace

TEST_CASE("SIGTERM to the launcher is forwarded to every rank") {
  check_forwarded(SIGTERM);
}

TEST_CASE("SIGINT to the launcher is forwarded to every rank") {
  check_forwarded(SIGINT);
}

TEST_CASE("a second SIGTERM keeps the ranks' grace period: they finish "
          "their checkpoint") {
  // Slurm signals a step's tasks and srun forwards its own SIGTERM too.
  // Before: any second signal sent SIGKILL to every rank at once.
  test::temp_dir dir;
  auto [pid, pids] = start_checkpointing(dir);
  REQUIRE(::kill(pid, SIGTERM) == 0);
  std::this_thread::sleep_for(10ms);
  REQUIRE(::kill(pid, SIGTERM) == 0);
  CHECK(test::wait_process(pid, 60s) == 128 + SIGTERM);
  check_checkpoints_written(dir);
  CHECK(contains(read_file(dir.path / "stderr"),
                 "while stopping; the ranks keep their grace period"));
}

TEST_CASE("SIGUSR1 is forwarded and the run goes on - SIGXCPU stops the "
          "ranks with SIGTERM instead of killing the launcher") {
  // Before: both ended the launcher at once (their default action), and
  // its ranks died of their parent-death SIGKILL.
  test::temp_dir dir;
  auto [pid, pids] = start_checkpointing(dir);
  REQUIRE(::kill(pid, SIGUSR1) == 0);
  bool told = false;
  for (int i = 0; i < 600 && !told; ++i) {
    auto out = read_file(dir.path / "stdout");
    told = contains(out, "[rank 0] rank 0 got SIGUSR1") &&
           contains(out, "[rank 1] rank 1 got SIGUSR1");
    if (!told) std::this_thread::sleep_for(50ms);
  }
  CHECK(told);
  // The launch goes on (a launcher killed by the signal stays a zombie
  // until this test reaps it: gone() alone would not tell).
  CHECK_FALSE(dead(pid));
  REQUIRE(::kill(pid, SIGXCPU) == 0);
  CHECK(test::wait_process(pid, 60s) == 128 + SIGXCPU);
  check_checkpoints_written(dir);
  for (pid_t rank : pids)
    CHECK(gone(rank));
  CHECK(contains(read_file(dir.path / "stderr"),
                 "stopping every rank with SIGTERM"));
}

TEST_CASE("a reader that stops reading the launcher's output does not stop "
          "it forwarding signals") {
  // Before: the launcher wrote its ranks' lines with blocking writes, so a
  // stalled reader (| less, a stopped terminal) held it: it forwarded no
  // SIGTERM and killed no rank until the reader read again.
  test::temp_dir dir;
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  auto pid = start_launcher(
    dir,
    {"-n", "2", "--grace-ms", "1000", "sh", "-c",
     "echo $$ > " + dir.path.string() +
       "/pid.$CAF_COLLECTIVE_RANK && exec yes flooding-the-output"},
    -1, out[1]);
  ::close(out[1]);
  auto pids = rank_pids(dir, 2);
  std::this_thread::sleep_for(500ms); // every pipe on the way is full
  REQUIRE(::kill(pid, SIGTERM) == 0);
  bool stopped = false;
  for (int i = 0; i < 200 && !stopped; ++i) {
    stopped = dead(pids[0]) && dead(pids[1]);
    if (!stopped) std::this_thread::sleep_for(50ms);
  }
  CHECK(stopped);
  // Now read: the launcher writes what it holds and exits.
  std::thread reader{[fd = out[0]] {
    char buf[65536];
    while (::read(fd, buf, sizeof(buf)) > 0) {
    }
  }};
  CHECK(test::wait_process(pid, 60s) == 128 + SIGTERM);
  reader.join();
  ::close(out[0]);
}

TEST_CASE("a program that cannot start fails the launch with 127") {
  test::temp_dir dir;
  auto pid = start_launcher(dir, {"-n", "2", "/nonexistent/program"});
  CHECK(test::wait_process(pid, 30s) == 127);
  CHECK(contains(read_file(dir.path / "stderr"),
                 "cannot start '/nonexistent/program'"));
}

TEST_CASE("a bad command line is refused naming the option") {
  test::temp_dir dir;
  auto pid = start_launcher(dir, {"-n", "zero", rank_program});
  CHECK(test::wait_process(pid, 30s) == 2);
  CHECK(contains(read_file(dir.path / "stderr"),
                 "-n 'zero' is not a rank count in 1-1024"));
}
