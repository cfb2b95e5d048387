// Releasing object refs through the driver: a client holding refs of any
// node asks the driver, which drops a ref of its own node from its store
// and forwards one of another node to a member living there.
#pragma once

#include <caf/result.hpp>

#include "driver_state.hpp"

namespace caf_collective::detail {

caf::result<caf::ok_atom> release_ref(driver_ptr self, const object_ref& ref);

} // namespace caf_collective::detail
