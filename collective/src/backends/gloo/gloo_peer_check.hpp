// Keeps Gloo's formation inside the group's deadline. Gloo connects to one
// peer after the other, and a pair waits up to five times the context's
// timeout for its peer; a peer that never listens (it never started, or
// its address in a reused store is left over from an earlier run) would
// hold formation far past the deadline. So before Gloo connects anything,
// every rank proves it is alive and checks that its peers are, all within
// the deadline; otherwise formation fails with errc::timeout naming the
// ranks.
//
// Gloo's own listening sockets cannot be probed: each pair listens on its
// own socket and takes the first connection as its peer. Each rank opens a
// separate liveness socket instead: a listening socket nobody accepts on (a
// connect to it completes in the kernel), open until the rank's check is
// done, published as "alive/<rank>". A stale entry names a closed port and
// is refused.
#pragma once

#include <chrono>
#include <string>

#include <caf/error.hpp>

#include "caf_collective/rendezvous.hpp"

#include <sys/socket.h>

namespace caf_collective::detail {

/// Connects to `addr` without blocking and closes at once: whether
/// something accepted within `limit`.
bool accepts_connection(const sockaddr* addr, socklen_t len,
                        std::chrono::milliseconds limit);

/// One rank's side of the check. Open it before the first peer key is
/// read; it closes its liveness socket when destroyed.
class peer_check {
 public:
  peer_check(int rank, int world_size);
  ~peer_check();
  peer_check(const peer_check&) = delete;
  peer_check& operator=(const peer_check&) = delete;

  /// Publishes this rank's liveness address (bound on `host`, the address
  /// the Gloo device uses), then waits until every peer's liveness address
  /// answers and every peer published "checked/<rank>" with the liveness
  /// address it is reachable at (so a confirmation left by an earlier run
  /// does not count). Re-reads an address that does not answer: a live
  /// peer may still overwrite a stale one. Fails with errc::timeout naming
  /// every rank that did not publish, answer or confirm by `deadline`, or
  /// with the store's own error.
  caf::error run(rendezvous_store& store, const std::string& host,
                 std::chrono::steady_clock::time_point deadline);

 private:
  int rank_;
  int world_size_;
  int fd_ = -1;
};

} // namespace caf_collective::detail
