// How the communicators of this process share a device without deadlock.
//
// An NCCL kernel blocks until its peers arrive. When two communicators run
// kernels on one device at once and the device cannot hold the CTAs of both,
// one kernel waits for SMs that the other holds while that one waits for a
// peer whose device is full in turn: a deadlock NCCL's documentation warns
// about. Running one communicator at a time per device is no cure here: a
// group's send lane and main lane must run side by side (a rank may issue a
// send before a collective that its peer matches the other way round), and
// forcing one order would deadlock correct programs.
//
// So the backend guarantees that the kernels that run together fit
// together:
// - every communicator is created with maxCTAs = ctas_per_communicator of
//   its device (the multiprocessors divided among the slots, rounded down to
//   a power of two, since NCCL rounds its point-to-point channels up to one);
// - at most `slots_per_device` steps of this library run kernels on one
//   device at once: a step takes a slot on each of its devices before it
//   enqueues and gives them back when its kernels finished or were aborted.
// A step that finds no free slot waits for one, polling its deadline and
// the abort flag. The issue order (nccl_issue.hpp) keeps the host side in
// one order per device.
#pragma once

#include <map>
#include <mutex>
#include <span>
#include <vector>

namespace caf_collective::detail {

/// Communicators of this library that may run kernels on one device at once.
inline constexpr int slots_per_device = 4;

/// CTAs one communicator may use on a device with `multiprocessors` SMs, so
/// that `slots` of them fit together: at least 1.
int ctas_per_communicator(int multiprocessors,
                          int slots = slots_per_device) noexcept;

class device_gate {
 public:
  explicit device_gate(int slots = slots_per_device) : slots_(slots) {
    // nop
  }

  /// The gate of this process.
  static device_gate& instance();

  /// Takes one slot on each of `devices`, all or none; false when one of
  /// them is full. The same device listed twice takes two slots.
  bool try_enter(std::span<const int> devices);

  /// Gives back what try_enter took.
  void leave(std::span<const int> devices);

  /// Steps running on `device` now.
  int active(int device) const;

  int slots() const noexcept { return slots_; }

 private:
  mutable std::mutex mtx_;
  std::map<int, int> active_; // guarded by mtx_
  int slots_;
};

/// A step's slots, given back on destruction.
class gate_pass {
 public:
  gate_pass() = default;

  ~gate_pass() { release(); }

  gate_pass(const gate_pass&) = delete;
  gate_pass& operator=(const gate_pass&) = delete;

  /// Tries to take a slot on each of `devices` at `gate`.
  bool try_enter(device_gate& gate, std::span<const int> devices);

  bool held() const noexcept { return gate_ != nullptr; }

  void release();

 private:
  device_gate* gate_ = nullptr;
  std::vector<int> devices_;
};

} // namespace caf_collective::detail
