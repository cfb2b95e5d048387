// The TCP rendezvous store: values across processes, secrets, runs kept
// apart, deadlines, and Gloo groups formed over it by separate processes.
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>

#include <caf/expected.hpp>

#include <caf_collective/all.hpp>

#include "process_support.hpp"
#include "unused_port.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

const std::string helper = CAF_COLLECTIVE_TCP_STORE_PROCESS;
const std::string secret = "s3cret-for-this-test-only";

/// Starts `exe` with `args` (argv[1...]) and stderr sent to `log`.
pid_t spawn_logged(const std::string& exe, std::vector<std::string> args,
                   const std::string& log) {
  args.insert(args.begin(), exe);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc =
    posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

/// The helper process with `args` and stderr sent to `log` (the server's
/// log, checked by the refusal tests).
pid_t spawn_logged(std::vector<std::string> args, const std::string& log) {
  return spawn_logged(helper, std::move(args), log);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in{path};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A store server in a child process, its stderr in a file; stopped (and
/// checked to stop cleanly) at the end of the scope.
struct server_process {
  test::temp_dir dir;
  pid_t pid = -1;
  std::string port;

  explicit server_process(const std::string& host = "127.0.0.1") {
    auto port_file = (dir.path / "port").string();
    pid = spawn_logged({"serve", host, port_file, secret}, log_path());
    for (int i = 0; i < 3000 && !std::filesystem::exists(port_file); ++i)
      std::this_thread::sleep_for(10ms);
    REQUIRE(std::filesystem::exists(port_file));
    port = read_file(port_file);
  }

  std::string log_path() const { return (dir.path / "server.log").string(); }

  std::string log() const { return read_file(log_path()); }

  ~server_process() {
    kill(pid, SIGTERM);
    CHECK(test::wait_process(pid, 20s) == 0);
  }
};

int run_helper(std::vector<std::string> args) {
  return test::wait_process(test::spawn_process(helper, std::move(args)), 60s);
}

col::rendezvous_store_ptr client_of(uint16_t port, std::string run,
                                    std::string key = secret,
                                    std::string host = "127.0.0.1") {
  col::tcp_store_options opts;
  opts.host = std::move(host);
  opts.port = port;
  opts.secret = std::move(key);
  opts.run_id = std::move(run);
  opts.connect_timeout = 2s;
  return col::make_tcp_store(std::move(opts));
}

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

/// Forms a group of `world` processes over the store; ranks in `absent`
/// never start. Returns every started rank's exit code.
std::vector<int> form_group(const std::string& port, const std::string& run,
                            int world, std::vector<int> absent = {},
                            const std::string& timeout_ms = "30000") {
  std::vector<std::pair<int, pid_t>> pids;
  for (int r = 0; r < world; ++r)
    if (std::find(absent.begin(), absent.end(), r) == absent.end())
      pids.emplace_back(
        r, test::spawn_process(helper, {"rank", port, secret, run,
                                        std::to_string(world),
                                        std::to_string(r), timeout_ms}));
  std::vector<int> codes;
  for (auto [rank, pid] : pids)
    codes.push_back(test::wait_process(pid, 90s));
  return codes;
}

} // namespace

TEST_CASE("a value set by one process is read by another over the TCP "
          "store") {
  server_process server;
  CHECK(run_helper({"set", server.port, secret, "run1", "greeting", "hello"}) ==
        0);
  CHECK(run_helper({"get", server.port, secret, "run1", "greeting", "hello",
                    "5000"}) == 0);
}

TEST_CASE("a get waits for a set made later by another process") {
  server_process server;
  auto reader = test::spawn_process(
    helper, {"get", server.port, secret, "run1", "later", "value", "30000"});
  std::this_thread::sleep_for(200ms);
  CHECK(run_helper({"set", server.port, secret, "run1", "later", "value"}) ==
        0);
  CHECK(test::wait_process(reader, 60s) == 0);
}

TEST_CASE("a client with a wrong secret is refused and the refusal is logged "
          "while the run goes on") {
  server_process server;
  CHECK(run_helper({"set", server.port, secret, "run1", "k", "v"}) == 0);
  CHECK(run_helper({"set", server.port, "guessed", "run1", "k", "evil"}) == 3);
  CHECK(run_helper({"get", server.port, "guessed", "run1", "k", "v", "500"}) ==
        3);
  // The run's value is untouched and the run's clients still get through.
  CHECK(run_helper({"get", server.port, secret, "run1", "k", "v", "5000"}) ==
        0);
  auto log = server.log();
  CHECK(log.find("refused a client from 127.0.0.1:") != std::string::npos);
  CHECK(log.find("wrong secret") != std::string::npos);
  // Neither the real secret nor the guess is ever logged.
  CHECK(log.find(secret) == std::string::npos);
  CHECK(log.find("guessed") == std::string::npos);
}

TEST_CASE("a client without a secret is refused and the refusal is logged") {
  server_process server;
  CHECK(run_helper({"set", server.port, "", "run1", "k", "v"}) == 3);
  auto log = server.log();
  CHECK(log.find("refused a client") != std::string::npos);
  CHECK(log.find("no secret") != std::string::npos);
}

TEST_CASE("a raw connection that does not speak the protocol is refused") {
  auto server = col::tcp_store_server::start("127.0.0.1", 0, secret);
  REQUIRE(server);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons((*server)->port());
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  std::string junk = "GET / HTTP/1.0\r\n\r\n";
  REQUIRE(::write(fd, junk.data(), junk.size()) == ssize_t(junk.size()));
  char reply[64];
  auto got = ::read(fd, reply, sizeof(reply));
  ::close(fd);
  REQUIRE(got >= 1);
  CHECK(reply[0] == 1); // refused
  for (int i = 0; i < 500 && (*server)->refused_clients() == 0; ++i)
    std::this_thread::sleep_for(10ms);
  CHECK((*server)->refused_clients() == 1);
}

TEST_CASE("a server refuses to start without a secret") {
  auto server = col::tcp_store_server::start("127.0.0.1", 0, "");
  REQUIRE_FALSE(server);
  CHECK(col::code_of(server.error()) == col::errc::invalid_argument);
}

TEST_CASE("two runs on one TCP store never see each other's keys") {
  auto server = col::tcp_store_server::start("127.0.0.1", 0, secret);
  REQUIRE(server);
  auto port = (*server)->port();
  auto a = client_of(port, "run-a");
  auto b = client_of(port, "run-b");
  REQUIRE_FALSE(a->set("gloo/g/0", bytes("from a")));
  REQUIRE_FALSE(b->set("gloo/g/0", bytes("from b")));
  auto in_a = a->get("gloo/g/0", 2s);
  auto in_b = b->get("gloo/g/0", 2s);
  REQUIRE(in_a);
  REQUIRE(in_b);
  CHECK(std::string(in_a->begin(), in_a->end()) == "from a");
  CHECK(std::string(in_b->begin(), in_b->end()) == "from b");
  // A run id that is a prefix of another, or contains '/', is still apart.
  auto c = client_of(port, "run");
  auto missing = c->get("-a/gloo/g/0", 100ms);
  REQUIRE_FALSE(missing);
  CHECK(col::code_of(missing.error()) == col::errc::timeout);
  CHECK(col::render(missing.error()).find("run 'run'") != std::string::npos);
  auto slashed = client_of(port, "run-a/gloo");
  CHECK_FALSE(slashed->get("g/0", 100ms));
}

TEST_CASE("a get times out naming the key and the run") {
  auto server = col::tcp_store_server::start("127.0.0.1", 0, secret);
  REQUIRE(server);
  auto store = client_of((*server)->port(), "run-x");
  auto got = store->get("never/set", 200ms);
  REQUIRE_FALSE(got);
  CHECK(col::code_of(got.error()) == col::errc::timeout);
  auto text = col::render(got.error());
  CHECK(text.find("'never/set'") != std::string::npos);
  CHECK(text.find("run 'run-x'") != std::string::npos);
}

TEST_CASE("a client fails with timeout when the server never comes up") {
  refusing_port nobody; // held: no other process can answer there
  auto port = nobody.port();
  auto store = client_of(port, "run1");
  auto got = store->get("k", 1s);
  REQUIRE_FALSE(got);
  CHECK(col::code_of(got.error()) == col::errc::timeout);
  CHECK(col::render(got.error())
          .find("no rendezvous store answered at "
                "tcp://127.0.0.1:" +
                std::to_string(port)) != std::string::npos);
  auto set = store->set("k", bytes("v")); // connect_timeout of 2 s
  REQUIRE(set);
  CHECK(col::code_of(set) == col::errc::timeout);
}

namespace {

/// A nameserver that takes queries and never answers: a UDP socket on
/// 127.0.0.2:53 (root only), and a resolv.conf naming it that processes
/// see through a mount namespace of their own.
class stalled_resolver {
 public:
  stalled_resolver() {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(53);
    at.sin_addr.s_addr = htonl(0x7f000002); // 127.0.0.2
    // Name lookups must reach resolv.conf's nameserver: no name service
    // cache (nscd) and no systemd-resolved in between.
    std::ifstream nss{"/etc/nsswitch.conf"};
    std::string line;
    bool plain_dns = true;
    while (std::getline(nss, line))
      if (line.rfind("hosts:", 0) == 0)
        plain_dns = line.find("resolve") == std::string::npos;
    plain_dns = plain_dns && !std::filesystem::exists("/var/run/nscd/socket");
    usable_ = plain_dns && fd_ >= 0 &&
              ::bind(fd_, reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0 &&
              std::system("/usr/bin/unshare -m sh -c 'mount --bind /dev/null "
                          "/etc/resolv.conf' > /dev/null 2>&1") == 0;
    std::ofstream out{conf_};
    out << "nameserver 127.0.0.2\noptions timeout:5 attempts:2\n";
  }

  ~stalled_resolver() {
    if (fd_ >= 0) ::close(fd_);
  }

  bool usable() const { return usable_; }

  struct outcome {
    int code = -1;
    std::chrono::steady_clock::duration took{};
    std::string log;
  };

  /// Runs the helper process with `args` under this resolver.
  outcome run(std::vector<std::string> args) {
    auto log = (dir_.path / "helper.log").string();
    std::vector<std::string> all{
      "-m",  "sh",  "-c", "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"",
      conf_, helper};
    all.insert(all.end(), args.begin(), args.end());
    outcome result;
    auto start = std::chrono::steady_clock::now();
    auto pid = spawn_logged("/usr/bin/unshare", std::move(all), log);
    result.code = test::wait_process(pid, 60s);
    result.took = std::chrono::steady_clock::now() - start;
    result.log = read_file(log);
    return result;
  }

 private:
  int fd_ = -1;
  bool usable_ = false;
  test::temp_dir dir_;
  std::string conf_ = (dir_.path / "resolv.conf").string();
};

} // namespace

TEST_CASE("a host name the resolver never answers fails at the deadline - "
          "the store's host and a Gloo rank's own - not after the "
          "resolver's timeouts") {
  // Before: getaddrinfo had no deadline, and a resolver that did not answer
  // held the caller for its own timeouts (10 s here, per lookup).
  stalled_resolver dns;
  if (!dns.usable()) {
    MESSAGE("skipped: needs root, port 53 of 127.0.0.2, a mount namespace "
            "and lookups that go to resolv.conf's nameserver");
    return;
  }
  auto store =
    dns.run({"get-host", "store.stalled-resolver.test", "29400", "1000"});
  INFO(store.log);
  CHECK(store.code == 4); // timeout
  CHECK(store.log.find("the resolver did not answer in time") !=
        std::string::npos);
  CHECK(store.log.find("store.stalled-resolver.test") != std::string::npos);
  // 1 s asked, each attempt at least the 2 s handshake floor.
  CHECK(store.took < 6s);
  // The Gloo rank checks its own hostname before Gloo sees it (Gloo's own
  // lookup has no deadline).
  auto rank = dns.run({"gloo-host", "rank.stalled-resolver.test", "1000"});
  INFO(rank.log);
  CHECK(rank.code == 4); // timeout
  CHECK(rank.log.find("the resolver did not answer in time") !=
        std::string::npos);
  CHECK(rank.log.find("rank.stalled-resolver.test") != std::string::npos);
  CHECK(rank.took < 6s);
  // Rank 0 of a launcher's environment serves the store at MASTER_ADDR:
  // before, its loopback check and its bind each looked the name up
  // without a deadline (10 s each here).
  auto served = dns.run({"env-rank0", "master.stalled-resolver.test", "1000"});
  INFO(served.log);
  CHECK(served.code == 4); // timeout
  CHECK(served.log.find("rank 0 serves the TCP store at "
                        "'master.stalled-resolver.test' (from MASTER_ADDR") !=
        std::string::npos);
  CHECK(served.log.find("the resolver did not answer within 1000 ms") !=
        std::string::npos);
  CHECK(served.took < 6s);
}

TEST_CASE("a client retries until a server that starts late is up") {
  auto port = unused_port();
  auto store = client_of(port, "run1");
  caf::expected<std::vector<char>> got{std::vector<char>{}};
  std::thread reader{[&] { got = store->get("k", 20s); }};
  std::this_thread::sleep_for(300ms);
  auto server = col::tcp_store_server::start("127.0.0.1", port, secret);
  REQUIRE(server);
  REQUIRE_FALSE(client_of(port, "run1")->set("k", bytes("late")));
  reader.join();
  REQUIRE(got);
  CHECK(std::string(got->begin(), got->end()) == "late");
}

TEST_CASE("a client whose idle connection the server closed sends its next "
          "request on a fresh one") {
  auto first = col::tcp_store_server::start("127.0.0.1", 0, secret);
  REQUIRE(first);
  auto port = (*first)->port();
  auto store = client_of(port, "run1");
  REQUIRE_FALSE(store->set("before", bytes("1"))); // one idle connection now
  // The server restarts on the same port: its end of that connection is
  // closed; the client's end stays in its pool.
  first->reset();
  auto second = col::tcp_store_server::start("127.0.0.1", port, secret);
  REQUIRE(second);
  auto set = store->set("after", bytes("2"));
  CHECK_MESSAGE(!set, col::render(set));
  auto got = store->get("after", 2s);
  REQUIRE_MESSAGE(got, col::render(got.error()));
  CHECK(std::string(got->begin(), got->end()) == "2");
  // Several idle connections (three gets waiting at once each hold one),
  // all closed by a restart: none is used.
  std::vector<char> answered(3, 0); // not vector<bool>: written at once
  std::vector<std::thread> readers;
  for (size_t i = 0; i < answered.size(); ++i)
    readers.emplace_back(
      [&, i] { answered[i] = store->get("later", 10s) ? 1 : 0; });
  std::this_thread::sleep_for(200ms);
  REQUIRE_FALSE(client_of(port, "run1")->set("later", bytes("x")));
  for (auto& t : readers)
    t.join();
  CHECK(answered == std::vector<char>(3, 1));
  second->reset();
  auto third = col::tcp_store_server::start("127.0.0.1", port, secret);
  REQUIRE(third);
  REQUIRE_FALSE(store->set("again", bytes("3")));
  auto again = store->get("again", 2s);
  REQUIRE_MESSAGE(again, col::render(again.error()));
  CHECK(std::string(again->begin(), again->end()) == "3");
}

TEST_CASE("a server binds only the address it is given") {
  auto server = col::tcp_store_server::start("127.0.0.2", 0, secret);
  REQUIRE(server);
  auto port = (*server)->port();
  auto elsewhere = client_of(port, "run1", secret, "127.0.0.1");
  auto got = elsewhere->get("k", 300ms);
  REQUIRE_FALSE(got);
  CHECK(col::render(got.error()).find("no rendezvous store answered") !=
        std::string::npos);
  auto there = client_of(port, "run1", secret, "127.0.0.2");
  CHECK_FALSE(there->set("k", bytes("v")));
}

TEST_CASE("separate processes form a Gloo group over a TCP store, twice on "
          "one server") {
  server_process server;
  // The same group name in two runs on one server: the second run must not
  // pick up the first run's (now dead) addresses.
  for (auto run : {"first", "second"}) {
    INFO("run " << run);
    for (auto code : form_group(server.port, run, 3))
      CHECK(code == 0);
  }
}

TEST_CASE("a rank that never starts fails formation on time, naming it") {
  server_process server;
  // A run that completed leaves its keys behind on the server.
  for (auto code : form_group(server.port, "stale", 3))
    CHECK(code == 0);
  // Rank 2 of the new run never starts: the others give up at their 2 s
  // deadline with errc::timeout (exit 4) naming it, instead of using the
  // stale run's keys.
  auto log = (server.dir.path / "rank0.log").string();
  auto r0 =
    spawn_logged({"rank", server.port, secret, "fresh", "3", "0", "2000"}, log);
  for (auto code : form_group(server.port, "fresh", 3, {0, 2}, "2000"))
    CHECK(code == 4);
  CHECK(test::wait_process(r0, 60s) == 4);
  CHECK(read_file(log).find("rank 2 never joined") != std::string::npos);
}

TEST_CASE("a reused file store with a stale address fails on time, naming "
          "the rank") {
  test::temp_dir dir;
  auto file_rank = [&](int world, int rank, const char* timeout_ms) {
    return test::spawn_process(helper, {"file-rank", dir.path.string(),
                                        std::to_string(world),
                                        std::to_string(rank), timeout_ms});
  };
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r)
    pids.push_back(file_rank(3, r, "30000"));
  for (auto pid : pids)
    CHECK(test::wait_process(pid, 90s) == 0);
  // The directory now holds rank 2's dead addresses. Gloo alone would try
  // them for up to five times the deadline; the new formation never reads
  // them: rank 2 never joined it.
  auto log = (dir.path / "rank0.log").string();
  auto r0 =
    spawn_logged({"file-rank", dir.path.string(), "3", "0", "2000"}, log);
  auto r1 = file_rank(3, 1, "2000");
  CHECK(test::wait_process(r0, 60s) == 4);
  CHECK(test::wait_process(r1, 60s) == 4);
  auto text = read_file(log);
  INFO("rank 0's log: " << text);
  CHECK(text.find("rank 2 never joined within 2000 ms") != std::string::npos);
}

TEST_CASE("threads sharing one TCP store object do not wait for each other's "
          "gets") {
  auto server = col::tcp_store_server::start("127.0.0.1", 0, secret);
  REQUIRE(server);
  auto store = client_of((*server)->port(), "run1");
  // Members as threads share one store, as they share an in-process one: a
  // get blocked on one thread must not hold up the set that answers it.
  caf::expected<std::vector<char>> got{std::vector<char>{}};
  std::thread reader{[&] { got = store->get("late", 20s); }};
  std::this_thread::sleep_for(100ms);
  REQUIRE_FALSE(store->set("late", bytes("from the other thread")));
  reader.join();
  REQUIRE(got);
  CHECK(std::string(got->begin(), got->end()) == "from the other thread");
}

TEST_CASE("a peer that joins but never connects fails formation at the "
          "deadline, naming it") {
  server_process server;
  // The fake rank 1 passes the peer check, then never connects: Gloo alone
  // would wait five times the deadline on the real rank 0's side.
  auto fake = test::spawn_process(
    helper, {"fake-rank", server.port, secret, "joined", "1", "30000"});
  auto log = (server.dir.path / "rank0.log").string();
  auto r0 = spawn_logged(
    {"rank", server.port, secret, "joined", "2", "0", "2000"}, log);
  auto r0_code = test::wait_process(r0, 60s);
  kill(fake, SIGTERM);
  test::wait_process(fake, 10s);
  auto text = read_file(log);
  INFO("rank 0's log: " << text);
  CHECK(r0_code == 4);
  CHECK(text.find("the connections to rank(s) [1] were not established by "
                  "the formation deadline") != std::string::npos);
}

namespace {

// The process's thread count, from /proc/self/status.
int thread_count() {
  std::ifstream status{"/proc/self/status"};
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

} // namespace

TEST_CASE("connections that never send a handshake do not each get a "
          "thread of the server - and the store serves again once they "
          "are gone") {
  // Before: a thread per connection for up to 10 s, however many came.
  auto server = col::tcp_store_server::start("127.0.0.1", 0, secret);
  REQUIRE(server);
  auto port = (*server)->port();
  auto before = thread_count();
  std::vector<int> idle;
  for (int i = 0; i < 400; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(port);
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(500ms); // the server accepted what it takes
  auto during = thread_count();
  CHECK(during - before <= 256 + 4);
  CHECK((*server)->refused_clients() >= 400 - 256);
  // A client with the secret is turned away while they are there, and
  // tries again until it gets in (before: the closed handshake failed it
  // at once with backend_error).
  auto store = col::make_tcp_store([&] {
    col::tcp_store_options opts;
    opts.host = "127.0.0.1";
    opts.port = port;
    opts.secret = secret;
    opts.run_id = "run1";
    opts.connect_timeout = 10s;
    return opts;
  }());
  caf::error set;
  std::thread setter{[&] { set = store->set("k", bytes("v")); }};
  std::this_thread::sleep_for(300ms);
  for (int fd : idle)
    ::close(fd);
  setter.join();
  CHECK_MESSAGE(!set, col::render(set));
  auto got = store->get("k", 5s);
  REQUIRE_MESSAGE(got, col::render(got.error()));
  CHECK(std::string(got->begin(), got->end()) == "v");
}
