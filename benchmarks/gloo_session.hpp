// Raw Gloo plumbing shared by the raw-gloo paths and the runner's control
// channel: forming a context on a store prefix, the SO_SNDBUF warm-up, and
// rank-wide barriers and reductions of measurements.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/rendezvous/store.h>

namespace caf_collective::bench {

/// Connects a full mesh of `ranks` over loopback TCP under `prefix` of
/// `store` (a HashStore shared by threads, or a FileStore for processes).
std::shared_ptr<gloo::Context> connect_gloo(gloo::rendezvous::Store& store,
                                            const std::string& prefix, int rank,
                                            int ranks,
                                            std::chrono::milliseconds timeout);

/// Sends `bytes` once over every pair's buffer path (the path that pins
/// SO_SNDBUF on its first message), as our backend's group warm-up does:
/// gives raw Gloo the same connection history as our groups.
void warm_up_pairs(gloo::Context& ctx, size_t bytes);

/// The bytes our backend's warm-up sends per pair (gloo_backend.cpp).
inline constexpr size_t backend_warm_up_bytes = size_t{1} << 20;

/// Out-of-band coordination of the ranks of one run; never timed.
class control_channel {
 public:
  explicit control_channel(std::shared_ptr<gloo::Context> ctx);

  void barrier();

  /// Element-wise maximum of `xs` over all ranks, in place.
  void max(std::vector<double>& xs);

  /// Sum of `x` over all ranks.
  double sum(double x);

 private:
  std::shared_ptr<gloo::Context> ctx_;
  uint32_t tag_ = 0;
};

} // namespace caf_collective::bench
