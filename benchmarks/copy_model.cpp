#include "copy_model.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace caf_collective::bench {

namespace {

using clock_type = std::chrono::steady_clock;

struct aligned_deleter {
  void operator()(std::byte* p) const {
    ::operator delete (p, std::align_val_t{64});
  }
};

using buffer = std::unique_ptr<std::byte, aligned_deleter>;

buffer make_buffer(size_t bytes, int fill) {
  buffer result{
    static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}))};
  std::memset(result.get(), fill, bytes);
  return result;
}

} // namespace

int copy_threads_for(int ranks) noexcept {
  auto cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(2, std::min(ranks, std::max(cores, 1)));
}

copy_bandwidth measure_copy_bandwidth(int threads, size_t bytes, int reps) {
  copy_bandwidth result{threads, bytes, reps, 0.0};
  auto n = static_cast<size_t>(threads);
  std::vector<clock_type::time_point> starts(n);
  std::vector<clock_type::time_point> ends(n);
  std::barrier sync{threads};
  std::vector<std::thread> workers;
  for (size_t t = 0; t < n; ++t) {
    workers.emplace_back([&, t] {
      // Each thread touches its own pages (first touch places them).
      auto src = make_buffer(bytes, 1);
      auto dst = make_buffer(bytes, 2);
      std::memcpy(dst.get(), src.get(), bytes); // warm-up
      for (int r = 0; r < reps; ++r) {
        sync.arrive_and_wait();
        starts[t] = clock_type::now();
        std::memcpy(dst.get(), src.get(), bytes);
        ends[t] = clock_type::now();
        sync.arrive_and_wait();
        if (t == 0) {
          auto first = *std::min_element(starts.begin(), starts.end());
          auto last = *std::max_element(ends.begin(), ends.end());
          std::chrono::duration<double> took = last - first;
          auto gbs = static_cast<double>(bytes * n) / took.count() / 1e9;
          result.total_gbs = std::max(result.total_gbs, gbs);
        }
      }
    });
  }
  for (auto& w : workers)
    w.join();
  return result;
}

} // namespace caf_collective::bench
