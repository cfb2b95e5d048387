// A view of a rendezvous store whose waits end soon after a flag is set, so
// that a group aborted while it forms stops waiting for its peers at once
// instead of at the formation deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "caf_collective/rendezvous.hpp"

namespace caf_collective::detail {

/// How often a wait of a cancelable store looks at its flag. Each look is a
/// get of at most this long on the store below (one request on a TCP store).
inline constexpr std::chrono::milliseconds cancel_poll{100};

/// `base`, whose get() waits in slices of cancel_poll and fails with
/// errc::aborted naming the key and `why` once `*cancel` is true; get() and
/// set() refuse at once after that. A timeout still comes at the caller's
/// deadline and carries the last answer of `base`. A set() that must wait
/// (a TCP store's server not up yet) retries in slices too, for at most
/// `set_budget` per set (the group's timeout).
/// `cancel` must outlive the view (a group's flag: its backends drop the
/// store with the group).
rendezvous_store_ptr
make_cancelable_store(rendezvous_store_ptr base,
                      const std::atomic<bool>* cancel, std::string why,
                      std::chrono::milliseconds set_budget);

} // namespace caf_collective::detail
