// Where a tensor's memory lives.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace caf_collective {

enum class device_kind : uint8_t {
  cpu,
  cuda,
};

std::string_view to_string(device_kind kind) noexcept;

/// A memory location: host memory, or the memory of one CUDA device.
struct device {
  device_kind kind = device_kind::cpu;
  /// CUDA device ordinal; always 0 for the CPU.
  int32_t index = 0;

  static constexpr device cpu() noexcept { return {}; }

  static constexpr device cuda(int32_t ordinal) noexcept {
    return {device_kind::cuda, ordinal};
  }

  constexpr bool is_cpu() const noexcept { return kind == device_kind::cpu; }

  constexpr bool is_cuda() const noexcept { return kind == device_kind::cuda; }

  friend constexpr bool operator==(device, device) noexcept = default;
};

/// "cpu" or "cuda:N".
std::string to_string(device dev);

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, device& x) {
  return f(x.kind, x.index);
}

} // namespace caf_collective
