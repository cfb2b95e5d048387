// Names of the vocabulary enums, for errors, logs and command-line flags.
#include <string>

#include "caf_collective/device.hpp"
#include "caf_collective/dtype.hpp"
#include "caf_collective/op_kind.hpp"
#include "caf_collective/reduce_op.hpp"

namespace caf_collective {

namespace {

template<class Enum, size_t N>
std::optional<Enum> parse_by_name(const std::array<Enum, N>& all,
                                  std::string_view name) {
  for (auto x : all)
    if (to_string(x) == name) return x;
  return std::nullopt;
}

} // namespace

std::string_view to_string(dtype t) noexcept {
  switch (t) {
    case dtype::int8: return "int8";
    case dtype::uint8: return "uint8";
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float32: return "float32";
    case dtype::float64: return "float64";
  }
  return "invalid-dtype";
}

std::optional<dtype> parse_dtype(std::string_view name) noexcept {
  if (auto t = parse_by_name(all_dtypes, name)) return t;
  struct alias {
    std::string_view name;
    dtype type;
  };
  static constexpr alias aliases[] = {
    {"i8", dtype::int8},        {"u8", dtype::uint8},
    {"i32", dtype::int32},      {"i64", dtype::int64},
    {"f16", dtype::float16},    {"half", dtype::float16},
    {"bf16", dtype::bfloat16},  {"f32", dtype::float32},
    {"float", dtype::float32},  {"f64", dtype::float64},
    {"double", dtype::float64}, {"int", dtype::int32},
    {"bool", dtype::uint8},
  };
  for (const auto& a : aliases)
    if (a.name == name) return a.type;
  return std::nullopt;
}

std::string_view to_string(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::product: return "product";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    case reduce_op::avg: return "avg";
    case reduce_op::band: return "band";
    case reduce_op::bor: return "bor";
    case reduce_op::bxor: return "bxor";
  }
  return "invalid-reduce-op";
}

std::optional<reduce_op> parse_reduce_op(std::string_view name) noexcept {
  if (name == "prod") return reduce_op::product;
  return parse_by_name(all_reduce_ops, name);
}

std::string_view to_string(op_kind op) noexcept {
  switch (op) {
    case op_kind::send: return "send";
    case op_kind::recv: return "recv";
    case op_kind::broadcast: return "broadcast";
    case op_kind::reduce: return "reduce";
    case op_kind::allreduce: return "allreduce";
    case op_kind::allgather: return "allgather";
    case op_kind::allgatherv: return "allgatherv";
    case op_kind::gather: return "gather";
    case op_kind::scatter: return "scatter";
    case op_kind::reduce_scatter: return "reduce_scatter";
    case op_kind::alltoall: return "alltoall";
    case op_kind::alltoallv: return "alltoallv";
    case op_kind::barrier: return "barrier";
  }
  return "invalid-op";
}

std::optional<op_kind> parse_op_kind(std::string_view name) noexcept {
  return parse_by_name(all_op_kinds, name);
}

std::string_view to_string(device_kind kind) noexcept {
  return kind == device_kind::cpu ? "cpu" : "cuda";
}

std::string to_string(device dev) {
  if (dev.is_cpu()) return "cpu";
  return "cuda:" + std::to_string(dev.index);
}

} // namespace caf_collective
