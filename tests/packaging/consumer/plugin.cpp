// The collective layer inside a consumer's shared library (a plugin, a
// Python extension): the static libraries must be position-independent for
// this to link. A one-rank group through the imperative API, one allreduce.
#include "plugin.hpp"

#include <vector>

#include <caf_collective/all.hpp>

namespace col = caf_collective;

bool consumer_plugin_allreduce() {
  col::init_options opts;
  opts.store = col::make_in_process_store();
  col::init_collective_group(1, 0, "gloo", "consumer", opts);
  std::vector<float> xs(1024, 2.0f);
  col::allreduce(col::view_of(xs), "consumer");
  bool ok = col::get_collective_group_size("consumer") == 1 &&
            col::get_rank("consumer") == 0 && xs.front() == 2.0f &&
            xs.back() == 2.0f;
  col::destroy_collective_group("consumer");
  return ok;
}
