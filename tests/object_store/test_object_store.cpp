#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <caf_collective/error.hpp>
#include <caf_collective/object_store.hpp>
#include <caf_collective/read.hpp>

namespace col = caf_collective;

TEST_CASE("put stores a tensor and get returns a view of the same memory") {
  col::object_store store{"node-a"};
  auto t = col::tensor::from_vector(std::vector<float>{1, 2, 3});
  auto* data = t.data();
  auto ref = store.put(std::move(t));
  REQUIRE(ref);
  CHECK(ref->valid());
  CHECK(ref->node == "node-a");
  CHECK(ref->type == col::dtype::float32);
  CHECK(ref->shape == col::shape_type{3});
  auto view = store.get(*ref);
  REQUIRE(view);
  CHECK(view->data() == data);
  CHECK(view->data_as<float>()[2] == 3.0f);
  CHECK(store.objects() == 1);
  CHECK(store.bytes() == 12);
}

TEST_CASE("release drops the object and later lookups fail with "
          "unknown_object") {
  col::object_store store{"n"};
  auto ref = store.put(col::tensor::from_vector(std::vector<int32_t>{7, 8}));
  REQUIRE(ref);
  auto pinned = store.pin(*ref);
  REQUIRE(pinned);
  CHECK(!store.release(*ref));
  CHECK(store.objects() == 0);
  // A pin keeps the memory valid after release, and in use.
  CHECK(store.bytes() == 8);
  CHECK((*pinned)->view().data_as<int32_t>()[1] == 8);
  auto again = store.get(*ref);
  REQUIRE(!again);
  CHECK(col::code_of(again.error()) == col::errc::unknown_object);
  CHECK(col::code_of(store.release(*ref)) == col::errc::unknown_object);
  *pinned = col::pinned_tensor{};
  CHECK(store.bytes() == 0);
}

TEST_CASE("refs from another node, forged ids and wrong fingerprints are "
          "refused") {
  col::object_store store{"n"};
  auto ref = store.put(col::tensor::from_vector(std::vector<float>{1, 2}));
  REQUIRE(ref);
  auto other = *ref;
  other.node = "elsewhere";
  CHECK(col::code_of(store.get(other).error()) == col::errc::unknown_object);
  auto forged = *ref;
  forged.id = 999;
  CHECK(col::code_of(store.get(forged).error()) == col::errc::unknown_object);
  auto wrong = *ref;
  wrong.type = col::dtype::int32;
  CHECK(col::code_of(store.get(wrong).error()) == col::errc::mismatch);
  CHECK(!store.contains(col::object_ref{}));
}

TEST_CASE("a put beyond the capacity fails with out_of_memory and stores "
          "nothing") {
  col::object_store store{"n", 16};
  CHECK(store.capacity() == 16);
  auto a = store.put(col::tensor::from_vector(std::vector<float>{1, 2, 3}));
  REQUIRE(a);
  auto b = store.put(col::tensor::from_vector(std::vector<float>{1, 2}));
  REQUIRE(!b);
  CHECK(col::code_of(b.error()) == col::errc::out_of_memory);
  CHECK(col::render(b.error()).find("capacity of 16 bytes") !=
        std::string::npos);
  CHECK(store.objects() == 1);
  CHECK(store.bytes() == 12);
  store.set_capacity(0); // unlimited
  CHECK(store.put(col::tensor::from_vector(std::vector<float>{1, 2})));
  CHECK(store.bytes() == 20);
}

TEST_CASE("a released object an op still pins counts against the capacity "
          "until the pin is dropped") {
  // Before: release() took the bytes off at once, so a store with its
  // capacity set held twice as much while ops still read released inputs.
  col::object_store store{"n", 16};
  auto a = store.put(col::tensor::from_vector(std::vector<float>{1, 2, 3}));
  REQUIRE(a);
  auto pinned = store.pin(*a);
  REQUIRE(pinned);
  REQUIRE_FALSE(store.release(*a));
  CHECK(store.objects() == 0);
  CHECK(store.bytes() == 12);
  auto refused = store.put(col::tensor::from_vector(std::vector<float>{1, 2}));
  REQUIRE(!refused);
  CHECK(col::code_of(refused.error()) == col::errc::out_of_memory);
  CHECK(col::render(refused.error()).find("12 in use") != std::string::npos);
  *pinned = col::pinned_tensor{}; // the op finished
  CHECK(store.bytes() == 0);
  CHECK(store.put(col::tensor::from_vector(std::vector<float>{1, 2})));
  CHECK(store.bytes() == 8);
}

TEST_CASE("a pin outliving its store still frees its tensor") {
  col::pinned_tensor pin;
  {
    auto store = std::make_shared<col::object_store>("gone");
    auto ref = store->put(col::tensor::from_vector(std::vector<float>{5, 6}));
    REQUIRE(ref);
    pin = store->pin(*ref).value();
  }
  REQUIRE(pin);
  CHECK(pin->numel() == 2);
  pin = col::pinned_tensor{}; // the deleter outlives the store (ASan: no leak)
}

TEST_CASE("device tensors are stored by pointer, never copied") {
  col::object_store store{"n"};
  // A fake device allocation: the store must never touch the memory.
  auto* fake = reinterpret_cast<void*>(uintptr_t{0x1000});
  col::tensor_view view{fake, col::dtype::float16, col::shape_type{4, 4},
                        col::device::cuda(1)};
  auto t = col::tensor::adopt(view, nullptr);
  auto ref = store.put(std::move(t));
  REQUIRE(ref);
  CHECK(ref->dev == col::device::cuda(1));
  auto back = store.get(*ref);
  REQUIRE(back);
  CHECK(back->data() == fake);
  CHECK(back->dev().is_cuda());
  CHECK(store.bytes() == 32);
}

TEST_CASE("concurrent puts and releases keep the counts exact") {
  col::object_store store{"n"};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int j = 0; j < 200; ++j) {
        auto ref = store.put(col::tensor::from_vector(std::vector<int64_t>{j}));
        REQUIRE(ref);
        if (j % 2 == 0) REQUIRE(!store.release(*ref));
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(store.objects() == 400);
  CHECK(store.bytes() == 400 * 8);
}

TEST_CASE("for_node shares one store per node name while it is in use") {
  auto a = col::object_store::for_node("x");
  auto b = col::object_store::for_node("x");
  auto c = col::object_store::for_node("y");
  CHECK(a == b);
  CHECK(a != c);
  auto ref = a->put(col::tensor::from_vector(std::vector<float>{1}));
  a.reset();
  b.reset();
  auto fresh = col::object_store::for_node("x");
  CHECK(fresh->objects() == 0);
  CHECK(!fresh->contains(*ref));
}

TEST_CASE("object_ref survives CAF serialization") {
  caf::actor_system_config cfg;
  col::add_object_store_types(cfg);
  caf::actor_system sys{cfg};
  col::object_ref ref{
    "node", 42, col::dtype::bfloat16, {2, 3, 4}, col::device::cuda(2)};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  auto ser = ref;
  CHECK(!sink(ser));
  col::object_ref back;
  caf::binary_deserializer source{sys, buf};
  CHECK(!source(back));
  CHECK(back == ref);
  auto msg = caf::make_message(ref);
  CHECK(msg.match_element<col::object_ref>(0));
  CHECK(col::to_string(ref) == "obj#42@node bfloat16[2,3,4] cuda:2");
}

TEST_CASE("a shape is serialized exactly like the vector it replaced") {
  // Nodes built before shape_type existed sent std::vector<int64_t>: the
  // bytes on the wire must not change, inline or on the heap.
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  for (std::vector<int64_t> extents :
       {std::vector<int64_t>{}, std::vector<int64_t>{3},
        std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    CAPTURE(extents.size());
    std::vector<char> as_vector;
    caf::binary_serializer vector_sink{sys, as_vector};
    CHECK(!vector_sink(extents));
    col::shape_type shape = extents;
    std::vector<char> as_shape;
    caf::binary_serializer shape_sink{sys, as_shape};
    CHECK(!shape_sink(shape));
    CHECK(as_shape == as_vector);
    col::shape_type back{42}; // loading replaces what was there
    caf::binary_deserializer source{sys, as_vector};
    CHECK(!source(back));
    CHECK(back == shape);
  }
}

TEST_CASE("release_owned_by drops exactly what an owner still holds and "
          "frees its bytes") {
  col::object_store store{"node-a"};
  auto mine1 = store.put(col::tensor::from_vector(std::vector<float>{1, 2}), 7);
  auto mine2 = store.put(col::tensor::from_vector(std::vector<float>{3}), 7);
  auto theirs = store.put(col::tensor::from_vector(std::vector<float>{4}), 8);
  auto nobodys = store.put(col::tensor::from_vector(std::vector<float>{5}));
  REQUIRE((mine1 && mine2 && theirs && nobodys));
  REQUIRE(!store.release(*mine2)); // released before its owner's death
  CHECK(store.release_owned_by(7) == 1);
  CHECK(!store.contains(*mine1));
  CHECK(store.contains(*theirs));
  CHECK(store.contains(*nobodys));
  CHECK(store.bytes() == 2 * sizeof(float));
  CHECK(store.release_owned_by(7) == 0);
}

TEST_CASE("set_owner moves an object from one owner to another") {
  col::object_store store{"node-a"};
  auto moved = store.put(col::tensor::from_vector(std::vector<float>{1}), 7);
  auto stays = store.put(col::tensor::from_vector(std::vector<float>{2}), 7);
  auto orphan = store.put(col::tensor::from_vector(std::vector<float>{3}));
  REQUIRE((moved && stays && orphan));
  REQUIRE(!store.set_owner(*moved, 9));
  REQUIRE(!store.set_owner(*orphan, 9));
  CHECK(store.release_owned_by(7) == 1);
  CHECK(store.contains(*moved));
  CHECK(!store.contains(*stays));
  CHECK(store.release_owned_by(9) == 2);
  CHECK(store.objects() == 0);
  // A released object has no owner to change.
  auto gone = store.set_owner(*moved, 7);
  CHECK(col::code_of(gone) == col::errc::unknown_object);
}

TEST_CASE("read_vector and read_into copy a stored tensor out, refusing "
          "another dtype or count") {
  col::object_store store{"node-a"};
  auto ref = store.put(col::tensor::from_vector(std::vector<int32_t>{4, 5}));
  REQUIRE(ref);
  auto xs = col::read_vector<int32_t>(store, *ref);
  REQUIRE(xs);
  CHECK(*xs == std::vector<int32_t>{4, 5});
  auto wrong = col::read_vector<float>(store, *ref);
  REQUIRE(!wrong);
  CHECK(col::code_of(wrong.error()) == col::errc::mismatch);
  std::vector<int32_t> three(3, -1);
  auto err = col::read_into(
    store, *ref,
    col::tensor_view{three.data(), col::dtype::int32, three.size()});
  CHECK(col::code_of(err) == col::errc::mismatch);
  CHECK(three == std::vector<int32_t>(3, -1)); // nothing copied
  col::object_ref gone = *ref;
  REQUIRE(!store.release(*ref));
  CHECK(col::code_of(col::read_vector<int32_t>(store, gone).error()) ==
        col::errc::unknown_object);
}
