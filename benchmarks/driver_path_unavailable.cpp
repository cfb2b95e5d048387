// Built when the project has no actor layer: the path does not exist.
#include "driver_path.hpp"

#include <stdexcept>

namespace caf_collective::bench {

bool driver_path_available() noexcept {
  return false;
}

bench_path_ptr make_driver_path(int, int, const std::string&,
                                const std::string&, int) {
  throw std::logic_error("the driver path needs the actor layer");
}

} // namespace caf_collective::bench
