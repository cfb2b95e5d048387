// Reading stored objects back (read.hpp, object_refs.hpp) while other
// threads release them and store new ones, and reads of refs that do not
// describe what the store holds (forged shapes, sizes that wrap around).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/expected.hpp>

#include <caf_collective/error.hpp>
#include <caf_collective/object_codec.hpp>
#include <caf_collective/object_refs.hpp>
#include <caf_collective/object_store.hpp>
#include <caf_collective/read.hpp>

namespace col = caf_collective;

namespace {

// 4 MiB: a block the host cache keeps when it is freed and hands to the
// next tensor of that size, and a copy long enough to overlap a release.
constexpr size_t race_bytes = size_t{4} << 20;
constexpr int race_rounds = 40;

enum class read_result { intact, refused, mixed };

struct race_counts {
  size_t intact = 0;
  size_t refused = 0;
  size_t mixed = 0;
  std::string first_mixed; // what the first bad read saw
};

/// Each round stores an object (`put_a`), then reads it (`read_a`) again
/// and again on this thread while another thread releases it and stores
/// another object of the same size (`put_b`, usually in the block `a` had),
/// until a read fails because `a` is gone. A read must return `a`'s values
/// or fail with unknown_object, never anything else.
template<class PutA, class PutB, class ReadA>
race_counts race_release_and_reuse(col::object_store& store, PutA put_a,
                                   PutB put_b, ReadA read_a) {
  race_counts counts;
  for (int round = 0; round < race_rounds; ++round) {
    col::object_ref a = put_a(round);
    col::object_ref b;
    std::atomic<bool> reading{false};
    std::exception_ptr swap_failed; // doctest may not assert off its thread
    std::thread swapper{[&] {
      while (!reading.load())
        std::this_thread::yield();
      try {
        (void)store.release(a);
        b = put_b(round);
      } catch (...) {
        swap_failed = std::current_exception();
      }
    }};
    for (;;) {
      std::string seen;
      auto result = read_a(a, round, seen);
      reading = true;
      if (result == read_result::refused) {
        ++counts.refused;
        break;
      }
      if (result == read_result::intact) {
        ++counts.intact;
        continue;
      }
      if (counts.mixed++ == 0)
        counts.first_mixed = "round " + std::to_string(round) + ": " + seen;
    }
    swapper.join();
    if (swap_failed) std::rethrow_exception(swap_failed);
    (void)store.release(b);
  }
  return counts;
}

/// `t` stored in `store`; throws if either step fails (the swapping thread
/// calls this, where doctest may not assert).
col::object_ref store_or_throw(col::object_store& store,
                               caf::expected<col::tensor> t) {
  if (!t) throw std::runtime_error{col::render(t.error())};
  auto ref = store.put(std::move(*t));
  if (!ref) throw std::runtime_error{col::render(ref.error())};
  return *ref;
}

/// A float tensor of race_bytes from the host cache, every element `x`.
col::object_ref put_floats(col::object_store& store, float x) {
  auto n = race_bytes / sizeof(float);
  auto t = col::tensor::empty(col::dtype::float32, {static_cast<int64_t>(n)});
  if (t) std::fill_n(static_cast<float*>(t->data()), n, x);
  return store_or_throw(store, std::move(t));
}

/// The value object `a` holds in round `round`; what takes its place is -1.
float value_of_round(int round) {
  return 1.0f + static_cast<float>(round);
}

/// Sorts a read of a float object into the three outcomes.
read_result classify_floats(const caf::error& err, const float* xs, size_t n,
                            float expected, std::string& seen) {
  if (err) {
    if (col::code_of(err) == col::errc::unknown_object)
      return read_result::refused;
    seen = "failed with " + col::render(err);
    return read_result::mixed;
  }
  auto bad = std::count_if(xs, xs + n, [&](float x) { return x != expected; });
  if (bad == 0) return read_result::intact;
  seen = std::to_string(bad) + " of " + std::to_string(n) +
         " elements are not the object's value " + std::to_string(expected);
  return read_result::mixed;
}

/// A string object (put_object's encoding) of race_bytes characters `c`,
/// its bytes in a block from the host cache.
col::object_ref put_text(col::object_store& store, char c) {
  auto encoded =
    col::detail::encode_object(std::string(race_bytes, c), nullptr);
  if (encoded.failure) throw std::runtime_error{col::render(encoded.failure)};
  auto t = col::tensor::empty(col::dtype::uint8,
                              {static_cast<int64_t>(encoded.bytes.size())});
  if (t) std::memcpy(t->data(), encoded.bytes.data(), encoded.bytes.size());
  return store_or_throw(store, std::move(t));
}

char char_of_round(int round) {
  return static_cast<char>('a' + round % 26);
}

read_result classify_text(const caf::expected<std::string>& x, char c,
                          std::string& seen) {
  if (!x) {
    if (col::code_of(x.error()) == col::errc::unknown_object)
      return read_result::refused;
    seen = "failed with " + col::render(x.error());
    return read_result::mixed;
  }
  auto bad =
    std::count_if(x->begin(), x->end(), [c](char ch) { return ch != c; });
  if (x->size() == race_bytes && bad == 0) return read_result::intact;
  seen = std::to_string(x->size()) + " characters, " + std::to_string(bad) +
         " of them not '" + std::string(1, c) + "'";
  return read_result::mixed;
}

void check_race(const race_counts& counts) {
  INFO("reads that returned the object: " << counts.intact
                                          << ", refused: " << counts.refused);
  CHECK_MESSAGE(counts.mixed == 0, counts.mixed << " reads returned bytes of "
                                                << "another object, first: "
                                                << counts.first_mixed);
  CHECK(counts.refused == static_cast<size_t>(race_rounds));
}

/// What a read_vector call did: "value", the error's code, or "threw ...".
template<class T>
std::string outcome_of_read_vector(const col::object_store& store,
                                   const col::object_ref& ref) {
  try {
    auto xs = col::read_vector<T>(store, ref);
    if (xs) return "value";
    return std::string{col::to_string(col::code_of(xs.error()))};
  } catch (const std::exception& e) {
    return std::string{"threw "} + e.what();
  }
}

} // namespace

TEST_CASE("read_into returns its object or unknown_object while another "
          "thread releases it and reuses its memory") {
  col::object_store store{"node-a"};
  std::vector<float> dst(race_bytes / sizeof(float));
  auto counts = race_release_and_reuse(
    store, [&](int round) { return put_floats(store, value_of_round(round)); },
    [&](int) { return put_floats(store, -1.0f); },
    [&](const col::object_ref& a, int round, std::string& seen) {
      std::fill(dst.begin(), dst.end(), 0.0f);
      auto err = col::read_into(store, a, col::view_of(dst));
      return classify_floats(err, dst.data(), dst.size(), value_of_round(round),
                             seen);
    });
  check_race(counts);
}

TEST_CASE("read_vector returns its object or unknown_object while another "
          "thread releases it and reuses its memory") {
  col::object_store store{"node-a"};
  auto counts = race_release_and_reuse(
    store, [&](int round) { return put_floats(store, value_of_round(round)); },
    [&](int) { return put_floats(store, -1.0f); },
    [&](const col::object_ref& a, int round, std::string& seen) {
      auto xs = col::read_vector<float>(store, a);
      if (!xs) return classify_floats(xs.error(), nullptr, 0, 0, seen);
      return classify_floats({}, xs->data(), xs->size(), value_of_round(round),
                             seen);
    });
  check_race(counts);
}

TEST_CASE("read_object and read_objects return their object or "
          "unknown_object while another thread releases it and reuses its "
          "memory") {
  col::object_store store{"node-a"};
  auto put_a = [&](int round) { return put_text(store, char_of_round(round)); };
  auto put_b = [&](int) { return put_text(store, '#'); };
  SUBCASE("read_object") {
    auto counts = race_release_and_reuse(
      store, put_a, put_b,
      [&](const col::object_ref& a, int round, std::string& seen) {
        return classify_text(col::read_object<std::string>(store, a),
                             char_of_round(round), seen);
      });
    check_race(counts);
  }
  SUBCASE("read_objects") {
    auto counts = race_release_and_reuse(
      store, put_a, put_b,
      [&](const col::object_ref& a, int round, std::string& seen) {
        auto xs = col::read_objects<std::string>(store, a, col::sizes_of({a}));
        if (!xs)
          return classify_text(caf::expected<std::string>{xs.error()},
                               char_of_round(round), seen);
        if (xs->size() != 1) {
          seen = std::to_string(xs->size()) + " objects instead of 1";
          return read_result::mixed;
        }
        return classify_text(caf::expected<std::string>{std::move(xs->at(0))},
                             char_of_round(round), seen);
      });
    check_race(counts);
  }
}

TEST_CASE("read_vector of a ref with a forged shape returns an error "
          "instead of allocating that shape") {
  col::object_store store{"node-a"};
  auto ref = store.put(col::tensor::from_vector(std::vector<float>{1, 2, 3}));
  REQUIRE(ref);
  auto huge = col::shape_type{int64_t{1} << 40}; // 4 TiB of float
  SUBCASE("an id the store does not have") {
    col::object_ref forged{"node-a", ref->id + 41, col::dtype::float32, huge,
                           col::device{}};
    CHECK(outcome_of_read_vector<float>(store, forged) == "unknown_object");
  }
  SUBCASE("a stored id with another shape") {
    auto forged = *ref;
    forged.shape = huge;
    CHECK(outcome_of_read_vector<float>(store, forged) == "mismatch");
  }
  SUBCASE("another node's object") {
    col::object_ref forged{"node-b", ref->id, col::dtype::float32, huge,
                           col::device{}};
    CHECK(outcome_of_read_vector<float>(store, forged) == "unknown_object");
  }
  SUBCASE("the true ref still reads") {
    auto xs = col::read_vector<float>(store, *ref);
    REQUIRE(xs);
    CHECK(*xs == std::vector<float>{1, 2, 3});
  }
}

TEST_CASE("read_objects refuses sizes that wrap around when added up") {
  col::object_store store{"node-a"};
  // One byte, which reads as the length prefix of a 127-character string:
  // a decoder handed a size past it would read beyond the object.
  auto keep = std::make_shared<std::vector<char>>(1, char{0x7f});
  col::tensor_view bytes{keep->data(), col::dtype::uint8, keep->size()};
  auto ref = store.put(col::tensor::adopt(bytes, keep));
  REQUIRE(ref);
  constexpr auto half = uint64_t{1} << 63;
  constexpr auto max = std::numeric_limits<uint64_t>::max();
  for (auto sizes :
       {std::vector<uint64_t>{half, half + 1}, std::vector<uint64_t>{max, 2},
        std::vector<uint64_t>{1, max, 1}, std::vector<uint64_t>{2},
        std::vector<uint64_t>{0}}) {
    CAPTURE(sizes.size());
    CAPTURE(sizes.front());
    auto xs = col::read_objects<std::string>(store, *ref, sizes);
    REQUIRE(!xs);
    CHECK(col::code_of(xs.error()) == col::errc::invalid_argument);
  }
}

TEST_CASE("read_objects reads bool objects") {
  // std::vector<bool> hands out proxies, not bool&: the objects must still
  // decode (and compile).
  col::object_store store{"node-a"};
  auto keep = std::make_shared<std::vector<char>>();
  for (bool flag : {true, false, true}) {
    auto encoded = col::detail::encode_object(flag, nullptr);
    REQUIRE(!encoded.failure);
    keep->insert(keep->end(), encoded.bytes.begin(), encoded.bytes.end());
  }
  col::tensor_view bytes{keep->data(), col::dtype::uint8, keep->size()};
  auto ref = store.put(col::tensor::adopt(bytes, keep));
  REQUIRE(ref);
  auto one = keep->size() / 3;
  auto flags = col::read_objects<bool>(store, *ref, {one, one, one});
  REQUIRE(flags);
  CHECK(*flags == std::vector<bool>{true, false, true});
}
