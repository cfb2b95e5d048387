// What the driver refuses before anything moves: pure functions over a
// group's entry and a request, no actor and no messages. Each returns the
// error (or the problem's text) naming what is wrong, or nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/error.hpp>

#include "caf_collective/messages.hpp"

#include "driver_state.hpp"

namespace caf_collective::detail {

/// What is wrong with a deadline (int64 milliseconds from a client or a
/// member), or nothing: negative, 0 where 0 does not mean "the default",
/// or beyond max_timeout_ms.
std::string timeout_problem(int64_t ms, bool zero_means_default);

/// What is wrong with a backend name a group asks for, or nothing.
std::string backend_problem(const std::string& name);

/// What is wrong with a membership on its own, before any group compares.
std::string membership_problem(const membership& m);

/// Refuses a declaration that cannot form, before any member hears of it.
/// `name_taken`: the driver has an entry of that name already.
caf::error check_declaration(bool name_taken, const std::string& name,
                             const std::vector<caf::actor>& members,
                             const std::string& backend, int64_t timeout_ms);

/// The ranks that reported ready must have formed the group on one
/// backend, and on the one asked for unless that was "auto". Returns the
/// mismatch naming each backend's ranks, or none.
caf::error backend_mismatch(const group_entry& g);

/// Checks a request against every rank's ref fingerprint and computes
/// what each rank runs (`op.starts`, `op.takes_part`). Nothing has been
/// sent to any member yet, and no sequence number is taken: a refused
/// request leaves the group as it was.
caf::error validate(const group_entry& g, pending_op& op);

} // namespace caf_collective::detail
