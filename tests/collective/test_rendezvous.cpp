// Rendezvous stores: in-process, shared by name, file system, prefixed.
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;

namespace {

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

std::string text(const std::vector<char>& xs) {
  return {xs.begin(), xs.end()};
}

/// A fresh directory under the system's temp dir, removed at scope exit.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("caf_collective_test_" + std::to_string(rd()) + "_" +
            std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

void check_set_then_get(const col::rendezvous_store_ptr& store) {
  REQUIRE(store != nullptr);
  CHECK_FALSE(store->set("alpha", bytes("one")));
  CHECK_FALSE(store->set("beta", bytes(std::string("\0two\xff", 5))));
  auto a = store->get("alpha", 1s);
  REQUIRE(a);
  CHECK(text(*a) == "one");
  auto b = store->get("beta", 1s);
  REQUIRE(b);
  CHECK(text(*b) == std::string("\0two\xff", 5));
  CHECK_FALSE(store->set("empty", {}));
  auto e = store->get("empty", 1s);
  REQUIRE(e);
  CHECK(e->empty());
}

void check_get_times_out(const col::rendezvous_store_ptr& store) {
  auto start = std::chrono::steady_clock::now();
  auto missing = store->get("never-set-key", 200ms);
  auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(missing);
  CHECK(col::code_of(missing.error()) == col::errc::timeout);
  auto msg = col::render(missing.error());
  INFO(msg);
  CHECK(msg.find("never-set-key") != std::string::npos);
  CHECK(elapsed >= 150ms); // it did wait
  CHECK(elapsed < 20s);    // and did not hang
}

void check_get_waits_for_a_later_set(const col::rendezvous_store_ptr& writer,
                                     const col::rendezvous_store_ptr& reader,
                                     std::chrono::milliseconds timeout = 20s) {
  caf::expected<std::vector<char>> got{std::vector<char>{}};
  std::thread t{[&] { got = reader->get("late", timeout); }};
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(writer->set("late", bytes("finally")));
  t.join();
  REQUIRE(got);
  CHECK(text(*got) == "finally");
}

} // namespace

TEST_CASE("the in-process store returns what was set") {
  check_set_then_get(col::make_in_process_store());
}

TEST_CASE("the in-process store times out naming the missing key") {
  check_get_times_out(col::make_in_process_store());
}

TEST_CASE("the in-process store wakes a waiting get on set") {
  auto store = col::make_in_process_store();
  check_get_waits_for_a_later_set(store, store);
}

TEST_CASE("a get that waits for ever waits - it does not time out at once") {
  // now + milliseconds::max() wraps into the past.
  auto forever = std::chrono::milliseconds::max();
  auto memory = col::make_in_process_store();
  check_get_waits_for_a_later_set(memory, memory, forever);
  temp_dir dir;
  auto files = col::make_file_store(dir.path.string());
  check_get_waits_for_a_later_set(files, files, forever);
  auto server = col::tcp_store_server::start("127.0.0.1", 0, "s3cret");
  REQUIRE(server);
  col::tcp_store_options opts;
  opts.port = (*server)->port();
  opts.secret = "s3cret";
  opts.run_id = "forever";
  auto tcp = col::make_tcp_store(opts);
  check_get_waits_for_a_later_set(tcp, tcp, forever);
}

TEST_CASE("separate in-process stores do not share keys") {
  auto a = col::make_in_process_store();
  auto b = col::make_in_process_store();
  REQUIRE_FALSE(a->set("k", bytes("v")));
  auto got = b->get("k", 50ms);
  REQUIRE_FALSE(got);
  CHECK(col::code_of(got.error()) == col::errc::timeout);
}

TEST_CASE("shared in-process stores with one name share keys") {
  auto a = col::shared_in_process_store("rendezvous-test-shared");
  auto b = col::shared_in_process_store("rendezvous-test-shared");
  auto other = col::shared_in_process_store("rendezvous-test-other");
  REQUIRE_FALSE(a->set("k", bytes("v")));
  auto got = b->get("k", 1s);
  REQUIRE(got);
  CHECK(text(*got) == "v");
  CHECK_FALSE(other->get("k", 50ms));
}

TEST_CASE("the file store returns what was set") {
  temp_dir dir;
  check_set_then_get(col::make_file_store(dir.path.string()));
}

TEST_CASE("the file store times out naming the missing key") {
  temp_dir dir;
  check_get_times_out(col::make_file_store(dir.path.string()));
}

TEST_CASE("file stores over one directory share keys across threads") {
  temp_dir dir;
  auto writer = col::make_file_store(dir.path.string());
  auto reader = col::make_file_store(dir.path.string());
  check_get_waits_for_a_later_set(writer, reader);
  // Many threads, each writing its key and reading every other one.
  constexpr int n = 6;
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      auto store = col::make_file_store(dir.path.string());
      // Keys with characters that are awkward in file names.
      auto key = "rank/" + std::to_string(i) + ":addr";
      if (store->set(key, bytes("value " + std::to_string(i))))
        failures[i] = "set failed";
      for (int j = 0; j < n; ++j) {
        auto got = store->get("rank/" + std::to_string(j) + ":addr", 20s);
        if (!got)
          failures[i] +=
            " get " + std::to_string(j) + ": " + col::render(got.error());
        else if (text(*got) != "value " + std::to_string(j))
          failures[i] += " get " + std::to_string(j) + " = " + text(*got);
      }
    });
  for (auto& t : threads)
    t.join();
  for (int i = 0; i < n; ++i) {
    INFO("thread " << i);
    CHECK(failures[i] == "");
  }
}

TEST_CASE("the file store keeps keys apart that differ only in characters "
          "a file name cannot hold") {
  // Before: every such character became '%', and "a/b", "a:b" and "a b"
  // were one file.
  temp_dir dir;
  auto store = col::make_file_store(dir.path.string());
  CHECK_FALSE(store->set("a/b", bytes("slash")));
  CHECK_FALSE(store->set("a:b", bytes("colon")));
  CHECK_FALSE(store->set("a b", bytes("space")));
  CHECK_FALSE(store->set("a%b", bytes("percent")));
  using entry = std::pair<std::string, std::string>;
  for (const auto& [key, want] :
       {entry{"a/b", "slash"}, entry{"a:b", "colon"}, entry{"a b", "space"},
        entry{"a%b", "percent"}}) {
    auto got = store->get(key, 1s);
    REQUIRE(got);
    CHECK(text(*got) == want);
  }
}

TEST_CASE("the file store creates its directory") {
  temp_dir dir;
  auto nested = (dir.path / "a" / "b").string();
  auto store = col::make_file_store(nested);
  REQUIRE_FALSE(store->set("k", bytes("v")));
  auto got = col::make_file_store(nested)->get("k", 1s);
  REQUIRE(got);
  CHECK(text(*got) == "v");
}

TEST_CASE("a prefix store prefixes keys in its base store") {
  auto base = col::make_in_process_store();
  auto a = col::make_prefix_store("group-a", base);
  auto b = col::make_prefix_store("group-b", base);
  REQUIRE_FALSE(a->set("k", bytes("from a")));
  REQUIRE_FALSE(b->set("k", bytes("from b")));
  auto ga = a->get("k", 1s);
  auto gb = b->get("k", 1s);
  REQUIRE(ga);
  REQUIRE(gb);
  CHECK(text(*ga) == "from a");
  CHECK(text(*gb) == "from b");
  auto raw = base->get("group-a/k", 1s);
  REQUIRE(raw);
  CHECK(text(*raw) == "from a");
  auto missing = a->get("nothing", 50ms);
  REQUIRE_FALSE(missing);
  CHECK(col::code_of(missing.error()) == col::errc::timeout);
  CHECK(col::render(missing.error()).find("nothing") != std::string::npos);
}
