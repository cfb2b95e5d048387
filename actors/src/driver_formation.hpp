// How groups form. A group's entry opens with its first registration
// (members spawned with their membership) or with a declaration (the
// driver asks each declared actor to join). Once every rank registered,
// the driver sends each member init; the group is ready when every rank
// reported ready on one backend, and fails naming the missing ranks when
// its formation deadline passes first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>

#include "caf_collective/messages.hpp"

#include "driver_state.hpp"

namespace caf_collective::detail {

/// (col_reg, membership, node) from `member`: takes its rank, or refuses
/// it with an abort message naming the conflict. The last registration
/// sends every member init.
void on_register(driver_ptr self, const caf::actor& member, membership& m,
                 std::string& node);

/// (col_ready, group, gen, rank, error, backend) from `sender`: rank
/// `rank` formed the group on `backend`, or could not (`err`).
void on_ready(driver_ptr self, const caf::actor& sender,
              const std::string& name, uint64_t gen, int32_t rank,
              caf::error& err, std::string& backend);

/// (form_tmo, group, gen): the formation deadline passed; a group still
/// forming fails naming the ranks that never registered or reported.
void on_formation_deadline(driver_ptr self, const std::string& name,
                           uint64_t gen);

/// (col_decl, name, members, backend, timeout ms): opens the group and
/// asks each actor to join; answered once the group formed or failed.
caf::result<caf::ok_atom> declare_group(driver_ptr self,
                                        const std::string& name,
                                        const std::vector<caf::actor>& members,
                                        const std::string& backend,
                                        int64_t timeout_ms);

/// (col_wait, name): answered once the group formed or failed.
caf::result<caf::ok_atom> wait_for_group(driver_ptr self,
                                         const std::string& name);

} // namespace caf_collective::detail
