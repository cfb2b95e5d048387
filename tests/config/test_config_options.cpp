// collective.* options: parsed by CAF from a real command line and a real
// config file, with the environment as the fallback.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <caf_collective/config_options.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/host_memory.hpp>
#include <caf_collective/log.hpp>

#include "../support/env_table.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

using env_table::lookup;
using env_table::vars;

/// A config with the collective options, parsed from `args` as CAF parses
/// a program's argv.
struct parsed_config {
  caf::actor_system_config cfg;
  explicit parsed_config(std::vector<std::string> args) {
    col::add_collective_options(cfg);
    args.insert(args.begin(), "program");
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    auto err = cfg.parse(static_cast<int>(argv.size()), argv.data());
    REQUIRE_MESSAGE(!err, caf::actor_system_config::render(err));
  }
};

col::collective_settings settings(const caf::actor_system_config& cfg,
                                  const vars& env = {}) {
  auto result = col::settings_of(cfg, lookup(env));
  if (!result) FAIL(col::render(result.error()));
  return *result;
}

/// A config file in a fresh temporary directory.
struct config_file {
  std::filesystem::path path;
  explicit config_file(const std::string& text) {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("caf_collective_config_" + std::to_string(rd()) + ".ini");
    std::ofstream{path} << text;
  }
  ~config_file() { std::filesystem::remove(path); }
};

} // namespace

TEST_CASE("without options or variables every setting has its default") {
  parsed_config p{{}};
  auto s = settings(p.cfg);
  CHECK(s.timeout == 30s);
  CHECK(s.hostname.empty());
  CHECK(s.backend == "auto");
  CHECK(s.store.empty());
  CHECK(s.log_level == "warn");
  CHECK(s.host_cache_mb == 512);
}

TEST_CASE("the command line sets every collective option") {
  parsed_config p{{"--collective.timeout=10s", "--collective.hostname=10.1.2.3",
                   "--collective.backend=gloo",
                   "--collective.store=tcp://10.1.2.3:29500",
                   "--collective.run-id=job-7", "--collective.log-level=debug",
                   "--collective.host-cache-mb=64"}};
  auto s = settings(p.cfg);
  CHECK(s.timeout == 10s);
  CHECK(s.hostname == "10.1.2.3");
  CHECK(s.backend == "gloo");
  CHECK(s.store == "tcp://10.1.2.3:29500");
  CHECK(s.run_id == "job-7");
  CHECK(s.log_level == "debug");
  CHECK(s.host_cache_mb == 64);
}

TEST_CASE("CAF's config file sets collective options and the command line "
          "wins over it") {
  config_file file{"[collective]\n"
                   "timeout=1500ms\n"
                   "backend=\"shm\"\n"
                   "hostname=\"127.0.0.5\"\n"};
  parsed_config from_file{{"--config-file=" + file.path.string()}};
  auto s = settings(from_file.cfg);
  CHECK(s.timeout == 1500ms);
  CHECK(s.backend == "shm");
  CHECK(s.hostname == "127.0.0.5");
  parsed_config both{
    {"--config-file=" + file.path.string(), "--collective.timeout=2min"}};
  auto t = settings(both.cfg);
  CHECK(t.timeout == 2min);
  CHECK(t.backend == "shm");
}

TEST_CASE("environment variables fill in what the CAF configuration leaves "
          "unset, never more") {
  vars env{{"CAF_COLLECTIVE_TIMEOUT", "45s"},
           {"CAF_COLLECTIVE_HOSTNAME", "192.168.0.9"},
           {"CAF_COLLECTIVE_BACKEND", "gloo"},
           {"CAF_COLLECTIVE_STORE", "file:/tmp/x"},
           {"CAF_COLLECTIVE_LOG_LEVEL", "error"},
           {"CAF_COLLECTIVE_HOST_CACHE_MB", "0"}};
  parsed_config none{{}};
  auto s = settings(none.cfg, env);
  CHECK(s.timeout == 45s);
  CHECK(s.hostname == "192.168.0.9");
  CHECK(s.backend == "gloo");
  CHECK(s.store == "file:/tmp/x");
  CHECK(s.log_level == "error");
  CHECK(s.host_cache_mb == 0);
  parsed_config some{{"--collective.timeout=10s", "--collective.backend=shm"}};
  auto t = settings(some.cfg, env);
  CHECK(t.timeout == 10s);
  CHECK(t.backend == "shm");
  CHECK(t.hostname == "192.168.0.9");
}

TEST_CASE("a wrong value is refused naming the option or the variable") {
  auto error_of = [](const caf::actor_system_config& cfg, const vars& env) {
    auto s = col::settings_of(cfg, lookup(env));
    REQUIRE_FALSE(s);
    CHECK(col::code_of(s.error()) == col::errc::invalid_argument);
    return col::render(s.error());
  };
  parsed_config bad_backend{{"--collective.backend=mpi"}};
  CHECK(error_of(bad_backend.cfg, {}).find("collective.backend='mpi'") !=
        std::string::npos);
  parsed_config none{{}};
  CHECK(error_of(none.cfg, {{"CAF_COLLECTIVE_BACKEND", "tcp"}})
          .find("CAF_COLLECTIVE_BACKEND='tcp'") != std::string::npos);
  CHECK(error_of(none.cfg, {{"CAF_COLLECTIVE_TIMEOUT", "soon"}})
          .find("CAF_COLLECTIVE_TIMEOUT='soon'") != std::string::npos);
  parsed_config zero{{"--collective.timeout=0s"}};
  CHECK(error_of(zero.cfg, {}).find("collective.timeout") != std::string::npos);
  parsed_config loud{{"--collective.log-level=loud"}};
  CHECK(error_of(loud.cfg, {}).find("collective.log-level='loud'") !=
        std::string::npos);
  parsed_config redis{{"--collective.store=redis://x"}};
  CHECK(error_of(redis.cfg, {}).find("collective.store='redis://x'") !=
        std::string::npos);
}

TEST_CASE("an unknown collective option on the command line is an error") {
  caf::actor_system_config cfg;
  col::add_collective_options(cfg);
  std::string prog = "program";
  std::string arg = "--collective.timout=10s";
  char* argv[] = {prog.data(), arg.data()};
  CHECK(cfg.parse(2, argv));
}

TEST_CASE("the settings of a running actor system apply to the collective "
          "layer") {
  parsed_config p{
    {"--collective.host-cache-mb=3", "--scheduler.max-threads=2"}};
  caf::actor_system sys{p.cfg};
  auto s = col::settings_of(sys, lookup({}));
  REQUIRE(s);
  auto before = col::host_cache_capacity();
  col::apply_process_settings(*s);
  CHECK(col::host_cache_capacity() == size_t{3} << 20);
  col::set_host_cache_capacity(before);
}

TEST_CASE("sleep_idle_workers sets CAF's own moderate polling option, which "
          "the command line may still override") {
  constexpr const char* key = "work-stealing.moderate-poll-attempts";
  caf::actor_system_config cfg;
  col::sleep_idle_workers(cfg);
  CHECK(caf::get_or(cfg, key, size_t{500}) == 0);
  // CAF parses the key from a command line only because it declares the
  // option itself: a misspelt key would be set above and silently ignored
  // by the scheduler, but refused here.
  caf::actor_system_config overridden;
  col::sleep_idle_workers(overridden);
  std::string prog = "program";
  std::string arg = std::string{"--"} + key + "=7";
  char* argv[] = {prog.data(), arg.data()};
  REQUIRE_FALSE(overridden.parse(2, argv));
  CHECK(caf::get_or(overridden, key, size_t{500}) == 7);
}

TEST_CASE("with sleeping idle workers, requests from outside the scheduler "
          "still wake a worker") {
  caf::actor_system_config cfg;
  col::sleep_idle_workers(cfg);
  cfg.set("scheduler.max-threads", 2);
  // A sleeping worker also wakes at the end of its relaxed sleep (10 ms by
  // default): far longer here, so only the enqueue's wake-up can answer
  // within the request's timeout.
  cfg.set("work-stealing.relaxed-sleep-duration",
          caf::timespan{std::chrono::seconds{60}});
  caf::actor_system sys{cfg};
  auto echo =
    sys.spawn([]() -> caf::behavior { return {[](int x) { return x + 1; }}; });
  caf::scoped_actor self{sys};
  // Pauses let the workers fall asleep between requests; each answer must
  // still come, within the request's timeout.
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{i % 4 == 0 ? 30 : 0});
    int answer = -1;
    self->request(echo, std::chrono::seconds{5}, i)
      .receive([&](int x) { answer = x; },
               [&](caf::error& err) { FAIL(sys.render(err)); });
    CHECK(answer == i + 1);
  }
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("the store setting gives a TCP store only with a secret") {
  col::collective_settings s;
  s.store = "tcp://127.0.0.1:1";
  auto refused = col::store_of(s, "g", 1, lookup({}));
  REQUIRE_FALSE(refused);
  CHECK(col::render(refused.error()).find("CAF_COLLECTIVE_SECRET") !=
        std::string::npos);
  auto store =
    col::store_of(s, "g", 1, lookup({{"CAF_COLLECTIVE_SECRET", "x"}}));
  REQUIRE(store);
  CHECK(*store != nullptr);
  s.store.clear();
  auto none = col::store_of(s, "g", 1, lookup({}));
  REQUIRE(none);
  CHECK(*none == nullptr);
}

TEST_CASE("the log level setter accepts spdlog's level names only") {
  CHECK(col::set_log_level("debug"));
  CHECK_FALSE(col::set_log_level("loud"));
  CHECK(col::set_log_level("warn"));
}
