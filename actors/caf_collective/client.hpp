// Blocking helpers for clients that are plain threads holding a
// scoped_actor (tests, programs' main). Actors use request(...).then with
// the messages of messages.hpp instead.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "caf_collective/messages.hpp"

namespace caf_collective {

using client_timeout = std::chrono::milliseconds;

/// Asks the driver to run `req`; waits at most `timeout` for the answer.
caf::expected<op_result> run_op(caf::scoped_actor& self,
                                const driver_actor& driver, op_request req,
                                client_timeout timeout);

/// Waits until the group is formed (none) or its formation failed. A group
/// no member has registered for yet is asked about again until `timeout`
/// (members register once they run, possibly after this call), then the
/// driver's unknown_group error is returned.
caf::error await_group(caf::scoped_actor& self, const driver_actor& driver,
                       const std::string& name, client_timeout timeout);

/// Declares a group over existing member actors, ranks by list order, and
/// waits until it is formed. `timeout` is the formation's; this call waits
/// up to 5 s longer for the driver's answer, which names the ranks that
/// never registered or did not form (the driver gives its members its grace
/// beyond the timeout). Every blocking call here that runs out of time
/// fails with errc::timeout naming the group (and op), not CAF's bare
/// request_timeout.
caf::error declare_group(caf::scoped_actor& self, const driver_actor& driver,
                         const std::string& name,
                         const std::vector<member_actor>& members,
                         const std::string& backend, client_timeout timeout);

/// Destroys a group so that its name can be declared again; unknown_group
/// if the driver does not know it.
caf::error destroy_group(caf::scoped_actor& self, const driver_actor& driver,
                         const std::string& name, client_timeout timeout);

/// A group's state, from the driver or from one member.
caf::expected<group_status> status_of(caf::scoped_actor& self,
                                      const caf::actor& driver_or_member,
                                      const std::string& name,
                                      client_timeout timeout);

} // namespace caf_collective
