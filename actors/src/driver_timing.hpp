// Where the time of a driver round trip goes. Off unless the environment
// sets CAF_COLLECTIVE_DRIVER_TIMING (then one branch per op); on, the
// driver stamps every op it answers and logs the median of each phase when
// it stops: validation and start (arrived -> started), the ranks' first
// and last reports (which include driver -> member -> lane -> op -> lane
// -> member -> driver) and the answer. The client's own hops are the
// client's round trip minus the total logged here.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace caf_collective::detail {

class driver_timing {
 public:
  using clock = std::chrono::steady_clock;

  /// The stamps of one op; all zero while timing is off.
  struct stamps {
    clock::time_point arrived;
    clock::time_point started;
    clock::time_point first_report;
    clock::time_point last_report;
  };

  /// Reads CAF_COLLECTIVE_DRIVER_TIMING once.
  driver_timing();

  bool on() const noexcept { return on_; }

  /// Now, or a zero time point while timing is off.
  clock::time_point now() const noexcept {
    return on_ ? clock::now() : clock::time_point{};
  }

  /// Records an op that was answered just now.
  void answered(const stamps& s);

  /// The medians of each phase over every recorded op, one line.
  std::string summary() const;

 private:
  bool on_ = false;
  // Per op, in microseconds: start, first report, last report, answer.
  std::vector<double> start_us_, first_us_, spread_us_, answer_us_;
};

} // namespace caf_collective::detail
