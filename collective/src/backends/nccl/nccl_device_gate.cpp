#include "backends/nccl/nccl_device_gate.hpp"

#include <bit>

namespace caf_collective::detail {

int ctas_per_communicator(int multiprocessors, int slots) noexcept {
  if (multiprocessors <= 0 || slots <= 0) return 1;
  auto share = static_cast<unsigned>(multiprocessors / slots);
  return share == 0 ? 1 : static_cast<int>(std::bit_floor(share));
}

device_gate& device_gate::instance() {
  static device_gate gate;
  return gate;
}

bool device_gate::try_enter(std::span<const int> devices) {
  std::lock_guard<std::mutex> guard{mtx_};
  std::map<int, int> wanted;
  for (auto device : devices)
    ++wanted[device];
  for (auto [device, count] : wanted) {
    auto i = active_.find(device);
    auto used = i == active_.end() ? 0 : i->second;
    if (used + count > slots_) return false;
  }
  for (auto [device, count] : wanted)
    active_[device] += count;
  return true;
}

void device_gate::leave(std::span<const int> devices) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto device : devices) {
    auto i = active_.find(device);
    if (i == active_.end()) continue;
    if (--i->second <= 0) active_.erase(i);
  }
}

int device_gate::active(int device) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = active_.find(device);
  return i == active_.end() ? 0 : i->second;
}

bool gate_pass::try_enter(device_gate& gate, std::span<const int> devices) {
  release();
  if (!gate.try_enter(devices)) return false;
  gate_ = &gate;
  devices_.assign(devices.begin(), devices.end());
  return true;
}

void gate_pass::release() {
  if (gate_ == nullptr) return;
  gate_->leave(devices_);
  gate_ = nullptr;
  devices_.clear();
}

} // namespace caf_collective::detail
