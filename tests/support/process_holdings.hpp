// What a process holds that a group may take and must give back: file
// descriptors (sockets, memfds, pidfds, eventfds), threads (lanes, transport
// loops, watchdogs, actors' workers) and shared mappings (segments), and the
// heap an op must not keep. The soak tests count them after a warm-up and
// after many more cycles or ops.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <thread>

#include <malloc.h>

#include <doctest/doctest.h>

namespace soak {

struct holdings {
  size_t fds = 0;
  size_t threads = 0;
  size_t shared_mappings = 0;

  bool within(const holdings& base) const {
    return fds <= base.fds && threads <= base.threads &&
           shared_mappings <= base.shared_mappings;
  }
};

inline std::ostream& operator<<(std::ostream& out, const holdings& h) {
  return out << h.fds << " fds, " << h.threads << " threads, "
             << h.shared_mappings << " shared mappings";
}

inline size_t entries_in(const char* dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

inline holdings now_held() {
  holdings h;
  h.fds = entries_in("/proc/self/fd");
  h.threads = entries_in("/proc/self/task");
  // Shared segments only: the allocator's own mappings (an arena per
  // thread, heaps that grow) come and go with the threads' allocations.
  std::ifstream maps{"/proc/self/maps"};
  std::string line;
  while (std::getline(maps, line))
    if (line.find("memfd:") != std::string::npos ||
        line.find("/dev/shm/") != std::string::npos)
      ++h.shared_mappings;
  return h;
}

/// Bytes the allocator has handed out and not taken back, every arena.
inline size_t heap_in_use() {
  auto info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

/// Runs `cycle(0)` to warm up, counts, runs `cycle(1..rounds)` and checks
/// that the process holds no more than after the warm-up. Threads that end
/// after their owner returned may take a moment to go: the count is read
/// again for up to 5 s before a difference counts as a leak.
template<class Cycle>
void check_no_growth(const std::string& what, int rounds, Cycle cycle) {
  using namespace std::chrono_literals;
  INFO(what);
  cycle(0);
  auto base = now_held();
  for (int i = 1; i <= rounds; ++i)
    cycle(i);
  auto after = now_held();
  auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!after.within(base) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(20ms);
    after = now_held();
  }
  INFO("after the warm-up: " << base << "; after " << rounds
                             << " more cycles: " << after);
  CHECK(after.within(base));
}

} // namespace soak
