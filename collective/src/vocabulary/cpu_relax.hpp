// The pause of a spin loop: tells the core that this thread only waits, so
// a sibling hyperthread gets the pipeline, and the loop ends without a
// pipeline flush.
#pragma once

namespace caf_collective::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

} // namespace caf_collective::detail
