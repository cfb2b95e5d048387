// dtypes, reduce ops, tensors, DLPack and error rendering.
#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "test_support.hpp"

using namespace test;

TEST_CASE("dtypes have sizes, names and parse back") {
  CHECK(col::size_of(col::dtype::int8) == 1);
  CHECK(col::size_of(col::dtype::bfloat16) == 2);
  CHECK(col::size_of(col::dtype::float32) == 4);
  CHECK(col::size_of(col::dtype::int64) == 8);
  for (auto t : col::all_dtypes) {
    auto parsed = col::parse_dtype(col::to_string(t));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == t);
  }
  CHECK(col::parse_dtype("bf16") == col::dtype::bfloat16);
  CHECK_FALSE(col::parse_dtype("complex64").has_value());
  CHECK(col::is_floating_point(col::dtype::float16));
  CHECK(col::is_integral(col::dtype::uint8));
}

TEST_CASE("bitwise reduce ops are defined on integers only") {
  CHECK(col::is_defined(col::reduce_op::bxor, col::dtype::int32));
  CHECK_FALSE(col::is_defined(col::reduce_op::band, col::dtype::float32));
  CHECK(col::is_defined(col::reduce_op::avg, col::dtype::int8));
  for (auto op : col::all_reduce_ops)
    CHECK(col::parse_reduce_op(col::to_string(op)) == op);
}

TEST_CASE("tensors own memory, views borrow it") {
  auto t = col::tensor::zeros(col::dtype::float32, {2, 3});
  REQUIRE(t);
  CHECK(t->numel() == 6);
  CHECK(t->nbytes() == 24);
  CHECK(t->shape() == col::shape_type{2, 3});
  CHECK(t->view().data_as<float>()[5] == 0.0f);
  t->view().data_as<float>()[5] = 7.0f;
  auto copy = t->clone();
  REQUIRE(copy);
  CHECK(copy->data() != t->data());
  CHECK(copy->view().data_as<float>()[5] == 7.0f);
  auto slice = t->view().slice(4, 2);
  CHECK(slice.numel() == 2);
  CHECK(slice.data_as<float>()[1] == 7.0f);
  auto from = col::tensor::from_vector(std::vector<int64_t>{1, 2, 3});
  CHECK(from.type() == col::dtype::int64);
  CHECK(from.view().data_as<int64_t>()[2] == 3);
  CHECK(col::numel_of({}) == 1);
  CHECK(col::numel_of({4, 0}) == 0);
  auto bad = col::tensor::empty(col::dtype::int8, {-1});
  CHECK_FALSE(bad);
  CHECK(col::code_of(bad.error()) == col::errc::invalid_argument);
}

TEST_CASE("DLPack round trip keeps data, dtype and shape, and frees once") {
  auto t = col::tensor::from_vector(std::vector<float>{1, 2, 3, 4});
  auto* data = t.data();
  auto* managed = col::to_dlpack(std::move(t));
  REQUIRE(managed != nullptr);
  CHECK(managed->dl_tensor.ndim == 1);
  CHECK(managed->dl_tensor.shape[0] == 4);
  CHECK(managed->dl_tensor.dtype.code == kDLFloat);
  CHECK(managed->dl_tensor.dtype.bits == 32);
  CHECK(managed->dl_tensor.data == data);
  auto back = col::from_dlpack(managed);
  REQUIRE(back);
  CHECK(back->data() == data);
  CHECK(back->type() == col::dtype::float32);
  CHECK(back->view().data_as<float>()[3] == 4.0f);
}

namespace {

int deleter_calls = 0;

void count_deleter(DLManagedTensor*) {
  ++deleter_calls;
}

} // namespace

TEST_CASE("from_dlpack runs the producer's deleter exactly once") {
  int16_t storage[6] = {};
  int64_t shape[2] = {2, 3};
  DLManagedTensor managed{};
  managed.dl_tensor.data = storage;
  managed.dl_tensor.device = {kDLCPU, 0};
  managed.dl_tensor.ndim = 2;
  managed.dl_tensor.dtype = {kDLBfloat, 16, 1};
  managed.dl_tensor.shape = shape;
  managed.deleter = count_deleter;
  deleter_calls = 0;
  {
    auto t = col::from_dlpack(&managed);
    REQUIRE(t);
    CHECK(t->type() == col::dtype::bfloat16);
    CHECK(t->numel() == 6);
    CHECK(deleter_calls == 0);
  }
  CHECK(deleter_calls == 1);
  // Unsupported dtypes are refused, and the tensor is still released.
  managed.dl_tensor.dtype = {kDLFloat, 32, 4};
  auto refused = col::from_dlpack(&managed);
  CHECK_FALSE(refused);
  CHECK(col::code_of(refused.error()) == col::errc::unsupported);
  CHECK(deleter_calls == 2);
}

TEST_CASE("DLPack views refuse non-contiguous strides") {
  float storage[6] = {};
  int64_t shape[2] = {2, 3};
  int64_t strides[2] = {1, 2}; // column-major
  DLTensor dl{};
  dl.data = storage;
  dl.device = {kDLCPU, 0};
  dl.ndim = 2;
  dl.dtype = {kDLFloat, 32, 1};
  dl.shape = shape;
  dl.strides = strides;
  auto view = col::view_of(dl);
  CHECK_FALSE(view);
  CHECK(col::code_of(view.error()) == col::errc::invalid_argument);
  int64_t row_major[2] = {3, 1};
  dl.strides = row_major;
  CHECK(col::view_of(dl));
}

TEST_CASE("errors render readably, with and without an actor system") {
  col::error_context where{"grads", col::op_kind::allreduce, 4, 1, 3};
  auto err = col::make_error(col::errc::timeout, where, "peer 2 is slow");
  CHECK(col::is_collective_error(err));
  CHECK(col::code_of(err) == col::errc::timeout);
  auto text = col::render(err);
  CHECK(text.find("collective.timeout") != std::string::npos);
  CHECK(text.find("group 'grads'") != std::string::npos);
  CHECK(text.find("allreduce seq 4 rank 1/3") != std::string::npos);
  CHECK(text.find("peer 2 is slow") != std::string::npos);
  caf::actor_system_config cfg;
  col::add_error_category(cfg);
  caf::actor_system sys{cfg};
  CHECK(sys.render(err) == text);
  col::collective_error ex{err};
  CHECK(ex.code() == col::errc::timeout);
  CHECK(std::string{ex.what()} == text);
}

TEST_CASE("rendezvous stores hand values to waiting readers and time out") {
  auto store = col::make_in_process_store();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    CHECK_FALSE(store->set("k", {'v'}));
  });
  auto value = store->get("k", std::chrono::seconds{5});
  writer.join();
  REQUIRE(value);
  CHECK(*value == std::vector<char>{'v'});
  auto missing = store->get("nope", std::chrono::milliseconds{50});
  REQUIRE_FALSE(missing);
  CHECK(col::code_of(missing.error()) == col::errc::timeout);
  CHECK(col::render(missing.error()).find("'nope'") != std::string::npos);
  auto prefixed = col::make_prefix_store("p", store);
  CHECK_FALSE(prefixed->set("x", {'1'}));
  CHECK(store->get("p/x", std::chrono::milliseconds{10}));
}

TEST_CASE("the file store shares keys through a directory") {
  auto dir = std::filesystem::temp_directory_path() /
             ("caf_collective_store_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto a = col::make_file_store(dir.string());
  auto b = col::make_file_store(dir.string());
  CHECK_FALSE(a->set("group/key", {'a', 'b'}));
  auto value = b->get("group/key", std::chrono::seconds{1});
  REQUIRE(value);
  CHECK(*value == std::vector<char>{'a', 'b'});
  CHECK_FALSE(b->get("absent", std::chrono::milliseconds{30}));
  std::filesystem::remove_all(dir);
}
