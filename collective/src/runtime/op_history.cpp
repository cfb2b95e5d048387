#include "caf_collective/op_history.hpp"

#include <algorithm>

#include <time.h>

namespace caf_collective {

std::string_view to_string(op_record::phase x) noexcept {
  switch (x) {
    case op_record::phase::queued: return "queued";
    case op_record::phase::running: return "running";
    case op_record::phase::done: return "done";
    default: return "failed";
  }
}

namespace {

long long millis(op_record::clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// The history is printed in milliseconds, when an op timed out: the coarse
// monotonic clock (a few ms resolution, ~5 ns a read here) is precise
// enough and saves ~20 ns per stamp, two stamps per op, against
// steady_clock::now(). It is CLOCK_MONOTONIC, the clock of libstdc++'s
// steady_clock, read less precisely, and never ahead of it.
op_record::clock::time_point stamp() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  auto since_boot =
    std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec};
  return op_record::clock::time_point{
    std::chrono::duration_cast<op_record::clock::duration>(since_boot)};
}

} // namespace

std::string describe(const std::vector<op_record>& records,
                     op_record::clock::time_point now) {
  std::string result;
  for (const auto& r : records) {
    if (!result.empty()) result += '\n';
    result += r.point_to_point ? "p2p seq " : "seq ";
    result += std::to_string(r.seq);
    result += ' ';
    result += to_string(r.op);
    result += ' ';
    result += std::to_string(r.bytes);
    result += " B ";
    result += to_string(r.state);
    switch (r.state) {
      case op_record::phase::queued:
        result += " for " + std::to_string(millis(now - r.submitted)) + " ms";
        break;
      case op_record::phase::running:
        result += " for " + std::to_string(millis(now - r.started)) + " ms";
        break;
      case op_record::phase::done:
        result +=
          " in " + std::to_string(millis(r.finished - r.started)) + " ms";
        break;
      case op_record::phase::failed:
        result += std::string{" ("} + std::string{to_string(r.failure)} +
                  ") after " + std::to_string(millis(r.finished - r.started)) +
                  " ms";
        break;
    }
  }
  return result;
}

void op_history::queued(uint64_t seq, bool p2p, op_kind op, size_t bytes,
                        bool running) {
  if (capacity_ == 0) return;
  op_record r;
  r.seq = seq;
  r.point_to_point = p2p;
  r.op = op;
  r.bytes = bytes;
  r.submitted = stamp();
  if (running) {
    r.state = op_record::phase::running;
    r.started = r.submitted;
  }
  if (ring_.size() < capacity_) {
    if (ring_.empty()) ring_.reserve(capacity_);
    ring_.push_back(r);
    return;
  }
  // A running op stuck behind many queued ones is exactly what a timeout
  // log must still show: drop the oldest finished record, else the oldest
  // queued one, and the oldest of all only when every record runs.
  auto first_where = [this](auto pred) {
    for (size_t i = 0; i < ring_.size(); ++i)
      if (pred(at(i))) return i;
    return ring_.size();
  };
  auto victim = first_where([](const op_record& x) {
    return x.state == op_record::phase::done ||
           x.state == op_record::phase::failed;
  });
  if (victim == ring_.size())
    victim = first_where(
      [](const op_record& x) { return x.state == op_record::phase::queued; });
  if (victim == ring_.size()) victim = 0;
  // The records older than the victim move up one place, into its slot;
  // the oldest slot, free then, becomes the newest.
  for (size_t i = victim; i > 0; --i)
    at(i) = at(i - 1);
  at(0) = r;
  oldest_ = slot(1);
}

void op_history::started(uint64_t seq, bool p2p) {
  if (auto r = find(seq, p2p)) {
    r->state = op_record::phase::running;
    r->started = stamp();
  }
}

void op_history::finished(uint64_t seq, bool p2p, const caf::error& err) {
  if (auto r = find(seq, p2p)) {
    if (r->state == op_record::phase::queued) r->started = r->submitted;
    r->state = err ? op_record::phase::failed : op_record::phase::done;
    r->finished = stamp();
    if (err)
      r->failure =
        is_collective_error(err) ? code_of(err) : errc::backend_error;
  }
}

std::vector<op_record> op_history::snapshot() const {
  std::vector<op_record> result;
  result.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i)
    result.push_back(ring_[slot(i)]);
  return result;
}

op_record* op_history::find(uint64_t seq, bool p2p) {
  for (size_t i = ring_.size(); i > 0; --i) {
    auto& r = at(i - 1);
    if (r.seq == seq && r.point_to_point == p2p) return &r;
  }
  return nullptr;
}

} // namespace caf_collective
