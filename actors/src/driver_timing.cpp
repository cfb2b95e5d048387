// Per-phase timing of the driver's ops (driver_timing.hpp).
#include "driver_timing.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace caf_collective::detail {

namespace {

double micros(driver_timing::clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  auto mid = xs.begin() + static_cast<std::ptrdiff_t>(xs.size() / 2);
  std::nth_element(xs.begin(), mid, xs.end());
  return *mid;
}

} // namespace

driver_timing::driver_timing() {
  auto env = std::getenv("CAF_COLLECTIVE_DRIVER_TIMING");
  on_ = env != nullptr && *env != '\0' && *env != '0';
}

void driver_timing::answered(const stamps& s) {
  auto now = clock::now();
  start_us_.push_back(micros(s.started - s.arrived));
  first_us_.push_back(micros(s.first_report - s.started));
  spread_us_.push_back(micros(s.last_report - s.first_report));
  answer_us_.push_back(micros(now - s.last_report));
}

std::string driver_timing::summary() const {
  char buf[320];
  auto a = median(start_us_), b = median(first_us_), c = median(spread_us_),
       d = median(answer_us_);
  std::snprintf(buf, sizeof(buf),
                "%zu ops answered, medians in us: arrived -> started %.1f, "
                "started -> first rank's report %.1f, first -> last report "
                "%.1f, last report -> answered %.1f (sum of medians %.1f)",
                start_us_.size(), a, b, c, d, a + b + c + d);
  return buf;
}

} // namespace caf_collective::detail
