// One options struct per operation. Every field has a usable default; a
// timeout of zero means "the group's default timeout".
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "caf_collective/reduce_op.hpp"

namespace caf_collective {

using milliseconds = std::chrono::milliseconds;

/// The longest deadline a group or an operation accepts (24 h). Longer ones
/// are refused: a deadline near the clock's range overflows "now + timeout"
/// inside the transports and would fire at once or never.
inline constexpr milliseconds max_timeout = std::chrono::hours{24};

struct op_options {
  /// Deadline of this operation; zero: the group's default.
  milliseconds timeout{0};
};

struct send_options : op_options {
  /// Receiving rank; must differ from the caller's rank.
  int peer = -1;
  /// User tag; a recv matches a send with the same (peer, tag).
  uint32_t tag = 0;
};

struct recv_options : op_options {
  /// Sending rank; must differ from the caller's rank.
  int peer = -1;
  uint32_t tag = 0;
};

struct broadcast_options : op_options {
  int root = 0;
};

struct reduce_options : op_options {
  int root = 0;
  reduce_op op = reduce_op::sum;
};

/// Allreduce algorithms. `automatic` picks by message size (see
/// docs/algorithms.md); the others force one algorithm.
enum class allreduce_algorithm : uint8_t {
  automatic,
  /// Gloo's classic ring (AllreduceRing): fewest round trips for small data.
  ring,
  /// Gloo's chunked ring (AllreduceRingChunked): pipelines large buffers.
  ring_chunked,
  /// Gloo's halving-doubling (AllreduceHalvingDoubling).
  halving_doubling,
  /// Gloo's bcube algorithm through the options API.
  bcube,
  /// Gloo's options-API ring (gloo::allreduce default).
  ring_options_api,
};

struct allreduce_options : op_options {
  reduce_op op = reduce_op::sum;
  allreduce_algorithm algorithm = allreduce_algorithm::automatic;
};

struct allgather_options : op_options {};

struct allgatherv_options : op_options {
  /// Elements contributed by each rank; size must equal the world size.
  std::vector<size_t> counts;
};

struct gather_options : op_options {
  int root = 0;
};

struct scatter_options : op_options {
  int root = 0;
};

struct reduce_scatter_options : op_options {
  reduce_op op = reduce_op::sum;
};

struct alltoall_options : op_options {};

struct alltoallv_options : op_options {
  /// Elements this rank sends to each rank (world size entries).
  std::vector<size_t> send_counts;
  /// Elements this rank receives from each rank (world size entries).
  std::vector<size_t> recv_counts;
};

struct barrier_options : op_options {};

} // namespace caf_collective
