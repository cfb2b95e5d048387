// How groups end: broken by a failed op, a dead member or a missed
// deadline, failed before they formed, or destroyed by a client. Every
// waiting client and pending op gets exactly one answer naming why.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <caf/error.hpp>
#include <caf/fwd.hpp>

#include "driver_state.hpp"

namespace caf_collective::detail {

/// The error a pending op gets when its group breaks, given the op and its
/// seq (-1: still queued). Empty: every op gets the group's reason.
using op_error_fn = std::function<caf::error(const pending_op&, int64_t)>;

/// What every other pending op of `g` gets when one op's failure `cause`
/// broke the group: `aborted`, naming that op and its own seq, and the
/// cause (which names the op that failed).
op_error_fn broken_by(const group_entry& g, const caf::error& cause);

/// Answers every waiting client and queued or running op with `err`, or
/// with what `for_op` makes of it. Outputs the running ops collected are
/// dropped (discard_outputs): their clients never see those refs.
void fail_all(const driver_state& st, group_entry& g, const caf::error& err,
              const op_error_fn& for_op = {});

/// The group cannot run ops any more: members abort their lanes, every
/// pending and future op fails with `reason` (pending ones possibly with
/// what `for_op` makes of it). `forming`: the group never formed (state
/// failed rather than broken).
void break_group(driver_ptr self, group_entry& g, caf::error reason,
                 bool forming, const op_error_fn& for_op = {});

/// The driver is exiting with `reason` (none: a normal exit): every
/// waiting client and queued or running op of every group gets aborted,
/// naming the group, the op and the reason. The members of groups that
/// take their ops from the driver, or are still forming, get col_abort
/// with that reason (their groups break); groups whose members start
/// their own ops are left running.
void fail_all_at_exit(driver_state& st, const caf::error& reason);

/// (col_destr, name): members leave, pending ops fail with aborted, the
/// name is free again. unknown_group for a name the driver does not know.
caf::error destroy_group(driver_ptr self, const std::string& name);

/// A monitored member died or its node became unreachable: every group
/// that held it breaks (or fails, while forming) with peer_lost naming
/// each rank it lost.
void on_member_down(driver_ptr self, const caf::down_msg& dm);

/// (op_tmo, group, gen): the group's deadline timer fired. If its earliest
/// running op missed its deadline, that op's client learns which ranks had
/// not finished, the group breaks, and every rank's recent ops are logged
/// so that a hang can be traced; otherwise the timer is armed again for
/// the next deadline.
void on_op_deadline(driver_ptr self, const std::string& name, uint64_t gen);

} // namespace caf_collective::detail
