// shm backend: what every collective of shm_copies.cpp and
// shm_reductions.cpp publishes at its first step (the notice with its
// agreement key) and the byte views it moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/common/agreement.hpp"
#include "backends/shm/shm_backend.hpp"

namespace caf_collective::detail::shm {

inline std::byte* bytes_of(const tensor_view& x) {
  return static_cast<std::byte*>(x.data());
}

inline std::span<const std::byte> payload_of(const tensor_view& x) {
  return {bytes_of(x), x.nbytes()};
}

inline op_notice make_notice(op_kind op, const tensor_view& in,
                             const tensor_view& out, size_t count, int root,
                             reduce_op red, uint64_t key) {
  op_notice n{};
  n.key = key;
  n.in_addr = reinterpret_cast<uint64_t>(in.data());
  n.out_addr = reinterpret_cast<uint64_t>(out.data());
  n.count = count;
  n.root = root;
  n.op = uint8_t(op);
  n.type = uint8_t(in.type());
  n.reduce = uint8_t(red);
  return n;
}

/// The agreement key of an op: ranks whose keys differ disagree.
inline uint64_t key_of(op_kind op, dtype type, size_t count, int root = -1,
                       reduce_op red = reduce_op::sum) {
  return agreement_key(
    {uint64_t(op), uint64_t(type), count, uint64_t(root), uint64_t(red)});
}

} // namespace caf_collective::detail::shm
