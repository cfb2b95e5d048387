// The collective layer from a consumer: a one-rank group through the
// imperative API, one allreduce. Exits 0 when the result is right.
#include <cstdio>
#include <vector>

#include <caf_collective/all.hpp>

namespace col = caf_collective;

int main() {
  try {
    col::init_options opts;
    opts.store = col::make_in_process_store();
    col::init_collective_group(1, 0, "gloo", "consumer", opts);
    std::vector<float> xs(1024, 2.0f);
    col::allreduce(col::view_of(xs), "consumer");
    bool ok = col::get_collective_group_size("consumer") == 1 &&
              col::get_rank("consumer") == 0 && xs.front() == 2.0f &&
              xs.back() == 2.0f;
    col::destroy_collective_group("consumer");
    std::printf("consumer_allreduce: %s (C++ %ld)\n", ok ? "ok" : "WRONG",
                static_cast<long>(__cplusplus));
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("consumer_allreduce: failed: %s\n", e.what());
    return 1;
  }
}
