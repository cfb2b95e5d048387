// Gloo slot numbers of the messages this backend sends itself. Gloo's
// options-API collectives put a one-byte prefix into the top byte of a
// slot and legacy algorithms count up from zero; ours use prefixes Gloo
// does not, so they never match another operation's messages.
#pragma once

#include <cstddef>
#include <cstdint>

namespace caf_collective::detail {

inline constexpr uint64_t slot_prefix(uint8_t prefix) noexcept {
  return static_cast<uint64_t>(prefix) << 56;
}

/// send/recv: matched by (peer, user tag, size, dtype), in order. With the
/// size in the slot a recv of another size never matches the send (Gloo
/// would terminate the process on the size mismatch), and with the dtype a
/// recv of another one never reads the bytes as its own; both time out
/// instead.
inline constexpr uint64_t p2p_slot(uint32_t tag, size_t nbytes,
                                   uint8_t type) noexcept {
  auto mixed = (static_cast<uint64_t>(tag) * 0x9e3779b97f4a7c15ull) ^
               (static_cast<uint64_t>(nbytes) * 0xc2b2ae3d27d4eb4full) ^
               (static_cast<uint64_t>(type + 1) * 0x165667b19e3779f9ull);
  return slot_prefix(0x71) | (mixed & 0x00ffffffffffffffull);
}

/// Our ring reduce-scatter, one slot per operation.
inline constexpr uint64_t reduce_scatter_slot(uint32_t tag) noexcept {
  return slot_prefix(0x72) | tag;
}

/// Tag of the barrier a backend runs before it closes its connections;
/// operation tags stay below 2^31.
inline constexpr uint32_t shutdown_tag = 0xfffffff0u;

/// Gloo refuses null buffers even for zero bytes; point those at this.
inline void* non_null(void* ptr) noexcept {
  static char dummy;
  return ptr != nullptr ? ptr : &dummy;
}

} // namespace caf_collective::detail
