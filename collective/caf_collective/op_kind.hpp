// The collective and point-to-point operations, as one enum for errors,
// capability queries, logs and the driver protocol.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace caf_collective {

enum class op_kind : uint8_t {
  send,
  recv,
  broadcast,
  reduce,
  allreduce,
  allgather,
  allgatherv,
  gather,
  scatter,
  reduce_scatter,
  alltoall,
  alltoallv,
  barrier,
};

inline constexpr std::array<op_kind, 13> all_op_kinds = {
  op_kind::send,           op_kind::recv,      op_kind::broadcast,
  op_kind::reduce,         op_kind::allreduce, op_kind::allgather,
  op_kind::allgatherv,     op_kind::gather,    op_kind::scatter,
  op_kind::reduce_scatter, op_kind::alltoall,  op_kind::alltoallv,
  op_kind::barrier,
};

/// Whether `op` is one of the enumerators above (see is_valid(dtype)).
constexpr bool is_valid(op_kind op) noexcept {
  return static_cast<uint8_t>(op) <= static_cast<uint8_t>(op_kind::barrier);
}

std::string_view to_string(op_kind op) noexcept;

std::optional<op_kind> parse_op_kind(std::string_view name) noexcept;

} // namespace caf_collective
