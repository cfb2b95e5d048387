// The shm backend beyond the shared correctness suites: ranks in separate
// processes (staged mode, several rounds per op), faults (a killed and a
// stopped process, abort from another thread, a rank that never joins,
// ranks that disagree), host checks, and nothing left in /dev/shm.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <latch>
#include <random>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include <sys/mman.h>

#include "backends/shm/shm_backend.hpp"
#include "fake_member.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::expect_error;
using test::expect_usable;
using test::rank_log;
using clock_type = std::chrono::steady_clock;

namespace {

pid_t spawn(const std::string& mode, int world, int rank,
            const test::temp_dir& dir, const std::string& group,
            std::vector<std::string> extra = {}) {
  std::vector<std::string> args{mode, std::to_string(world),
                                std::to_string(rank), dir.path.string(), group};
  args.insert(args.end(), extra.begin(), extra.end());
  return test::spawn_process(CAF_COLLECTIVE_SHM_RANK_PROCESS, args);
}

/// Sleeper as the last rank, survivors before it; `fault` is applied to
/// the sleeper once the survivors are inside their allreduce.
void run_fault(const std::string& group, const std::string& expected,
               const std::string& op_timeout_ms, int fault_signal) {
  test::temp_dir dir;
  constexpr int world = 3;
  std::vector<pid_t> survivors;
  for (int r = 0; r < world - 1; ++r)
    survivors.push_back(
      spawn("survivor", world, r, dir, group, {expected, op_timeout_ms}));
  auto sleeper = spawn("sleeper", world, world - 1, dir, group);
  // Formation and the barrier take well under this; then the survivors
  // wait in their allreduce for a rank that never comes.
  std::this_thread::sleep_for(1500ms);
  auto start = clock_type::now();
  kill(sleeper, fault_signal);
  for (auto pid : survivors)
    CHECK(test::wait_process(pid, std::chrono::seconds{60}) == 0);
  auto elapsed = clock_type::now() - start;
  kill(sleeper, SIGKILL);
  test::wait_process(sleeper, std::chrono::seconds{10});
  CHECK(test::shm_leftovers(group).empty());
  // The point of detecting death: far sooner than the 20 s deadline.
  if (fault_signal == SIGKILL) CHECK(elapsed < 10s);
}

} // namespace

TEST_CASE("shm: ranks in separate processes run every op, in rounds larger "
          "than one staging area") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    test::temp_dir dir;
    std::string group = "procs" + std::to_string(world);
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r)
      pids.push_back(spawn("ops", world, r, dir, group));
    for (auto pid : pids)
      CHECK(test::wait_process(pid, std::chrono::seconds{120}) == 0);
    CHECK(test::shm_leftovers(group).empty());
  }
}

TEST_CASE("shm: a killed process makes every survivor fail with peer_lost "
          "naming it, long before the deadline, and the survivors form again") {
  run_fault("killed", "peer_lost", "20000", SIGKILL);
}

TEST_CASE("shm: a stopped process makes every survivor time out naming it, and "
          "the survivors form again") {
  run_fault("stopped", "timeout", "1500", SIGSTOP);
}

TEST_CASE("shm: a survivor that gave up and left is not blamed: a rank "
          "waiting for it and for the killed rank names the killed one") {
  // Rank 1 loses rank 2 (in a recv), destroys its group (which marks it
  // aborted because of peer_lost) and exits. Rank 0, stopped meanwhile,
  // waits for both in an allreduce: when it goes on, both processes are
  // gone, and the one to name is rank 2, whose death started it all.
  test::temp_dir dir;
  const std::string group = "blame";
  auto witness = spawn("witness", 3, 0, dir, group, {"20000"});
  auto leaver = spawn("leaver", 3, 1, dir, group);
  auto sleeper = spawn("sleeper", 3, 2, dir, group);
  // Formation and the barrier take well under this.
  std::this_thread::sleep_for(1500ms);
  kill(witness, SIGSTOP);
  kill(sleeper, SIGKILL);
  test::wait_process(sleeper, 10s);
  CHECK(test::wait_process(leaver, 30s) == 0);
  kill(witness, SIGCONT);
  CHECK(test::wait_process(witness, 30s) == 0);
  CHECK(test::shm_leftovers(group).empty());
}

namespace {

/// Rank 2 (an arriver) enters an allreduce, rank 1 (a witness) too, while
/// rank 0 (a leaver) waits in a recv from rank 2. Once they are there,
/// rank 2 gets `fault`; rank 0 gives up on it and destroys its group, and
/// rank 1, waiting for rank 0 alone, must fail as `witness_args` expect.
/// `witness_late`: rank 1 is stopped until rank 0's process has ended, so
/// it notices rank 0's exit and its abort mark at once.
void run_arrived_fault(const std::string& group, int fault_signal,
                       std::vector<std::string> leaver_args,
                       std::vector<std::string> witness_args,
                       bool witness_late = false) {
  test::temp_dir dir;
  auto leaver = spawn("leaver", 3, 0, dir, group, std::move(leaver_args));
  auto witness = spawn("witness", 3, 1, dir, group, std::move(witness_args));
  auto arriver = spawn("arriver", 3, 2, dir, group);
  // Formation, the barrier and the arrival take well under this.
  std::this_thread::sleep_for(1000ms);
  if (witness_late) kill(witness, SIGSTOP);
  kill(arriver, fault_signal);
  CHECK(test::wait_process(leaver, 30s) == 0);
  if (witness_late) kill(witness, SIGCONT);
  CHECK(test::wait_process(witness, 30s) == 0);
  kill(arriver, SIGKILL);
  test::wait_process(arriver, 10s);
  CHECK(test::shm_leftovers(group).empty());
}

} // namespace

TEST_CASE("shm: a rank waiting only for a survivor that left because a "
          "peer died names the dead peer, not the survivor") {
  // Rank 0 loses rank 2 and marks the group aborted because of peer_lost.
  // Rank 2 had arrived, so rank 1 does not wait for it: it must still name
  // rank 2.
  run_arrived_fault("blame-arrived", SIGKILL, {}, {"20000"});
}

TEST_CASE("shm: a rank waiting only for a survivor that timed out says that "
          "survivor left, not that it was late itself") {
  // Rank 2 is stopped: rank 0's recv times out waiting for it, not for
  // rank 1's peers. Rank 0 left (timeout); rank 1 has no late ranks to name.
  run_arrived_fault("blame-timeout", SIGSTOP, {"timeout", "1500"},
                    {"20000", "rank 0 left the group (timeout)"});
}

TEST_CASE("shm: a survivor that left and then exited is reported as having "
          "left, not as dead, by a rank that notices only afterwards") {
  // As above, but rank 1 runs again only once rank 0's process has ended:
  // rank 0 left word and its abort mark before it exited.
  run_arrived_fault("left-exited", SIGSTOP, {"timeout", "1500"},
                    {"20000", "rank 0 left the group (timeout)"}, true);
}

TEST_CASE("shm: abort from another thread wakes the waiting rank at once "
          "and fails its peer's next op") {
  auto store = col::make_in_process_store();
  std::latch aborted{2};
  clock_type::duration elapsed{};
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "shm", "abort-shm",
                               test::group_options(store, 20s));
    auto g = col::get_group("abort-shm");
    if (rank == 0) {
      std::thread aborter{[g] {
        std::this_thread::sleep_for(200ms);
        g->abort("the test aborts");
      }};
      std::vector<float> x(16, 1.0f);
      auto start = clock_type::now();
      auto err = g->allreduce(col::view_of(x), col::view_of(x)).wait();
      elapsed = clock_type::now() - start;
      aborter.join();
      log.expect(col::code_of(err) == col::errc::aborted,
                 "waiting rank: " + col::render(err));
      aborted.arrive_and_wait();
    } else {
      aborted.arrive_and_wait();
      std::vector<float> x(16, 1.0f);
      auto err = g->allreduce(col::view_of(x), col::view_of(x)).wait();
      log.expect(col::code_of(err) == col::errc::peer_lost &&
                   col::render(err).find("rank 0") != std::string::npos,
                 "peer of the aborted rank: " + col::render(err));
    }
  });
  test::check_ranks(results);
  CHECK(elapsed < 5s);
}

TEST_CASE("shm: a rank that timed out in one process leaves - a peer that "
          "arrives after its buffers were unmapped fails and reads nothing") {
  // 4 MiB: the direct path, where peers read each other's buffers in place.
  constexpr size_t count = size_t{1} << 20;
  constexpr size_t bytes = count * sizeof(float);
  auto store = col::make_in_process_store();
  std::latch left{2};
  std::latch done{2}; // rank 0's group lives until rank 1's op ended
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "shm", "left-early",
                               test::group_options(store, 20s));
    auto g = col::get_group("left-early");
    if (rank == 0) {
      // Mapped apart, so that a read after the munmap faults.
      auto* in =
        static_cast<float*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      auto* out =
        static_cast<float*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      std::fill(in, in + count, 1.0f);
      col::allreduce_options opts;
      opts.timeout = 200ms;
      auto err =
        g->allreduce(col::tensor_view{in, col::dtype::float32, count},
                     col::tensor_view{out, col::dtype::float32, count}, opts)
          .wait();
      log.expect(col::code_of(err) == col::errc::timeout,
                 "rank 0: " + col::render(err));
      ::munmap(in, bytes);
      ::munmap(out, bytes);
      left.arrive_and_wait();
      done.arrive_and_wait();
    } else {
      left.arrive_and_wait();
      std::vector<float> x(count, 2.0f);
      auto y = x;
      auto err = g->allreduce(col::view_of(x), col::view_of(y)).wait();
      log.expect(col::code_of(err) == col::errc::peer_lost &&
                   col::render(err).find("rank 0 left the group (timeout)") !=
                     std::string::npos,
                 "the late rank: " + col::render(err));
      done.arrive_and_wait();
    }
  });
  test::check_ranks(results);
}

TEST_CASE("shm: a rank that times out while its peer still reads its buffer "
          "waits for that read - the peer never returns overwritten data") {
  // Rank 0's input is the first block of its output, so it copies nothing
  // and reaches the op's last step at once, where it times out while rank 1
  // still copies its 64 MiB. Once its op returned, rank 0 overwrites the
  // buffer, as a caller reusing it would.
  constexpr size_t big = size_t{16} << 20; // float32 elements
  auto store = col::make_in_process_store();
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    col::init_collective_group(2, rank, "shm", "read-on",
                               test::group_options(store, 20s));
    auto g = col::get_group("read-on");
    col::allgatherv_options opts;
    opts.counts = {big, 1};
    opts.timeout = rank == 0 ? 1ms : 20000ms;
    std::vector<float> out(big + 1, -1.0f);
    std::vector<float> one(1, 2.0f);
    if (rank == 0) std::fill(out.begin(), out.begin() + big, 1.0f);
    auto in = rank == 0 ? col::tensor_view{out.data(), col::dtype::float32, big}
                        : col::view_of(one);
    col::barrier("read-on");
    auto err = g->allgatherv(in, col::view_of(out), opts).wait();
    if (rank == 0) {
      log.expect(col::code_of(err) == col::errc::timeout,
                 "rank 0: " + col::render(err));
      std::memset(out.data(), 0, big * sizeof(float));
      return;
    }
    if (err) return; // failing is right: rank 0 left mid-op
    auto wrong = std::count_if(out.begin(), out.begin() + big,
                               [](float v) { return v != 1.0f; });
    log.expect(wrong == 0, "rank 1 succeeded with " + std::to_string(wrong) +
                             " elements of rank 0 overwritten");
  });
  test::check_ranks(results);
}

TEST_CASE("shm: a rank that times out while a stopped process reads its "
          "buffer waits for that reader once - its 5 s bound, not twice") {
  // Rank 1, a process of its own, stops (SIGSTOP) inside its reading mark
  // while it copies rank 0's buffer in place (single copy). Rank 0's op
  // times out after 1 s and waits at most 5 s for a reader in another
  // process. Before: the failing op's abort waited those 5 s, and then the
  // op waited 5 s more (1 + 5 + 5 s in all).
  test::temp_dir dir;
  const std::string group = "frozenreader";
  auto reader = spawn("stop-reading", 2, 1, dir, group);
  col::init_options opts;
  opts.store = col::make_file_store((dir.path / group).string());
  opts.timeout = 20s;
  col::init_collective_group(2, 0, "shm", group, opts);
  std::vector<float> mine(size_t{1} << 20, 0.0f); // 4 MiB: single copy
  std::vector<float> all(mine.size() * 2);
  col::allgather_options short_op;
  short_op.timeout = 1s;
  auto start = clock_type::now();
  caf::error err;
  try {
    col::allgather(col::view_of(mine), col::view_of(all), group, short_op);
  } catch (const col::collective_error& e) {
    err = e.error();
  }
  auto took = clock_type::now() - start;
  bool stopped_reading = std::filesystem::exists(dir.path / "stopped-reading");
  kill(reader, SIGKILL);
  test::wait_process(reader, std::chrono::seconds{10});
  col::destroy_collective_group(group);
  INFO(col::render(err));
  REQUIRE(stopped_reading); // else nobody read in place: nothing was shown
  CHECK(col::code_of(err) == col::errc::timeout);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(took);
  INFO("the op took " << ms.count() << " ms");
  CHECK(ms >= 5s); // it waited for the stopped reader
  CHECK(ms < 9s);
  CHECK(test::shm_leftovers(group).empty());
}

TEST_CASE("shm: a rank that never joins makes formation time out naming it") {
  auto store = col::make_in_process_store();
  auto results = test::run_threads(2, [&](int rank, rank_log& log) {
    expect_error(log, "init", col::errc::timeout, {"never-joins", "rank 2"},
                 [&] {
                   col::init_collective_group(3, rank, "shm", "never-joins",
                                              test::group_options(store, 1s));
                 });
  });
  test::check_ranks(results);
  CHECK(test::shm_leftovers("never").empty());
}

TEST_CASE("shm: a formation whose creator was killed fails on the others "
          "and leaves nothing in /dev/shm") {
  // Rank 2 joins the formation and publishes its host, as every rank does
  // before rank 0 creates the segment, and never attaches. Rank 0 creates
  // it and waits with rank 1 for rank 2; rank 0 is killed meanwhile. Only
  // rank 1 can remove the segment's name now.
  test::temp_dir dir;
  const std::string group = "killedmaker"; // shm_leftovers finds it verbatim
  auto joining = test::join_as_fake(
    col::make_file_store((dir.path / group).string()), group, 2, 3, "shm");
  auto creator = spawn("sleeper", 3, 0, dir, group);
  auto other = spawn("unformed", 3, 1, dir, group, {"3000"});
  auto host = col::detail::shm::host_identity();
  REQUIRE_FALSE(col::make_prefix_store("shm/" + group, joining.get())
                  ->set("host/2", {host.begin(), host.end()}));
  std::this_thread::sleep_for(1000ms);
  kill(creator, SIGKILL);
  test::wait_process(creator, std::chrono::seconds{10});
  CHECK(test::wait_process(other, std::chrono::seconds{60}) == 0);
  CHECK(test::shm_leftovers(group).empty());
}

namespace {

// The creator's formation deadline (wall-clock ns) in the header of the
// segment file `path` once the creator wrote it (its magic comes last), or
// 0 while it has not.
int64_t attach_by_of(const std::string& path) {
  uint64_t head[2] = {0, 0}; // magic, attach_by_ns
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  auto got = pread(fd, head, sizeof(head), 0);
  close(fd);
  return got == static_cast<ssize_t>(sizeof(head)) && head[0] != 0
           ? static_cast<int64_t>(head[1])
           : 0;
}

} // namespace

TEST_CASE("shm: a segment whose creator was killed before any rank attached "
          "is removed by a later formation on the host") {
  // Rank 1 publishes its host and never attaches; rank 0 creates the
  // segment and is killed while it waits. Nobody else knows the segment's
  // name. Before: it stayed in /dev/shm until the next reboot.
  test::temp_dir dir;
  // shm_leftovers finds it by prefix: no other test's group name may start
  // like it or be the start of it (a leftover here would fail "killed").
  // Fresh per run.
  const std::string group =
    "orphanseg" + std::to_string(std::random_device{}() % 100000000);
  auto joining = test::join_as_fake(
    col::make_file_store((dir.path / group).string()), group, 1, 2, "shm");
  // Formation timeout 2 s: its segment is stale 2 s (the sweep's slack)
  // after that.
  auto creator = spawn("unformed", 2, 0, dir, group, {"2000"});
  auto host = col::detail::shm::host_identity();
  REQUIRE_FALSE(col::make_prefix_store("shm/" + group, joining.get())
                  ->set("host/1", {host.begin(), host.end()}));
  int64_t attach_by = 0;
  for (int tries = 0; tries < 2000 && attach_by == 0; ++tries) {
    auto names = test::shm_leftovers(group);
    if (!names.empty()) attach_by = attach_by_of(names.front());
    if (attach_by == 0) std::this_thread::sleep_for(1ms);
  }
  kill(creator, SIGKILL);
  test::wait_process(creator, std::chrono::seconds{10});
  REQUIRE_MESSAGE(attach_by != 0, "the creator never wrote its segment");
  REQUIRE(!test::shm_leftovers(group).empty());
  // Past its deadline and the sweep's slack, any shm formation on this
  // host removes it.
  auto stale_at = std::chrono::system_clock::time_point{
    std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::nanoseconds{attach_by})};
  std::this_thread::sleep_until(stale_at + 2500ms);
  test::run_shm_threads(1, "sweeper", [](int, rank_log&) {});
  CHECK(test::shm_leftovers(group).empty());
}

TEST_CASE("shm: ranks that disagree fail with mismatch naming them, and the "
          "group stays usable") {
  test::run_shm_threads(3, "disagree", [](int rank, rank_log& log) {
    auto type = rank == 2 ? col::dtype::int32 : col::dtype::float32;
    auto x = test::make_tensor(type, 8);
    expect_error(log, "allreduce", col::errc::mismatch,
                 {"ranks [0, 1] called allreduce (sum) of 8 float32",
                  "ranks [2] called allreduce (sum) of 8 int32"},
                 [&] { col::allreduce(x, "disagree"); });
    auto y = test::make_tensor(col::dtype::float32, 8);
    col::broadcast_options bopts;
    bopts.root = rank == 0 ? 1 : 0;
    expect_error(log, "broadcast", col::errc::mismatch, {"with root 1"},
                 [&] { col::broadcast(y, y, "disagree", bopts); });
    auto z = test::make_tensor(col::dtype::float32, rank == 1 ? 4 : 8);
    expect_error(log, "barrier vs allreduce", col::errc::mismatch,
                 {"barrier", "allreduce"}, [&] {
                   if (rank == 0)
                     col::barrier("disagree");
                   else
                     col::allreduce(z, "disagree");
                 });
    expect_usable(log, "disagree", 3, rank);
  });
}

TEST_CASE("shm: a recv with another tag fails with mismatch and the message "
          "stays for the matching recv") {
  test::run_shm_threads(2, "tags", [](int rank, rank_log& log) {
    std::vector<int32_t> buf(1000, rank == 0 ? 5 : -1);
    if (rank == 0) {
      col::send_options opts;
      opts.tag = 7;
      col::send(col::view_of(buf), 1, "tags", opts);
      return;
    }
    col::recv_options wrong;
    wrong.tag = 8;
    expect_error(log, "recv tag 8", col::errc::mismatch, {"tag 7", "tag 8"},
                 [&] { col::recv(col::view_of(buf), 0, "tags", wrong); });
    log.expect(buf[0] == -1, "the mismatched recv wrote data");
    col::recv_options right;
    right.tag = 7;
    col::recv(col::view_of(buf), 0, "tags", right);
    log.expect(buf[0] == 5 && buf[999] == 5, "the matching recv");
  });
}

TEST_CASE("shm: ranks on another host are refused by name at formation") {
  auto store = col::make_in_process_store();
  // Rank 1 "runs" elsewhere: it joins the formation and publishes an
  // identity from another boot of another machine.
  auto joining = test::join_as_fake(store, "elsewhere", 1, 2, "shm");
  std::atomic<bool> published{false};
  std::thread elsewhere{[&] {
    try {
      auto prefixed = col::make_prefix_store("shm/elsewhere", joining.get());
      std::string other = "00000000-0000-0000-0000-000000000000/far-away";
      published = !prefixed->set("host/1", {other.begin(), other.end()});
    } catch (const col::collective_error&) {
      // published stays false
    }
  }};
  col::member_scope scope;
  test::check_error(col::errc::invalid_argument,
                    {"every rank on one host", "ranks [1]", "far-away"}, [&] {
                      col::init_collective_group(
                        2, 0, "shm", "elsewhere",
                        test::group_options(store, 5s));
                    });
  elsewhere.join();
  CHECK(published);
}

TEST_CASE("shm: ranks in other PID namespaces are refused at formation as "
          "on another host") {
  // Containers sharing /dev/shm, the boot id and the hostname may each run
  // a rank as pid 1. Before: both ranks took themselves for one process
  // and read each other's addresses (SIGSEGV).
  if (std::system("/usr/bin/unshare -Urpf --mount-proc true > /dev/null "
                  "2>&1") != 0) {
    MESSAGE("skipped: this machine gives no user and PID namespaces");
    return;
  }
  test::temp_dir dir;
  const std::string group = "pid-namespaces";
  std::vector<std::string> expected{"10000", "every rank on one host"};
  auto here = spawn("unformed", 2, 0, dir, group, expected);
  std::vector<std::string> args{"-Urpf",
                                "--mount-proc",
                                CAF_COLLECTIVE_SHM_RANK_PROCESS,
                                "unformed",
                                "2",
                                "1",
                                dir.path.string(),
                                group};
  args.insert(args.end(), expected.begin(), expected.end());
  auto contained = test::spawn_process("/usr/bin/unshare", args);
  CHECK(test::wait_process(here, std::chrono::seconds{60}) == 0);
  CHECK(test::wait_process(contained, std::chrono::seconds{60}) == 0);
  CHECK(test::shm_leftovers(group).empty());
}

TEST_CASE("ranks that do not share /dev/shm get gloo from auto, and shm by "
          "name is refused as on another host") {
  // A container with a /dev/shm of its own (a private tmpfs: docker
  // without --ipc=host) on the same kernel and hostname. Before: auto chose
  // shm, rank 1 could not open the segment rank 0 had made, and rank 0
  // waited until its deadline blaming rank 1.
  const std::string own_shm =
    "mount -t tmpfs tmpfs /dev/shm && exec \"$0\" \"$@\"";
  if (std::system("/usr/bin/unshare -m sh -c 'mount -t tmpfs tmpfs /dev/shm' "
                  "> /dev/null 2>&1") != 0) {
    MESSAGE("skipped: this machine gives no mount namespace with a tmpfs");
    return;
  }
  // A rank process in a mount namespace with a fresh tmpfs on /dev/shm.
  auto contained = [&](std::vector<std::string> tail) {
    std::vector<std::string> args{"-m", "sh", "-c", own_shm,
                                  CAF_COLLECTIVE_SHM_RANK_PROCESS};
    args.insert(args.end(), tail.begin(), tail.end());
    return test::spawn_process("/usr/bin/unshare", args);
  };
  {
    test::temp_dir dir;
    const std::string group = "privshmauto";
    auto here = spawn("auto", 2, 0, dir, group, {"gloo"});
    auto there =
      contained({"auto", "2", "1", dir.path.string(), group, "gloo"});
    CHECK(test::wait_process(here, std::chrono::seconds{60}) == 0);
    CHECK(test::wait_process(there, std::chrono::seconds{60}) == 0);
  }
  {
    test::temp_dir dir;
    const std::string group = "privshmnamed";
    std::vector<std::string> expected{"10000", "every rank on one host"};
    auto here = spawn("unformed", 2, 0, dir, group, expected);
    std::vector<std::string> tail{"unformed", "2", "1", dir.path.string(),
                                  group};
    tail.insert(tail.end(), expected.begin(), expected.end());
    auto there = contained(tail);
    CHECK(test::wait_process(here, std::chrono::seconds{60}) == 0);
    CHECK(test::wait_process(there, std::chrono::seconds{60}) == 0);
    CHECK(test::shm_leftovers(group).empty());
  }
}

TEST_CASE("auto picks shm when every rank runs on this host") {
  auto store = col::make_in_process_store();
  auto results = test::run_threads(3, [&](int rank, rank_log& log) {
    col::init_collective_group(3, rank, "auto", "auto-here",
                               test::group_options(store, 10s));
    log.expect(col::get_group("auto-here")->backend_in_use() == "shm",
               "auto resolved to " +
                 col::get_group("auto-here")->backend_in_use());
    expect_usable(log, "auto-here", 3, rank);
    col::destroy_collective_group("auto-here");
  });
  test::check_ranks(results);
}

TEST_CASE("shm: 8 ranks on 2 cores run 300 small allreduces and barriers") {
  test::run_shm_threads(8, "crowded", [](int rank, rank_log& log) {
    for (int i = 0; i < 300; ++i) {
      std::vector<int64_t> x{rank, i};
      col::allreduce(col::view_of(x), "crowded");
      if (x[0] != 28 || x[1] != 8 * i) {
        log.fail("round " + std::to_string(i) + " is wrong");
        return;
      }
      if (i % 50 == 0) col::barrier("crowded");
    }
  });
}

TEST_CASE("shm: ranks in one process reduce results of 32 MiB and more past "
          "the caches, matching the reference") {
  // reduce's and reduce_scatter's results of 32 MiB and more are written
  // with streaming stores in direct mode too (stream_copy): straight from
  // the kernel (float32 sum) and after the narrowing of float16. The odd
  // count leaves a tail after the last 64-byte run.
  constexpr int world = 2;
  test::run_shm_threads(world, "streamed", [](int rank, rank_log& log) {
    for (auto [t, op] : {std::pair{col::dtype::float32, col::reduce_op::sum},
                         std::pair{col::dtype::float16, col::reduce_op::max}})
      test::check_reductions(log, world, rank, "streamed", t, op,
                             (size_t{32} << 20) / col::size_of(t) + 5);
  });
}
