#include "backends/common/stream_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace caf_collective::detail {

void stream_copy(void* dst, const void* src, size_t bytes) noexcept {
#if defined(__x86_64__)
  auto* to = static_cast<std::byte*>(dst);
  const auto* from = static_cast<const std::byte*>(src);
  // Plain stores up to the first 16-byte boundary of `dst` and after the
  // last: a streaming store writes whole aligned 16 bytes.
  auto head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(to) % 16) % 16);
  std::memcpy(to, from, head);
  to += head;
  from += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, to += 64, from += 64) {
    auto a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
    auto b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 16));
    auto c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 32));
    auto d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(to), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 48), d);
  }
  std::memcpy(to, from, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void stream_fence() noexcept {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

} // namespace caf_collective::detail
