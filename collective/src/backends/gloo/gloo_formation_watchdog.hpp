// Ends Gloo's connect phase at the formation deadline. A pair on the
// listening side of a connection waits up to five times the context's
// timeout for its peer, and the peer check (gloo_peer_check.hpp) cannot
// rule out a peer that stops or dies after it passed. At the deadline, the
// watchdog connects to this rank's own pair listeners that are still
// waiting and closes each connection at once: Gloo takes it for the peer,
// reads the end of the stream and fails the formation, which then reports
// a timeout naming those peers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace caf_collective::detail {

/// Runs `ring` on a thread of its own at `deadline` unless stopped first.
/// Serves the watchdog below, and Gloo's warm-up exchange after the
/// connect phase: it waits with the connections' timeout, the group's,
/// which can be far past the formation deadline, so a peer that stalls
/// after connecting would hold the formation that long; the alarm aborts
/// the backend at the deadline instead.
class deadline_alarm {
 public:
  deadline_alarm(std::chrono::steady_clock::time_point deadline,
                 std::function<void()> ring);

  /// Stops the alarm (stop()).
  ~deadline_alarm();

  deadline_alarm(const deadline_alarm&) = delete;
  deadline_alarm& operator=(const deadline_alarm&) = delete;

  /// Returns once the alarm cannot ring any more (it rang already, or
  /// never will).
  void stop();

 private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_; // last: starts once the members above exist
};

class formation_watchdog {
 public:
  /// `own_addresses` returns what this rank published for Gloo's full mesh:
  /// one serialized listening address per peer, in rank order.
  formation_watchdog(int rank, int world_size,
                     std::chrono::steady_clock::time_point deadline,
                     std::function<std::vector<char>()> own_addresses);

  /// Stops the watchdog (stop()).
  ~formation_watchdog();

  formation_watchdog(const formation_watchdog&) = delete;
  formation_watchdog& operator=(const formation_watchdog&) = delete;

  /// Gloo's connect phase is over: the watchdog stands down (waits for a
  /// check that is running).
  void stop();

  /// The peers whose connection to this rank was still not established at
  /// the deadline; empty when the watchdog did not fire. Stops it first.
  std::vector<int> late_peers();

 private:
  void fire();

  int rank_;
  int world_size_;
  std::function<std::vector<char>()> own_addresses_;
  std::vector<int> late_; // written by fire(), read once the alarm stopped
  std::optional<deadline_alarm> alarm_; // last: rings fire(); none for 1 rank
};

} // namespace caf_collective::detail
