// Object collectives: every op on strings, vectors, maps and a struct with
// inspect whose sizes differ per rank; caf::message through the actor
// system's registry; and the failures that must reach every rank (a type
// that is not registered, bytes that do not deserialize, a bad root).
// Ranks as threads; processes and a dying rank: test_object_processes.cpp.
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/message.hpp>
#include <caf/send.hpp>

#include <caf_collective/object_collectives.hpp>

#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::expect_error;
using test::expect_usable;
using test::rank_log;

namespace objtest {

struct model_config {
  std::string name;
  std::vector<int32_t> layers;
  double learning_rate = 0;
  std::map<std::string, std::string> tags;

  bool operator==(const model_config&) const = default;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_config& x) {
  return f(caf::meta::type_name("model_config"), x.name, x.layers,
           x.learning_rate, x.tags);
}

// Has inspect, but no test registers it with an actor system.
struct unregistered_secret {
  int32_t value = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, unregistered_secret& x) {
  return f(caf::meta::type_name("unregistered_secret"), x.value);
}

// Claims a sequence of `claimed` elements without holding any: the only
// affordable way for a test to reach CAF 0.17's 32-bit sequence lengths.
struct claims_sequence {
  size_t claimed = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, claims_sequence& x) {
  size_t size = x.claimed;
  if (auto err = f.begin_sequence(size)) return err;
  if (auto err = f.end_sequence()) return err;
  x.claimed = size;
  return {};
}

// Its inspect throws something that is no std::exception when `explode`.
struct throws_unknown {
  bool explode = false;
  int32_t value = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, throws_unknown& x) {
  if (x.explode) throw 42;
  return f(caf::meta::type_name("throws_unknown"), x.value);
}

} // namespace objtest

namespace {

using objtest::model_config;

/// A config whose size grows with `rank` (rank 0's is the smallest).
model_config config_of(int rank) {
  model_config c;
  c.name = "model-" + std::string(static_cast<size_t>(rank) * 37, 'x');
  for (int i = 0; i < rank * 50 + 1; ++i)
    c.layers.push_back(i * (rank + 1));
  c.learning_rate = 0.125 * (rank + 1);
  for (int i = 0; i < rank + 1; ++i)
    c.tags["key" + std::to_string(i)] =
      std::string(static_cast<size_t>(i), 'v');
  return c;
}

std::string text_of(int rank) {
  return "rank " + std::to_string(rank) + ":" +
         std::string(static_cast<size_t>(rank) * 1000, 'a' + rank % 26);
}

std::vector<double> values_of(int rank) {
  std::vector<double> xs(static_cast<size_t>(rank) * 333);
  for (size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<double>(i) * 0.5 + rank;
  return xs;
}

std::map<std::string, std::vector<int64_t>> table_of(int rank) {
  std::map<std::string, std::vector<int64_t>> m;
  for (int i = 0; i <= rank; ++i)
    m["row" + std::to_string(i)] =
      std::vector<int64_t>(static_cast<size_t>(i + 1), int64_t{rank} * 100 + i);
  return m;
}

/// Runs `body` on `world` ranks of a fresh group `name` whose ops time out
/// after 20 s (a bug fails instead of hanging).
void run_ranks(int world, const std::string& name,
               const std::function<void(int, rank_log&)>& body) {
  test::run_group(world, name, body, 20s);
}

caf::actor_system_config& registered(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", 1);
  cfg.add_message_type<model_config>("model_config");
  return cfg;
}

} // namespace

// -- every op, objects of different sizes per rank ----------------------------

TEST_CASE("broadcast_object copies the root's object to every rank") {
  for (int world : {1, 3}) {
    INFO("world " << world);
    run_ranks(world, "obj-bcast", [world](int rank, rank_log& log) {
      int root = world - 1;
      auto cfg = rank == root ? config_of(7) : model_config{};
      col::broadcast_object(cfg, root, "obj-bcast");
      log.expect(cfg == config_of(7), "config differs from the root's");
      auto text = rank == root ? text_of(5) : std::string{"stale"};
      col::broadcast_object(text, root, "obj-bcast");
      log.expect(text == text_of(5), "string differs from the root's");
      auto table = rank == 0 ? table_of(4) : table_of(1);
      col::broadcast_object(table, 0, "obj-bcast");
      log.expect(table == table_of(4), "map differs from the root's");
      std::vector<double> empty =
        rank == 0 ? std::vector<double>{} : values_of(2);
      col::broadcast_object(empty, 0, "obj-bcast");
      log.expect(empty.empty(), "an empty vector did not arrive as empty");
      log.checks += 4;
    });
  }
}

TEST_CASE("allgather_object returns every rank's object of its own size") {
  for (int world : {1, 2, 4}) {
    INFO("world " << world);
    run_ranks(world, "obj-allgather", [world](int rank, rank_log& log) {
      auto configs = col::allgather_object(config_of(rank), "obj-allgather");
      auto texts = col::allgather_object(text_of(rank), "obj-allgather");
      auto values = col::allgather_object(values_of(rank), "obj-allgather");
      auto tables = col::allgather_object(table_of(rank), "obj-allgather");
      log.expect(configs.size() == static_cast<size_t>(world) &&
                   texts.size() == configs.size() &&
                   values.size() == configs.size() &&
                   tables.size() == configs.size(),
                 "not one object per rank");
      for (int r = 0; r < world && r < static_cast<int>(tables.size()); ++r) {
        auto i = static_cast<size_t>(r);
        log.expect(configs[i] == config_of(r),
                   "config of rank " + std::to_string(r));
        log.expect(texts[i] == text_of(r),
                   "string of rank " + std::to_string(r));
        log.expect(values[i] == values_of(r),
                   "vector of rank " + std::to_string(r));
        log.expect(tables[i] == table_of(r),
                   "map of rank " + std::to_string(r));
        log.checks += 4;
      }
    });
  }
}

TEST_CASE("gather_object collects every rank's object on the root only") {
  run_ranks(3, "obj-gather", [](int rank, rank_log& log) {
    auto got = col::gather_object(config_of(rank), 1, "obj-gather");
    auto texts = col::gather_object(text_of(rank), 1, "obj-gather");
    if (rank != 1) {
      log.expect(got.empty() && texts.empty(), "a non-root got objects");
      return;
    }
    log.expect(got.size() == 3 && texts.size() == 3, "not 3 objects");
    for (size_t r = 0; r < got.size() && r < texts.size(); ++r) {
      log.expect(got[r] == config_of(static_cast<int>(r)),
                 "config of rank " + std::to_string(r));
      log.expect(texts[r] == text_of(static_cast<int>(r)),
                 "string of rank " + std::to_string(r));
      log.checks += 2;
    }
  });
}

TEST_CASE("allgather_object and gather_object of bool return every rank's "
          "flag") {
  // std::vector<bool> hands out proxies, not bool&: the results must still
  // decode (and compile).
  for (int world : {1, 2, 3}) {
    INFO("world " << world);
    run_ranks(world, "obj-bool", [world](int rank, rank_log& log) {
      bool mine = rank % 2 == 0;
      auto all = col::allgather_object(mine, "obj-bool");
      auto on_root = col::gather_object(mine, 0, "obj-bool");
      auto size = static_cast<size_t>(world);
      log.expect(all.size() == size, "allgather: not one flag per rank");
      log.expect(on_root.size() == (rank == 0 ? size : 0),
                 "gather: " + std::to_string(on_root.size()) + " flags");
      for (size_t r = 0; r < all.size(); ++r)
        log.expect(all[r] == (r % 2 == 0),
                   "allgather: flag of rank " + std::to_string(r));
      for (size_t r = 0; r < on_root.size(); ++r)
        log.expect(on_root[r] == (r % 2 == 0),
                   "gather: flag of rank " + std::to_string(r));
      log.checks += all.size() + on_root.size();
    });
  }
}

namespace {

/// The largest input, in bytes, of this rank's recent `op`s of group
/// `name`, or -1 when none ran.
int64_t widest_recent(const std::string& name, col::op_kind op) {
  int64_t widest = -1;
  for (auto& rec : col::get_group(name)->recent_ops())
    if (rec.op == op)
      widest = std::max(widest, static_cast<int64_t>(rec.bytes));
  return widest;
}

} // namespace

TEST_CASE("gather_object and scatter_object move one wide object among "
          "small ones at its own size - small ones padded") {
  // Rank 1's object is 300 KiB, the others' 64 B. Padded to the widest,
  // every rank would send (and the root hold) 300 KiB per rank.
  const size_t wide = 300 << 10;
  auto object_of = [&](int r) {
    return std::string(r == 1 ? wide : 64, static_cast<char>('a' + r));
  };
  run_ranks(3, "obj-wide", [&](int rank, rank_log& log) {
    auto got = col::gather_object(object_of(rank), 2, "obj-wide");
    std::vector<std::string> parts;
    if (rank == 2)
      for (int r = 0; r < 3; ++r)
        parts.push_back(object_of(r));
    auto mine = col::scatter_object(parts, 2, "obj-wide");
    log.expect(mine == object_of(rank), "scatter: wrong object");
    if (rank == 2) {
      log.expect(got.size() == 3, "gather: not 3 objects");
      for (int r = 0; r < 3 && r < static_cast<int>(got.size()); ++r)
        log.expect(got[static_cast<size_t>(r)] == object_of(r),
                   "gather: object of rank " + std::to_string(r));
    }
    // Ranks with a small object sent and received only their own bytes.
    auto own_bytes = widest_recent("obj-wide", col::op_kind::alltoallv);
    log.expect(own_bytes >= 0, "no alltoallv moved the payloads");
    if (rank == 0)
      log.expect(own_bytes < 1024, "rank 0 sent " + std::to_string(own_bytes) +
                                     " bytes for its 64 B object");
    log.expect(widest_recent("obj-wide", col::op_kind::gather) < 0 &&
                 widest_recent("obj-wide", col::op_kind::scatter) < 0,
               "the payloads went through a padded gather or scatter");
    // Objects of similar sizes: padded, through gather and scatter.
    auto small =
      col::gather_object(std::string(100 + rank, 'x'), 0, "obj-wide");
    auto back = col::scatter_object(small, 0, "obj-wide");
    log.expect(back == std::string(100 + rank, 'x'), "small scatter");
    log.expect(widest_recent("obj-wide", col::op_kind::gather) > 0 &&
                 widest_recent("obj-wide", col::op_kind::scatter) > 0,
               "small objects did not go through gather and scatter");
    log.checks += 5;
  });
}

TEST_CASE("scatter_object hands rank r the root's object r") {
  run_ranks(3, "obj-scatter", [](int rank, rank_log& log) {
    std::vector<model_config> parts;
    std::vector<std::string> texts;
    if (rank == 2)
      for (int r = 0; r < 3; ++r) {
        parts.push_back(config_of(10 * r));
        texts.push_back(text_of(2 - r));
      }
    auto mine = col::scatter_object(parts, 2, "obj-scatter");
    auto text = col::scatter_object(texts, 2, "obj-scatter");
    log.expect(mine == config_of(10 * rank), "wrong config");
    log.expect(text == text_of(2 - rank), "wrong string");
    log.checks += 2;
  });
}

TEST_CASE("send_object and recv_object pass objects along a chain") {
  run_ranks(4, "obj-p2p", [](int rank, rank_log& log) {
    // Rank 0 starts; each rank adds its layer count and passes it on. The
    // object grows at every hop.
    model_config cfg;
    if (rank > 0) cfg = col::recv_object<model_config>(rank - 1, "obj-p2p");
    cfg.layers.push_back(rank);
    cfg.name += std::to_string(rank);
    if (rank < 3) col::send_object(cfg, rank + 1, "obj-p2p");
    log.expect(cfg.name == std::string{"0123"}.substr(0, rank + 1),
               "chain name " + cfg.name);
    log.expect(cfg.layers.size() == static_cast<size_t>(rank + 1),
               "chain length");
    // Tags keep two objects from one sender apart.
    col::object_options tag7;
    tag7.tag = 7;
    if (rank == 0) {
      col::send_object(text_of(3), 1, "obj-p2p", tag7);
      col::send_object(values_of(2), 1, "obj-p2p");
    } else if (rank == 1) {
      auto text = col::recv_object<std::string>(0, "obj-p2p", tag7);
      auto values = col::recv_object<std::vector<double>>(0, "obj-p2p");
      log.expect(text == text_of(3), "tagged string");
      log.expect(values == values_of(2), "untagged vector");
    }
    log.checks += 2;
  });
}

TEST_CASE("object collectives take the group object as well as its name") {
  run_ranks(2, "obj-handle", [](int rank, rank_log& log) {
    auto grp = col::get_group("obj-handle");
    auto all = col::allgather_object(*grp, text_of(rank));
    log.expect(all.size() == 2 && all[1] == text_of(1), "by handle");
    log.checks += 1;
  });
}

// -- caf::message through the actor system's registry ------------------------

TEST_CASE("caf::message objects of registered types move with their types") {
  caf::actor_system_config cfg;
  caf::actor_system sys{registered(cfg)};
  run_ranks(3, "obj-msg", [&sys](int rank, rank_log& log) {
    auto mine =
      caf::make_message(config_of(rank), text_of(rank), int32_t{rank});
    auto all = col::allgather_message(sys, mine, "obj-msg");
    log.expect(all.size() == 3, "not 3 messages");
    for (size_t r = 0; r < all.size(); ++r) {
      auto ok = all[r].match_elements<model_config, std::string, int32_t>();
      log.expect(ok, "message " + std::to_string(r) +
                       " has other types: " + to_string(all[r]));
      if (!ok) continue;
      log.expect(
        all[r].get_as<model_config>(0) == config_of(static_cast<int>(r)) &&
          all[r].get_as<std::string>(1) == text_of(static_cast<int>(r)) &&
          all[r].get_as<int32_t>(2) == static_cast<int32_t>(r),
        "message " + std::to_string(r) + " has other values");
      log.checks += 1;
    }
    caf::message root_msg;
    if (rank == 0) root_msg = caf::make_message(config_of(2));
    col::broadcast_message(sys, root_msg, 0, "obj-msg");
    log.expect(root_msg.match_elements<model_config>() &&
                 root_msg.get_as<model_config>(0) == config_of(2),
               "broadcast message");
    if (rank == 1)
      col::send_message(sys, caf::make_message(text_of(4)), 2, "obj-msg");
    if (rank == 2) {
      auto got = col::recv_message(sys, 1, "obj-msg");
      log.expect(got.match_elements<std::string>() &&
                   got.get_as<std::string>(0) == text_of(4),
                 "sent message");
    }
    log.checks += 1;
  });
}

TEST_CASE("a caf::message with an unregistered type fails every rank and "
          "names the type") {
  caf::actor_system_config cfg;
  caf::actor_system sys{registered(cfg)};
  run_ranks(3, "obj-unreg", [&sys](int rank, rank_log& log) {
    auto mine = rank == 1 ? caf::make_message(objtest::unregistered_secret{5})
                          : caf::make_message(config_of(rank));
    expect_error(log, "allgather_message", col::errc::invalid_argument,
                 {"obj-unreg", "allgather_object", "rank(s) [1]",
                  "unregistered_secret", "not registered"},
                 [&] { col::allgather_message(sys, mine, "obj-unreg"); });
    caf::message root_msg;
    if (rank == 2)
      root_msg = caf::make_message(objtest::unregistered_secret{7});
    expect_error(log, "broadcast_message", col::errc::invalid_argument,
                 {"broadcast_object", "root 2", "unregistered_secret"}, [&] {
                   col::broadcast_message(sys, root_msg, 2, "obj-unreg");
                 });
    // Every rank failed at the same point: the group still works.
    expect_usable(log, "obj-unreg", 3, rank);
  });
}

TEST_CASE("a sequence too long for CAF's 32-bit lengths fails to serialize "
          "instead of reading back as another object") {
  const size_t too_long = size_t{1} << 32;
  auto huge =
    col::detail::encode_object(objtest::claims_sequence{too_long}, nullptr);
  REQUIRE(huge.failure);
  CHECK(col::code_of(huge.failure) == col::errc::invalid_argument);
  auto text = col::render(huge.failure);
  CHECK(text.find("4294967296 elements") != std::string::npos);
  CHECK(text.find("at most 4294967295") != std::string::npos);
  CHECK(huge.bytes.empty());
  // Without the check, 2^32 + 5 was written as 5 and read back as 5.
  auto wraps =
    col::detail::encode_object(objtest::claims_sequence{too_long + 5}, nullptr);
  CHECK(col::code_of(wraps.failure) == col::errc::invalid_argument);
  // The longest length the format describes is still written; a length the
  // reader can afford (elements may be empty) still round-trips.
  auto longest =
    col::detail::encode_object(objtest::claims_sequence{too_long - 1}, nullptr);
  CHECK_FALSE(longest.failure);
  auto fits =
    col::detail::encode_object(objtest::claims_sequence{1000}, nullptr);
  REQUIRE_FALSE(fits.failure);
  objtest::claims_sequence back;
  REQUIRE_FALSE(col::detail::decode_object(fits.bytes.data(), fits.bytes.size(),
                                           back, nullptr));
  CHECK(back.claimed == 1000);
}

TEST_CASE("nested sequences cannot claim together far more elements than "
          "the object's bytes - a vector of vector<bool> is refused before "
          "CAF allocates") {
  // Bytes crafted as ranks' disagreement or corruption could make them:
  // 4000 inner vector<bool>s of a few bytes each, each claiming as many
  // bits as the bytes left allow. Each claim passed the per-sequence bound,
  // and CAF resized every one: these 16 KB took about 60 MiB
  // (helper-53 saw 200 KB take 3.9 GB).
  constexpr size_t inner = 4000;
  std::vector<char> bytes;
  caf::binary_serializer sink{nullptr, bytes};
  auto token = col::detail::writer_token(nullptr);
  size_t outer = inner;
  REQUIRE_FALSE(sink(token));
  REQUIRE_FALSE(sink.begin_sequence(outer));
  for (size_t i = 0; i < inner; ++i) {
    // CAF 0.17 writes a vector<bool> as its length in bits, then its bytes
    // as a vector of uint8_t: here none. The claim stays within what the
    // bytes after it could hold (its empty byte vector, 1 byte, and 4 bytes
    // per later inner), as the reader bounds each sequence.
    size_t bits = 8 * (4 * (inner - i - 1) + 1) + 60000;
    std::vector<uint8_t> no_bytes;
    REQUIRE_FALSE(sink.begin_sequence(bits));
    REQUIRE_FALSE(sink(no_bytes));
    REQUIRE_FALSE(sink.end_sequence());
  }
  REQUIRE_FALSE(sink.end_sequence());
  std::vector<std::vector<bool>> out;
  auto err =
    col::detail::decode_object(bytes.data(), bytes.size(), out, nullptr);
  REQUIRE(err);
  CHECK(col::code_of(err) == col::errc::mismatch);
  CHECK(col::render(err).find("claim more elements together") !=
        std::string::npos);
  CHECK(out.empty());
  // Honest nested sequences still read back.
  std::vector<std::vector<bool>> honest(300, std::vector<bool>(1000, true));
  auto encoded = col::detail::encode_object(honest, nullptr);
  REQUIRE_FALSE(encoded.failure);
  REQUIRE_FALSE(col::detail::decode_object(encoded.bytes.data(),
                                           encoded.bytes.size(), out, nullptr));
  CHECK(out == honest);
}

TEST_CASE("actor handles do not pass between two actor systems of one "
          "process - messages inside other types still do") {
  // Two systems without a middleman number their actors alike: a handle of
  // system A read in system B named B's own actor with the same id.
  caf::actor_system_config cfg_a, cfg_b;
  cfg_a.set("scheduler.max-threads", 1);
  cfg_b.set("scheduler.max-threads", 1);
  caf::actor_system a{cfg_a}, b{cfg_b};
  auto of_a = a.spawn([]() -> caf::behavior { return {[](int32_t) {}}; });
  auto of_b = b.spawn([]() -> caf::behavior { return {[](int32_t) {}}; });
  // Stops both actors however the test ends (a failed REQUIRE included):
  // the systems' destructors wait for them.
  struct stopper {
    std::vector<caf::actor> actors;
    ~stopper() {
      for (auto& x : actors)
        caf::anon_send_exit(x, caf::exit_reason::kill);
    }
  } stop{{of_a, of_b}};
  REQUIRE(of_a.id() == of_b.id()); // what made the wrong actor come back
  auto written = col::detail::encode_object(of_a, &a);
  REQUIRE_FALSE(written.failure);
  caf::actor read_back;
  auto in_b = col::detail::decode_object(written.bytes.data(),
                                         written.bytes.size(), read_back, &b);
  REQUIRE(in_b);
  CHECK(col::code_of(in_b) == col::errc::mismatch);
  CHECK(col::render(in_b).find("holds an actor handle") != std::string::npos);
  CHECK(!read_back);
  auto msg = col::detail::encode_object(caf::make_message(of_a, 1), &a);
  REQUIRE_FALSE(msg.failure);
  caf::message msg_back;
  auto msg_in_b = col::detail::decode_object(msg.bytes.data(), msg.bytes.size(),
                                             msg_back, &b);
  CHECK(col::code_of(msg_in_b) == col::errc::mismatch);
  // In its own system the handle is the same actor.
  REQUIRE_FALSE(col::detail::decode_object(
    written.bytes.data(), written.bytes.size(), read_back, &a));
  CHECK(read_back == of_a);
  // A caf::message inside another type reads nothing without a context: it
  // is read again with one, across systems too.
  std::vector<caf::message> plain{caf::make_message(int32_t{7}, 2.5)};
  auto nested = col::detail::encode_object(plain, &a);
  REQUIRE_FALSE(nested.failure);
  std::vector<caf::message> nested_back;
  REQUIRE_FALSE(col::detail::decode_object(
    nested.bytes.data(), nested.bytes.size(), nested_back, &b));
  REQUIRE(nested_back.size() == 1);
  CHECK((nested_back[0].match_elements<int32_t, double>()));
  CHECK(nested_back[0].get_as<int32_t>(0) == 7);
}

TEST_CASE("an honest vector of a million bools reads back under the shared "
          "element budget") {
  // CAF writes it as its bits and then its bytes: 9 elements a byte.
  std::vector<bool> bits(1000000);
  for (size_t i = 0; i < bits.size(); i += 3)
    bits[i] = true;
  auto encoded = col::detail::encode_object(bits, nullptr);
  REQUIRE_FALSE(encoded.failure);
  std::vector<bool> back;
  REQUIRE_FALSE(col::detail::decode_object(
    encoded.bytes.data(), encoded.bytes.size(), back, nullptr));
  CHECK(back == bits);
}

TEST_CASE("a root only one rank refuses takes the op's number - that rank's "
          "next object op does not meet the op its peers ran") {
  // Before: the refusal took no number, so rank 1's next broadcast_object
  // met its peers' first one and returned the root's first object as the
  // second's, as success. Now the ranks are out of step, which shm reports
  // at once (Gloo: at the deadline).
  test::run_shm_threads(
    3, "obj-oneroot",
    [](int rank, rank_log& log) {
      std::string first = rank == 0 ? "first" : "";
      try {
        col::broadcast_object(first, rank == 1 ? 7 : 0, "obj-oneroot");
        log.expect(rank != 1, "rank 1 took root 7");
      } catch (const col::collective_error& e) {
        if (rank == 1)
          log.expect(e.code() == col::errc::invalid_argument &&
                       std::string{e.what()}.find("root 7") !=
                         std::string::npos,
                     e.what());
      }
      std::string second = rank == 0 ? "second" : "";
      try {
        col::broadcast_object(second, 0, "obj-oneroot");
        log.expect(second == "second", "rank " + std::to_string(rank) +
                                         " got '" + second + "' as the second");
      } catch (const col::collective_error&) {
        // The ranks are out of step: an error, never another op's object.
      }
      log.expect(second != "first", "the first object came back as the second");
    },
    5s);
}

TEST_CASE("an object with a sequence too long to serialize fails every rank") {
  run_ranks(3, "obj-too-long", [](int rank, rank_log& log) {
    objtest::claims_sequence mine{rank == 1 ? size_t{1} << 32 : 3};
    expect_error(log, "allgather_object", col::errc::invalid_argument,
                 {"obj-too-long", "allgather_object", "rank(s) [1]",
                  "4294967296 elements"},
                 [&] { col::allgather_object(mine, "obj-too-long"); });
    expect_usable(log, "obj-too-long", 3, rank);
  });
}

TEST_CASE("an inspect that throws what is no std::exception fails every rank "
          "at once") {
  // Before: it escaped the throwing rank naming nothing, and the others
  // waited for their timeout (20 s here).
  run_ranks(3, "obj-throws", [](int rank, rank_log& log) {
    objtest::throws_unknown mine{rank == 1, rank};
    auto start = std::chrono::steady_clock::now();
    expect_error(log, "allgather_object", col::errc::invalid_argument,
                 {"obj-throws", "allgather_object", "rank(s) [1]",
                  "exception of unknown type"},
                 [&] { col::allgather_object(mine, "obj-throws"); });
    log.expect(std::chrono::steady_clock::now() - start < 10s,
               "waited for the timeout");
    expect_usable(log, "obj-throws", 3, rank);
  });
}

TEST_CASE("a std::vector<bool> of many elements moves") {
  // CAF packs it eight elements to a byte after a length in elements: the
  // reader's bound on a sequence's length refused more than about 75000.
  run_ranks(2, "obj-bits", [](int rank, rank_log& log) {
    std::vector<bool> mask(200000 + static_cast<size_t>(rank));
    for (size_t i = 0; i < mask.size(); ++i)
      mask[i] = (i * 7 + static_cast<size_t>(rank)) % 3 == 0;
    auto all = col::allgather_object(mask, "obj-bits");
    log.expect(all.size() == 2, "not one mask per rank");
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      bool same = all[r].size() == 200000 + static_cast<size_t>(r);
      for (size_t i = 0; same && i < all[r].size(); ++i)
        same = all[r][i] == ((i * 7 + static_cast<size_t>(r)) % 3 == 0);
      log.expect(same, "mask of rank " + std::to_string(r));
    }
    log.checks += all.size();
  });
}

TEST_CASE("a type registered on the sender only fails the reader and every "
          "other rank") {
  caf::actor_system_config with_cfg;
  caf::actor_system with_type{registered(with_cfg)};
  caf::actor_system_config without_cfg;
  without_cfg.set("scheduler.max-threads", 1);
  caf::actor_system without_type{without_cfg};
  run_ranks(2, "obj-half-reg", [&](int rank, rank_log& log) {
    auto& sys = rank == 0 ? with_type : without_type;
    caf::message msg;
    if (rank == 0) msg = caf::make_message(config_of(3));
    expect_error(log, "broadcast_message", col::errc::mismatch,
                 {"broadcast_object", "rank(s) [1]", "1 <- 0"},
                 [&] { col::broadcast_message(sys, msg, 0, "obj-half-reg"); });
    expect_usable(log, "obj-half-reg", 2, rank);
  });
}

TEST_CASE("a caf::message without object_options::system is refused on "
          "every rank") {
  run_ranks(2, "obj-nosys", [](int rank, rank_log& log) {
    auto msg = caf::make_message(std::string{"x"});
    expect_error(log, "allgather_object", col::errc::invalid_argument,
                 {"object_options::system", "rank(s) [0, 1]"},
                 [&] { col::allgather_object(msg, "obj-nosys"); });
    expect_usable(log, "obj-nosys", 2, rank);
  });
}

// -- bytes that do not deserialize -------------------------------------------

namespace {

/// Corrupts this rank's outgoing payloads until the end of the scope.
struct tamper_scope {
  explicit tamper_scope(std::function<void(std::vector<char>&)> fn) {
    col::detail::test_hooks().tamper = std::move(fn);
  }
  ~tamper_scope() { col::detail::test_hooks().tamper = nullptr; }
};

// A length prefix that claims far more than follows, then a few bytes.
void bogus_length(std::vector<char>& bytes) {
  bytes.assign({char(0xff), char(0xff), char(0xff), char(0x0f), 1, 2, 3});
}

void drop_last_byte(std::vector<char>& bytes) {
  if (!bytes.empty()) bytes.pop_back();
}

void append_garbage(std::vector<char>& bytes) {
  bytes.push_back(42);
}

} // namespace

TEST_CASE("a corrupted broadcast payload fails every rank naming the "
          "readers") {
  for (auto corrupt : {bogus_length, drop_last_byte, append_garbage}) {
    run_ranks(3, "obj-corrupt-bcast", [corrupt](int rank, rank_log& log) {
      auto cfg = rank == 0 ? config_of(4) : model_config{};
      {
        tamper_scope t{rank == 0 ? corrupt : nullptr};
        expect_error(
          log, "broadcast_object", col::errc::mismatch,
          {"obj-corrupt-bcast", "broadcast_object", "rank(s) [1, 2]", "1 <- 0",
           "2 <- 0"},
          [&] { col::broadcast_object(cfg, 0, "obj-corrupt-bcast"); });
      }
      if (rank != 0)
        log.expect(cfg == model_config{}, "a failed read changed the object");
      expect_usable(log, "obj-corrupt-bcast", 3, rank);
    });
  }
}

TEST_CASE("a corrupted payload of one rank fails allgather, gather and "
          "scatter on every rank") {
  run_ranks(3, "obj-corrupt", [](int rank, rank_log& log) {
    {
      tamper_scope t{rank == 2 ? bogus_length : nullptr};
      expect_error(log, "allgather_object", col::errc::mismatch,
                   {"allgather_object", "rank(s) [0, 1, 2]", "0 <- 2"}, [&] {
                     col::allgather_object(table_of(rank), "obj-corrupt");
                   });
      expect_error(log, "gather_object", col::errc::mismatch,
                   {"gather_object", "rank(s) [0]", "0 <- 2"}, [&] {
                     col::gather_object(text_of(rank), 0, "obj-corrupt");
                   });
    }
    {
      tamper_scope t{rank == 1 ? drop_last_byte : nullptr};
      std::vector<model_config> parts;
      if (rank == 1) parts = {config_of(0), config_of(1), config_of(2)};
      expect_error(log, "scatter_object", col::errc::mismatch,
                   {"scatter_object", "rank(s) [0, 1, 2]"},
                   [&] { col::scatter_object(parts, 1, "obj-corrupt"); });
    }
    expect_usable(log, "obj-corrupt", 3, rank);
  });
}

TEST_CASE("a corrupted send_object payload fails the receiver and the "
          "sender") {
  run_ranks(2, "obj-corrupt-p2p", [](int rank, rank_log& log) {
    tamper_scope t{rank == 0 ? append_garbage : nullptr};
    if (rank == 0)
      expect_error(log, "send_object", col::errc::mismatch,
                   {"send_object", "rank 1 could not deserialize"}, [&] {
                     col::send_object(config_of(2), 1, "obj-corrupt-p2p");
                   });
    else
      expect_error(log, "recv_object", col::errc::mismatch,
                   {"recv_object", "from rank 0", "left over"}, [&] {
                     col::recv_object<model_config>(0, "obj-corrupt-p2p");
                   });
    expect_usable(log, "obj-corrupt-p2p", 2, rank);
  });
}

TEST_CASE("raw bytes sent with the tensor API do not read as an object") {
  run_ranks(2, "obj-raw", [](int rank, rank_log& log) {
    if (rank == 0) {
      // What send_object puts on the wire: header [status, size], payload,
      // then the receiver's verdict [status, source] comes back.
      std::vector<char> junk{9, 'n', 'o', 't', ' ', 'a', 'n', 'y', 't'};
      std::vector<int64_t> hdr{0, static_cast<int64_t>(junk.size())};
      col::send(col::view_of(hdr), 1, "obj-raw");
      col::send(col::tensor_view{junk.data(), col::dtype::uint8, junk.size()},
                1, "obj-raw");
      std::vector<int64_t> verdict{0, 0};
      col::recv(col::view_of(verdict), 1, "obj-raw");
      log.expect(verdict[0] == static_cast<int64_t>(col::errc::mismatch),
                 "the receiver did not report the bytes as unreadable");
      // A header announcing an absurd size is refused before any buffer.
      std::vector<int64_t> huge{0, int64_t{1} << 60};
      col::send(col::view_of(huge), 1, "obj-raw");
      // A status no object op writes, with its "text".
      std::vector<int64_t> odd{99, 4};
      std::vector<char> text{'o', 'o', 'p', 's'};
      col::send(col::view_of(odd), 1, "obj-raw");
      col::send(col::tensor_view{text.data(), col::dtype::uint8, text.size()},
                1, "obj-raw");
    } else {
      expect_error(log, "recv_object", col::errc::mismatch,
                   {"recv_object", "from rank 0", "model_config"},
                   [&] { col::recv_object<model_config>(0, "obj-raw"); });
      expect_error(log, "recv_object (huge)", col::errc::mismatch,
                   {"recv_object", "rank 0 announced"},
                   [&] { col::recv_object<model_config>(0, "obj-raw"); });
      expect_error(log, "recv_object (odd status)", col::errc::mismatch,
                   {"recv_object", "rank 0", "oops"},
                   [&] { col::recv_object<model_config>(0, "obj-raw"); });
    }
    log.checks += 1;
  });
}

TEST_CASE("ranks that disagree on the type fail every rank") {
  run_ranks(2, "obj-types", [](int rank, rank_log& log) {
    // Rank 0 sends a string; rank 1 expects a vector of doubles.
    expect_error(log, "broadcast_object", col::errc::mismatch,
                 {"broadcast_object", "rank(s) [1]"}, [&] {
                   if (rank == 0) {
                     auto s = text_of(3);
                     col::broadcast_object(s, 0, "obj-types");
                   } else {
                     std::vector<double> xs;
                     col::broadcast_object(xs, 0, "obj-types");
                   }
                 });
    expect_usable(log, "obj-types", 2, rank);
  });
}

// -- bad arguments
// -------------------------------------------------------------

TEST_CASE("a root with the wrong number of scatter objects fails every "
          "rank") {
  run_ranks(3, "obj-scatter-count", [](int rank, rank_log& log) {
    std::vector<std::string> parts;
    if (rank == 0) parts = {"a", "b"};
    expect_error(log, "scatter_object", col::errc::invalid_argument,
                 {"scatter_object", "root 0", "2 objects for a world of 3"},
                 [&] { col::scatter_object(parts, 0, "obj-scatter-count"); });
    expect_usable(log, "obj-scatter-count", 3, rank);
  });
}

TEST_CASE("object ops refuse a root or peer outside the group") {
  run_ranks(2, "obj-bad-rank", [](int rank, rank_log& log) {
    std::string s = "x";
    expect_error(log, "broadcast_object", col::errc::invalid_argument,
                 {"root 5 is not a rank"},
                 [&] { col::broadcast_object(s, 5, "obj-bad-rank"); });
    expect_error(log, "send_object to self", col::errc::invalid_argument,
                 {"destination", "caller itself"},
                 [&] { col::send_object(s, rank, "obj-bad-rank"); });
    expect_error(log, "unknown group", col::errc::unknown_group, {"nope"},
                 [&] { col::allgather_object(s, "nope"); });
    expect_usable(log, "obj-bad-rank", 2, rank);
  });
}
