// The one issue order of this process: every NCCL group call of the
// backend (ncclGroupStart, the calls that enqueue, ncclGroupEnd) runs under
// one mutex. The send lane and the main lane of a group, and several
// groups, may drive communicators on one device; the mutex keeps their
// calls from interleaving on the host, so the kernels of different
// communicators reach each device in one order (see nccl_device_gate.hpp
// for why they may still run side by side).
//
// The mutex is held from group start to group end and nowhere else: the
// calls inside return at once (the communicators are non-blocking, copies
// come from pinned memory), while ncclCommAbort, ncclCommDestroy and every
// wait happen outside it. issue_group is the only code that takes it, and
// it reports failures only after letting go, so an error path that aborts
// (and may issue again) can never find the mutex held by its own thread.
#pragma once

#include <string_view>
#include <type_traits>

#include <caf/error.hpp>

#include "caf_collective/error.hpp"
#include "backends/nccl/nccl_util.hpp"

namespace caf_collective::detail {

/// What a group call left to do.
struct issue_outcome {
  /// The body's error, else a failed ncclGroupStart or ncclGroupEnd.
  caf::error err;
  /// ncclGroupEnd returned ncclInProgress: the launch completes in the
  /// background; poll the communicators with ncclCommGetAsyncError.
  bool pending = false;
};

/// A non-owning reference to the callable that enqueues a group's calls:
/// caf::error().
class issue_body {
 public:
  template<class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, issue_body>)
    issue_body(F& fn) noexcept // NOLINT: implicit by design
    : obj_(&fn), call_([](void* obj) { return (*static_cast<F*>(obj))(); }) {
    // nop
  }

  caf::error operator()() const { return call_(obj_); }

 private:
  void* obj_;
  caf::error (*call_)(void*);
};

/// Runs `body` between ncclGroupStart and ncclGroupEnd with the issue mutex
/// held. The group is always closed, even after a failed body (an open
/// group would swallow the next call's operations). `what` names the group
/// in errors; `blame` (may be null) adds its ncclGetLastError.
issue_outcome issue_group(const error_context& where, std::string_view what,
                          ncclComm_t blame, issue_body body);

/// Whether the calling thread is inside issue_group's body.
bool issuing_on_this_thread() noexcept;

} // namespace caf_collective::detail
