// Ops started without blocking (shm_arrivals.hpp): the records, their
// claims, and the watchdog thread that ends them at their deadline.
#include "backends/shm/shm_arrivals.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/shm/shm_segment.hpp"

namespace caf_collective::detail::shm {

namespace {

// How often the watchdog looks at the records while any hub exists: a
// timeout is reported at most this late. Waking 50 times a second costs
// nothing measurable; waking it at every op would cost a thread switch.
constexpr auto watch_period = std::chrono::milliseconds{20};

// Every hub of this process, by segment name, and the thread that ends
// their ops at the deadline. Never destroyed: the detached thread may
// outlive static destruction at exit.
class watchdog {
 public:
  static watchdog& instance() {
    static auto* result = new watchdog;
    return *result;
  }

  std::shared_ptr<arrival_hub>
  hub_of(const std::string& name, const std::string& group, int world_size) {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto i = hubs_.begin(); i != hubs_.end();)
      i = i->second.expired() ? hubs_.erase(i) : std::next(i);
    if (auto known = hubs_[name].lock()) return known;
    auto created = std::make_shared<arrival_hub>(group, world_size);
    hubs_[name] = created;
    if (!started_) {
      started_ = true;
      std::thread{[this] { run(); }}.detach();
    }
    cv_.notify_one();
    return created;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> guard{mtx_};
    for (;;) {
      if (hubs_.empty())
        cv_.wait(guard);
      else
        cv_.wait_for(guard, watch_period);
      std::vector<std::shared_ptr<arrival_hub>> live;
      for (auto i = hubs_.begin(); i != hubs_.end();) {
        if (auto hub = i->second.lock()) {
          live.push_back(std::move(hub));
          ++i;
        } else {
          i = hubs_.erase(i);
        }
      }
      // Completions run user callbacks: never under the lock.
      guard.unlock();
      auto now = arrival_hub::clock::now();
      for (auto& hub : live)
        hub->expire(now);
      live.clear();
      guard.lock();
    }
  }

  std::mutex mtx_;
  std::condition_variable cv_;
  std::map<std::string, std::weak_ptr<arrival_hub>> hubs_;
  bool started_ = false;
};

} // namespace

std::string not_arrived_text(milliseconds timeout,
                             const std::vector<int>& missing) {
  return "not finished within " + std::to_string(timeout.count()) +
         " ms: ranks " + list_ranks(missing) +
         " did not arrive (they did not call this operation, are too slow or "
         "stopped)";
}

arrival_hub::arrival_hub(std::string group, int world_size)
  : group_(std::move(group)), world_size_(world_size),
    arrivals_(new arrival[size_t(world_size)]),
    arrived_(new arrived_epoch[size_t(world_size)]),
    headers_(size_t(world_size), nullptr) {
  // nop
}

void arrival_hub::attach_header(int r, segment_header* header) {
  std::lock_guard<std::mutex> guard{headers_mtx_};
  headers_[size_t(r)] = header;
}

void arrival_hub::detach_header(int r) {
  std::lock_guard<std::mutex> guard{headers_mtx_};
  headers_[size_t(r)] = nullptr;
}

void arrival_hub::mark_timed_out(int r) {
  std::lock_guard<std::mutex> guard{headers_mtx_};
  for (auto* h : headers_) {
    if (h == nullptr) continue;
    uint64_t none = 0;
    h->abort_mark.compare_exchange_strong(
      none, make_abort_mark(r, static_cast<uint32_t>(errc::timeout)),
      std::memory_order_seq_cst);
    ring_bell(*h);
    return; // one mapping of the one segment is enough
  }
}

std::shared_ptr<arrival_hub> arrival_hub::of(const std::string& segment_name,
                                             const std::string& group,
                                             int world_size) {
  return watchdog::instance().hub_of(segment_name, group, world_size);
}

void arrival_hub::publish(int r, uint64_t target,
                          clock::time_point deadline) noexcept {
  auto& a = at(r);
  a.deadline.store(deadline.time_since_epoch().count(),
                   std::memory_order_relaxed);
  // Sequentially consistent: pairs with abort's mark and fail_all's scan.
  a.waiting_for.store(target, std::memory_order_seq_cst);
}

bool arrival_hub::claim(int r, uint64_t target) noexcept {
  auto expected = target;
  return at(r).waiting_for.compare_exchange_strong(expected, target | claimed,
                                                   std::memory_order_acq_rel);
}

void arrival_hub::finish(int r, caf::error err) {
  auto& a = at(r);
  // The owner may start its next op from inside the completion, reusing
  // the record: take what we need first.
  auto done = std::move(a.done);
  a.done = nullptr;
  a.waiting_for.store(0, std::memory_order_release);
  done(std::move(err));
}

void arrival_hub::fail(int r, errc code, const std::string& text) {
  const auto& a = at(r);
  error_context where{group_, a.op, static_cast<int64_t>(a.seq), r,
                      world_size_};
  finish(r, make_error(code, where, text));
}

void arrival_hub::fail_aborted(int r, int own, int by, errc cause) {
  // The aborter's own op ends with its caller's reason, whichever rank
  // ends it: a rank whose op failed on the mark aborts too, and may sweep
  // before the aborter does. Its reason was written before its mark.
  if (r == own || r == by) {
    if (r != own && at(r).timed_out.load(std::memory_order_acquire))
      fail(r, errc::timeout, std::string{own_timeout_text});
    else
      fail(r, errc::aborted, "backend aborted: " + at(r).abort_reason);
    return;
  }
  fail(r, cause == errc::timeout ? errc::timeout : errc::peer_lost,
       "rank " + std::to_string(by) + " left the group (" +
         std::string{to_string(cause)} + ")");
}

void arrival_hub::fail_all(int own, int by, errc cause) {
  for (int r = 0; r < world_size_; ++r) {
    auto v = at(r).waiting_for.load(std::memory_order_seq_cst);
    if (v != 0 && (v & claimed) == 0 && claim(r, v))
      fail_aborted(r, own, by, cause);
  }
}

void arrival_hub::expire(clock::time_point now) {
  auto ticks = now.time_since_epoch().count();
  for (int r = 0; r < world_size_; ++r) {
    auto& a = at(r);
    auto v = a.waiting_for.load(std::memory_order_acquire);
    if (v == 0 || (v & claimed) != 0 ||
        a.deadline.load(std::memory_order_relaxed) > ticks)
      continue;
    std::vector<int> missing;
    for (int q = 0; q < world_size_; ++q)
      if (arrived(q).load(std::memory_order_acquire) < v) missing.push_back(q);
    // Everyone arrived: the last arrival finishes the op, in time or not.
    if (missing.empty() || !claim(r, v)) continue;
    a.timed_out.store(true, std::memory_order_release);
    // The mark before the owner learns of its timeout: a peer that steps
    // after it fails. (One whose step completed in the instant between the
    // claim and the mark may still succeed.)
    mark_timed_out(r);
    auto text = not_arrived_text(a.timeout, missing);
    fail(r, errc::timeout, text);
    // The peers' ops of that step started without waiting cannot complete
    // either: they end now, as theirs.
    for (int q = 0; q < world_size_; ++q)
      if (q != r && claim(q, v))
        fail(q, errc::timeout,
             "rank " + std::to_string(r) + " gave up at its deadline: " + text);
  }
}

bool arrival_hub::win(uint64_t target) noexcept {
  auto seen = won_epoch_.load(std::memory_order_acquire);
  while (seen < target)
    if (won_epoch_.compare_exchange_weak(seen, target,
                                         std::memory_order_acq_rel))
      return true;
  return false;
}

void arrival_hub::wait_unclaimed(int r) const noexcept {
  while ((arrivals_[size_t(r)].waiting_for.load(std::memory_order_acquire) &
          claimed) != 0)
    std::this_thread::yield();
}

} // namespace caf_collective::detail::shm
