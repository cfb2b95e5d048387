// The vocabulary of the collective layer: dtypes, reduce ops, tensors,
// DLPack conversion, error rendering, and the streaming copy the backends'
// reductions write large results with.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/sec.hpp>

#include <caf_collective/config.hpp>
#include <caf_collective/log.hpp>
#if CAF_COLLECTIVE_HAVE_NCCL
#include <caf_collective/nccl_multigpu.hpp>
#endif

#include <fcntl.h>
#include <unistd.h>

#include "backends/common/stream_copy.hpp"
#include "runtime/lazy_deadline.hpp"
#include "test_support.hpp"

namespace col = caf_collective;
using test::half_to_float;

TEST_CASE("dtype sizes names and short names round trip") {
  CHECK(col::size_of(col::dtype::int8) == 1);
  CHECK(col::size_of(col::dtype::uint8) == 1);
  CHECK(col::size_of(col::dtype::float16) == 2);
  CHECK(col::size_of(col::dtype::bfloat16) == 2);
  CHECK(col::size_of(col::dtype::int32) == 4);
  CHECK(col::size_of(col::dtype::float32) == 4);
  CHECK(col::size_of(col::dtype::int64) == 8);
  CHECK(col::size_of(col::dtype::float64) == 8);
  std::set<std::string> names;
  for (auto t : col::all_dtypes) {
    auto name = std::string{col::to_string(t)};
    names.insert(name);
    auto parsed = col::parse_dtype(name);
    REQUIRE(parsed.has_value());
    CHECK(*parsed == t);
  }
  CHECK(names.size() == col::all_dtypes.size());
  CHECK(col::to_string(col::dtype::float32) == "float32");
  CHECK(col::to_string(col::dtype::bfloat16) == "bfloat16");
  CHECK(col::parse_dtype("f32") == col::dtype::float32);
  CHECK(col::parse_dtype("bf16") == col::dtype::bfloat16);
  CHECK(col::parse_dtype("f16") == col::dtype::float16);
  CHECK(col::parse_dtype("f64") == col::dtype::float64);
  CHECK_FALSE(col::parse_dtype("float128").has_value());
  CHECK_FALSE(col::parse_dtype("").has_value());
  CHECK(col::is_floating_point(col::dtype::bfloat16));
  CHECK(col::is_integral(col::dtype::uint8));
  CHECK_FALSE(col::is_integral(col::dtype::float16));
}

TEST_CASE("bitwise reduce ops are defined on integer dtypes only") {
  for (auto t : col::all_dtypes) {
    for (auto op : col::all_reduce_ops) {
      INFO(col::to_string(t) << " " << col::to_string(op));
      bool bitwise = op == col::reduce_op::band || op == col::reduce_op::bor ||
                     op == col::reduce_op::bxor;
      CHECK(col::is_defined(op, t) == (!bitwise || col::is_integral(t)));
      auto parsed = col::parse_reduce_op(col::to_string(op));
      REQUIRE(parsed.has_value());
      CHECK(*parsed == op);
    }
  }
  CHECK_FALSE(col::parse_reduce_op("mean_of_squares").has_value());
}

TEST_CASE("op kinds have distinct names that parse back") {
  std::set<std::string> names;
  for (auto op : col::all_op_kinds) {
    auto name = std::string{col::to_string(op)};
    names.insert(name);
    CHECK(col::parse_op_kind(name) == op);
  }
  CHECK(names.size() == col::all_op_kinds.size());
  CHECK(col::to_string(col::op_kind::reduce_scatter) == "reduce_scatter");
}

TEST_CASE("tensor views count elements and slice") {
  CHECK(col::numel_of({}) == 1);
  CHECK(col::numel_of({0}) == 0);
  CHECK(col::numel_of({2, 3, 4}) == 24);
  std::vector<int32_t> xs(24);
  std::iota(xs.begin(), xs.end(), 0);
  col::tensor_view v{xs.data(), col::dtype::int32, col::shape_type{2, 3, 4}};
  CHECK(v.numel() == 24);
  CHECK(v.nbytes() == 96);
  CHECK(v.shape() == col::shape_type{2, 3, 4});
  CHECK(v.dev() == col::device::cpu());
  auto s = v.slice(5, 7);
  CHECK(s.numel() == 7);
  CHECK(s.type() == col::dtype::int32);
  CHECK(s.data_as<int32_t>() == xs.data() + 5);
  CHECK(s.data_as<int32_t>()[6] == 11);
  auto whole = col::view_of(xs);
  CHECK(whole.numel() == 24);
  CHECK(whole.type() == col::dtype::int32);
  col::tensor_view flat{xs.data(), col::dtype::int32, size_t{10}};
  CHECK(flat.numel() == 10);
  CHECK(flat.shape() == col::shape_type{10});
}

TEST_CASE("shapes keep their extents inline and on the heap alike") {
  // Up to inline_dims extents live in the object; one more moves them to
  // the heap. Every operation must behave the same on both sides.
  constexpr auto inline_dims = col::shape_type::inline_dims;
  for (size_t dims :
       {size_t{0}, size_t{1}, inline_dims, inline_dims + 1, 3 * inline_dims}) {
    CAPTURE(dims);
    std::vector<int64_t> extents(dims);
    std::iota(extents.begin(), extents.end(), 2);
    col::shape_type grown;
    for (auto e : extents)
      grown.push_back(e);
    col::shape_type from_vector = extents;
    col::shape_type from_range(extents.begin(), extents.end());
    CHECK(grown.size() == dims);
    CHECK(grown.empty() == (dims == 0));
    CHECK(grown == from_vector);
    CHECK(grown == from_range);
    CHECK(grown.to_vector() == extents);
    std::vector<int64_t> back = grown;
    CHECK(back == extents);
    auto copy = grown;
    CHECK(copy == grown);
    if (dims > 0) {
      copy[dims - 1] += 1; // a copy owns its extents
      CHECK(copy != grown);
      CHECK(grown.back() == extents.back());
      CHECK(grown.front() == 2);
    }
    auto moved = std::move(copy);
    CHECK(moved.size() == dims);
    CHECK(copy.empty()); // NOLINT: a moved-from shape is empty, and usable
    copy = grown;
    CHECK(copy == grown);
    // insert, as CAF's deserializer appends through std::inserter.
    col::shape_type inserted;
    auto at = inserted.begin();
    for (auto e : extents)
      at = inserted.insert(at, e) + 1;
    CHECK(inserted == grown);
    inserted.insert(inserted.begin(), 1);
    CHECK(inserted.size() == dims + 1);
    CHECK(inserted[0] == 1);
    CHECK(std::equal(inserted.begin() + 1, inserted.end(), extents.begin(),
                     extents.end()));
    inserted.clear();
    CHECK(inserted.empty());
  }
  CHECK(col::shape_type{1, 2} != col::shape_type{1, 2, 1});
  CHECK(col::shape_type{} == col::shape_type{});
}

TEST_CASE("views of shapes longer than the inline extents count elements") {
  std::vector<int32_t> xs(128);
  col::shape_type seven_dims{2, 2, 2, 2, 2, 2, 2};
  REQUIRE(seven_dims.size() > col::shape_type::inline_dims);
  col::tensor_view v{xs.data(), col::dtype::int32, seven_dims};
  CHECK(v.defect() == nullptr);
  CHECK(v.numel() == 128);
  auto copy = v;
  CHECK(copy.shape() == seven_dims);
  CHECK(copy.shape().data() != v.shape().data());
}

TEST_CASE("owning tensors allocate zero clone and copy from vectors") {
  auto e = col::tensor::empty(col::dtype::float64, {3, 5});
  REQUIRE(e);
  CHECK(e->numel() == 15);
  CHECK(e->nbytes() == 120);
  CHECK(e->defined());
  CHECK(reinterpret_cast<uintptr_t>(e->data()) % 64 == 0);
  auto z = col::tensor::zeros(col::dtype::int32, {1000});
  REQUIRE(z);
  auto zp = static_cast<const int32_t*>(z->data());
  CHECK(std::all_of(zp, zp + 1000, [](int32_t x) { return x == 0; }));
  auto zero_sized = col::tensor::zeros(col::dtype::int8, {0});
  REQUIRE(zero_sized);
  CHECK(zero_sized->numel() == 0);
  auto v = col::tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f});
  CHECK(v.type() == col::dtype::float32);
  CHECK(v.shape() == col::shape_type{3});
  CHECK(static_cast<float*>(v.data())[2] == 3.25f);
  auto c = v.clone();
  REQUIRE(c);
  CHECK(c->data() != v.data());
  CHECK(c->shape() == v.shape());
  CHECK(std::memcmp(c->data(), v.data(), v.nbytes()) == 0);
  static_cast<float*>(v.data())[0] = 9;
  CHECK(static_cast<float*>(c->data())[0] == 1.5f); // a deep copy
  col::tensor moved = std::move(*c);
  CHECK(moved.numel() == 3);
}

TEST_CASE("a cuda tensor is refused where no CUDA device can hold it") {
  auto t = col::tensor::empty(col::dtype::float32, {4}, col::device::cuda(0));
#if !CAF_COLLECTIVE_HAVE_NCCL
  // A build without CUDA.
  REQUIRE_FALSE(t);
  CHECK(col::code_of(t.error()) == col::errc::unsupported);
#else
  if (col::cuda_device_count() > 0) {
    REQUIRE(t);
    CHECK(t->dev() == col::device::cuda(0));
  } else {
    // A CUDA build on a machine without a GPU (CI).
    REQUIRE_FALSE(t);
    CHECK(col::code_of(t.error()) == col::errc::unsupported);
    CHECK(col::render(t.error()).find("no usable CUDA device") !=
          std::string::npos);
  }
#endif
}

TEST_CASE("the test support's half conversions round to nearest even") {
  // Independent spot checks of the reference conversions the suites use.
  CHECK(test::float_to_half(1.0f) == 0x3c00);
  CHECK(test::float_to_half(-2.0f) == 0xc000);
  CHECK(test::float_to_half(65504.0f) == 0x7bff);
  CHECK(test::float_to_half(65520.0f) == 0x7c00);
  CHECK(test::float_to_half(0x1p-24f) == 0x0001);
  CHECK(test::float_to_half(1.0f + 0x1p-11f) == 0x3c00);     // tie -> even
  CHECK(test::float_to_half(1.0f + 3 * 0x1p-11f) == 0x3c02); // tie -> even
  CHECK(half_to_float(0x3555) == doctest::Approx(0.333251953125));
  CHECK(test::float_to_bfloat16(1.0f) == 0x3f80);
  CHECK(test::float_to_bfloat16(1.0f + 0x1p-8f) == 0x3f80);     // tie
  CHECK(test::float_to_bfloat16(1.0f + 3 * 0x1p-8f) == 0x3f82); // tie
  for (uint32_t h = 0; h < 0x7c00; ++h)
    if (test::float_to_half(half_to_float(static_cast<uint16_t>(h))) != h)
      FAIL("half " << h << " does not round trip");
}

// -- DLPack
// --------------------------------------------------------------------

namespace {

struct deleter_probe {
  static inline int calls = 0;
  static void run(DLManagedTensor* self) {
    ++calls;
    delete[] static_cast<float*>(self->dl_tensor.data);
    delete[] self->dl_tensor.shape;
    delete self;
  }
};

DLManagedTensor* make_managed(size_t n) {
  auto m = new DLManagedTensor{};
  auto data = new float[n];
  for (size_t i = 0; i < n; ++i)
    data[i] = static_cast<float>(i) * 0.5f;
  m->dl_tensor.data = data;
  m->dl_tensor.device = {kDLCPU, 0};
  m->dl_tensor.ndim = 2;
  m->dl_tensor.dtype = {kDLFloat, 32, 1};
  m->dl_tensor.shape = new int64_t[2]{2, static_cast<int64_t>(n / 2)};
  m->dl_tensor.strides = nullptr;
  m->dl_tensor.byte_offset = 0;
  m->deleter = &deleter_probe::run;
  return m;
}

} // namespace

TEST_CASE("from_dlpack adopts a managed tensor and runs its deleter once") {
  deleter_probe::calls = 0;
  {
    auto t = col::from_dlpack(make_managed(8));
    REQUIRE(t);
    CHECK(t->type() == col::dtype::float32);
    CHECK(t->shape() == col::shape_type{2, 4});
    CHECK(t->numel() == 8);
    CHECK(static_cast<float*>(t->data())[7] == 3.5f);
    CHECK(deleter_probe::calls == 0);
    col::tensor moved = std::move(*t);
    CHECK(deleter_probe::calls == 0);
  }
  CHECK(deleter_probe::calls == 1);
}

TEST_CASE("from_dlpack releases a tensor it rejects") {
  deleter_probe::calls = 0;
  auto m = make_managed(8);
  m->dl_tensor.dtype = {kDLComplex, 64, 1};
  auto t = col::from_dlpack(m);
  CHECK_FALSE(t);
  CHECK(deleter_probe::calls == 1);
}

TEST_CASE("to_dlpack hands a tensor out and back in") {
  auto src = col::tensor::from_vector(std::vector<int64_t>{1, -2, 3, -4});
  auto data = src.data();
  DLManagedTensor* m = col::to_dlpack(std::move(src));
  REQUIRE(m != nullptr);
  CHECK(m->dl_tensor.data == data); // no copy
  CHECK(m->dl_tensor.ndim == 1);
  CHECK(m->dl_tensor.shape[0] == 4);
  CHECK(m->dl_tensor.device.device_type == kDLCPU);
  CHECK(m->dl_tensor.dtype.code == kDLInt);
  CHECK(m->dl_tensor.dtype.bits == 64);
  CHECK(m->dl_tensor.dtype.lanes == 1);
  REQUIRE(static_cast<bool>(m->deleter));
  // Round trip: back into a tensor, which now owns the managed tensor.
  auto back = col::from_dlpack(m);
  REQUIRE(back);
  CHECK(back->type() == col::dtype::int64);
  CHECK(static_cast<int64_t*>(back->data())[3] == -4);
}

TEST_CASE("to_dlpack's deleter frees the tensor when called once") {
  auto src = col::tensor::zeros(col::dtype::bfloat16, {3, 2});
  REQUIRE(src);
  DLManagedTensor* m = col::to_dlpack(std::move(*src));
  REQUIRE(m != nullptr);
  CHECK(m->dl_tensor.dtype.code == kDLBfloat);
  CHECK(m->dl_tensor.dtype.bits == 16);
  CHECK(m->dl_tensor.ndim == 2);
  m->deleter(m); // leak / double free would show under sanitizers
}

TEST_CASE("dtypes map to dlpack and back") {
  for (auto t : col::all_dtypes) {
    INFO(col::to_string(t));
    auto dl = col::to_dlpack_dtype(t);
    CHECK(dl.lanes == 1);
    CHECK(dl.bits == col::size_of(t) * 8);
    auto back = col::from_dlpack_dtype(dl);
    REQUIRE(back);
    CHECK(*back == t);
  }
  CHECK(col::to_dlpack_dtype(col::dtype::bfloat16).code == kDLBfloat);
  CHECK(col::to_dlpack_dtype(col::dtype::float16).code == kDLFloat);
  CHECK(col::to_dlpack_dtype(col::dtype::uint8).code == kDLUInt);
  CHECK(col::to_dlpack_dtype(col::dtype::int8).code == kDLInt);
  auto complex = col::from_dlpack_dtype({kDLComplex, 64, 1});
  REQUIRE_FALSE(complex);
  CHECK(col::code_of(complex.error()) == col::errc::unsupported);
  auto vec = col::from_dlpack_dtype({kDLFloat, 32, 4});
  REQUIRE_FALSE(vec);
  CHECK(col::code_of(vec.error()) == col::errc::unsupported);
  // kDLBool (code 6 since DLPack 0.8): bool tensors travel as uint8.
  auto flags = col::from_dlpack_dtype({6, 8, 1});
  REQUIRE(flags);
  CHECK(*flags == col::dtype::uint8);
}

TEST_CASE("view_of accepts compact strides and rejects others") {
  std::vector<float> xs(12);
  int64_t shape[2] = {3, 4};
  DLTensor dl{};
  dl.data = xs.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = 2;
  dl.dtype = {kDLFloat, 32, 1};
  dl.shape = shape;
  dl.strides = nullptr;
  auto v = col::view_of(dl);
  REQUIRE(v);
  CHECK(v->numel() == 12);
  CHECK(v->data() == xs.data());
  int64_t compact[2] = {4, 1};
  dl.strides = compact;
  CHECK(col::view_of(dl));
  int64_t transposed[2] = {1, 3};
  dl.strides = transposed;
  auto bad = col::view_of(dl);
  REQUIRE_FALSE(bad);
  CHECK(col::code_of(bad.error()) == col::errc::invalid_argument);
  int64_t padded[2] = {8, 1};
  dl.strides = padded;
  auto bad2 = col::view_of(dl);
  REQUIRE_FALSE(bad2);
  CHECK(col::code_of(bad2.error()) == col::errc::invalid_argument);
  // No elements: any strides (torch.empty(3, 0) has {1, 1}).
  int64_t no_columns[2] = {3, 0};
  int64_t torch_strides[2] = {1, 1};
  dl.shape = no_columns;
  dl.strides = torch_strides;
  auto empty = col::view_of(dl);
  REQUIRE(empty);
  CHECK(empty->numel() == 0);
  dl.shape = shape;
  dl.strides = nullptr;
  dl.device = {kDLOpenCL, 0};
  auto other_device = col::view_of(dl);
  REQUIRE_FALSE(other_device);
  CHECK(col::code_of(other_device.error()) == col::errc::unsupported);
}

TEST_CASE("view_of honors the byte offset") {
  std::vector<int32_t> xs{10, 11, 12, 13};
  int64_t shape[1] = {2};
  DLTensor dl{};
  dl.data = xs.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = 1;
  dl.dtype = {kDLInt, 32, 1};
  dl.shape = shape;
  dl.byte_offset = 8;
  auto v = col::view_of(dl);
  REQUIRE(v);
  CHECK(v->data_as<int32_t>()[0] == 12);
}

// -- errors
// --------------------------------------------------------------------

TEST_CASE("errors render with their code group op and detail") {
  col::error_context where{"trainers", col::op_kind::allreduce, 3, 1, 4};
  auto err = col::make_error(col::errc::timeout, where, "rank 2 is late");
  CHECK(col::is_collective_error(err));
  CHECK(col::code_of(err) == col::errc::timeout);
  auto text = col::render(err);
  INFO(text);
  CHECK(text.find("timeout") != std::string::npos);
  CHECK(text.find("trainers") != std::string::npos);
  CHECK(text.find("allreduce") != std::string::npos);
  CHECK(text.find("rank 2 is late") != std::string::npos);
  CHECK(text.find("3") != std::string::npos);
  col::collective_error ex{err};
  CHECK(ex.code() == col::errc::timeout);
  CHECK(std::string{ex.what()} == text);
  CHECK(col::render(caf::error{}) == "none");
  for (int c = 1; c <= static_cast<int>(col::errc::unknown_object); ++c) {
    auto code = static_cast<col::errc>(c);
    auto name = std::string{col::to_string(code)};
    CHECK(col::render(col::make_error(code, "x")).find(name) !=
          std::string::npos);
  }
  CHECK_THROWS_AS(col::throw_if(err), col::collective_error);
  CHECK_NOTHROW(col::throw_if(caf::error{}));
}

TEST_CASE("caf errors of other categories are not collective errors") {
  caf::error err = caf::sec::request_timeout;
  CHECK_FALSE(col::is_collective_error(err));
  CHECK(col::code_of(err) != col::errc::timeout);
  CHECK(col::render(err).find("request_timeout") != std::string::npos);
}

TEST_CASE(
  "an actor system renders collective errors after add_error_category") {
  caf::actor_system_config cfg;
  col::add_error_category(cfg);
  caf::actor_system sys{cfg};
  auto err = col::make_error(
    col::errc::invalid_argument,
    col::error_context{"g1", col::op_kind::gather, 0, 2, 3}, "root 5");
  auto text = sys.render(err);
  INFO(text);
  CHECK(text.find("invalid_argument") != std::string::npos);
  CHECK(text.find("g1") != std::string::npos);
  CHECK(text.find("gather") != std::string::npos);
  CHECK(text.find("root 5") != std::string::npos);
}

TEST_CASE("the op history keeps the newest records and tracks their phase") {
  col::op_history h{3};
  for (uint64_t seq = 0; seq < 4; ++seq)
    h.queued(seq, false, col::op_kind::allreduce, 8 * seq);
  h.queued(0, true, col::op_kind::send, 16); // p2p numbers are separate
  h.started(2, false);
  h.finished(2, false, {});
  h.started(3, false);
  h.finished(3, false,
             col::make_error(col::errc::peer_lost, "rank 1 went away"));
  h.finished(0, false, {}); // evicted: ignored
  auto rs = h.snapshot();
  REQUIRE(rs.size() == 3);
  CHECK(rs[0].seq == 2);
  CHECK(rs[0].state == col::op_record::phase::done);
  CHECK(rs[1].state == col::op_record::phase::failed);
  CHECK(rs[1].failure == col::errc::peer_lost);
  CHECK(rs[2].point_to_point);
  CHECK(rs[2].state == col::op_record::phase::queued);
  auto text = col::describe(rs);
  CHECK(text.find("seq 2 allreduce 16 B done in ") != std::string::npos);
  CHECK(text.find("seq 3 allreduce 24 B failed (peer_lost) after ") !=
        std::string::npos);
  CHECK(text.find("p2p seq 0 send 16 B queued for ") != std::string::npos);
}

TEST_CASE("a full op history drops finished, then queued records before a "
          "running one") {
  col::op_history h{3};
  h.queued(0, false, col::op_kind::allreduce, 8);
  h.started(0, false); // stuck: never finishes
  h.queued(1, false, col::op_kind::barrier, 0);
  h.finished(1, false, {});
  for (uint64_t seq = 2; seq < 6; ++seq)
    h.queued(seq, false, col::op_kind::broadcast, 8);
  auto rs = h.snapshot();
  REQUIRE(rs.size() == 3);
  CHECK(rs[0].seq == 0); // the stuck op stays
  CHECK(rs[0].state == col::op_record::phase::running);
  CHECK(rs[1].seq == 4);
  CHECK(rs[2].seq == 5);
}

TEST_CASE("a lazy deadline starts counting at its first use") {
  using clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  caf_collective::detail::lazy_deadline deadline{milliseconds{50}};
  auto first = clock::now() + milliseconds{7};
  CHECK(deadline.given(first) == first + milliseconds{50});
  // Fixed by the first call: a later wait of the same op keeps it.
  CHECK(deadline.given(first + milliseconds{30}) == first + milliseconds{50});
  auto at = clock::now();
  auto fixed = caf_collective::detail::lazy_deadline::fixed(at);
  CHECK(fixed.given(at + milliseconds{5}) == at);
  auto never = caf_collective::detail::lazy_deadline::never();
  CHECK(never.given(at) == clock::time_point::max());
}

TEST_CASE("large host blocks are recycled through the host cache") {
  auto capacity = col::host_cache_capacity();
  // Whatever $CAF_COLLECTIVE_HOST_CACHE_MB says, cache here.
  col::set_host_cache_capacity(size_t{64} << 20);
  col::trim_host_cache();
  REQUIRE(col::host_cache_bytes() == 0);
  void* first = nullptr;
  {
    auto t = col::tensor::empty(col::dtype::float32, {256 * 1024}); // 1 MiB
    REQUIRE(t);
    first = t->data();
  }
  CHECK(col::host_cache_bytes() == size_t{1} << 20);
  {
    // A slightly smaller request falls in the same size class.
    auto t = col::tensor::empty(col::dtype::uint8, {(1 << 20) - 4096});
    REQUIRE(t);
    CHECK(t->data() == first);
    CHECK(reinterpret_cast<uintptr_t>(t->data()) % 64 == 0);
    CHECK(col::host_cache_bytes() == 0);
  }
  {
    // Small blocks come from the heap and are not cached.
    auto t = col::tensor::empty(col::dtype::float32, {100});
    REQUIRE(t);
  }
  CHECK(col::host_cache_bytes() == size_t{1} << 20);
  // Shrinking the capacity frees what no longer fits; 0 turns caching off.
  col::set_host_cache_capacity(0);
  CHECK(col::host_cache_bytes() == 0);
  {
    auto t = col::tensor::empty(col::dtype::float32, {256 * 1024});
    REQUIRE(t);
  }
  CHECK(col::host_cache_bytes() == 0);
  col::set_host_cache_capacity(size_t{64} << 20);
  {
    auto t = col::tensor::empty(col::dtype::float64, {100000});
    REQUIRE(t);
  }
  CHECK(col::host_cache_bytes() > 0);
  col::trim_host_cache();
  CHECK(col::host_cache_bytes() == 0);
  CHECK(col::host_cache_capacity() == size_t{64} << 20);
  col::set_host_cache_capacity(capacity);
}

TEST_CASE("a host allocation too large to round up fails cleanly") {
  // 2 x (15 * 2^59 + 1) bytes: rounding to a size class would wrap around.
  auto t = col::tensor::empty(col::dtype::uint8, {2, (int64_t{15} << 59) + 1});
  REQUIRE(!t);
  CHECK(col::code_of(t.error()) == col::errc::out_of_memory);
}

TEST_CASE("the streaming copy writes exactly its bytes at every alignment") {
  // Heads before the first 16-byte boundary, whole 64-byte runs and tails,
  // at every offset of source and destination against each other.
  std::vector<std::byte> src(600);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = std::byte(i * 7 + 3);
  for (size_t dst_off = 0; dst_off < 16; ++dst_off)
    for (size_t src_off : {size_t{0}, size_t{1}, size_t{8}, size_t{13}})
      for (size_t len :
           {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{63},
            size_t{64}, size_t{65}, size_t{200}, size_t{511}}) {
        std::vector<std::byte> dst(600, std::byte{0xee});
        col::detail::stream_copy(dst.data() + dst_off, src.data() + src_off,
                                 len);
        col::detail::stream_fence();
        INFO("dst offset " << dst_off << ", src offset " << src_off
                           << ", length " << len);
        CHECK(std::memcmp(dst.data() + dst_off, src.data() + src_off, len) ==
              0);
        bool untouched = true;
        for (size_t i = 0; i < dst.size(); ++i)
          if ((i < dst_off || i >= dst_off + len) && dst[i] != std::byte{0xee})
            untouched = false;
        CHECK(untouched);
      }
}

TEST_CASE("a log level the library does not know keeps warnings on and says "
          "so") {
  // spdlog reads an unknown name as "off": before, a typo in
  // CAF_COLLECTIVE_LOG_LEVEL silenced every warning.
  auto captured = std::filesystem::temp_directory_path() /
                  ("caf_collective_log_" + std::to_string(getpid()));
  std::fflush(stderr);
  int saved = dup(2);
  REQUIRE(saved >= 0);
  int file = open(captured.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(file >= 0);
  dup2(file, 2);
  close(file);
  setenv("CAF_COLLECTIVE_LOG_LEVEL", "loud", 1);
  // A logger made now reads the variable.
  col::log_warning("level-typo-check", "still heard");
  unsetenv("CAF_COLLECTIVE_LOG_LEVEL");
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::ifstream in{captured};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  std::filesystem::remove(captured);
  INFO(text);
  CHECK(text.find("still heard") != std::string::npos);
  CHECK(text.find("CAF_COLLECTIVE_LOG_LEVEL='loud' is not one of") !=
        std::string::npos);
}
