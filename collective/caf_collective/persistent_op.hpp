// An op checked once and run many times on the same buffers.
#pragma once

#include <memory>

#include <caf/error.hpp>

#include "caf_collective/op_kind.hpp"
#include "caf_collective/work.hpp"

namespace caf_collective {

class group;

namespace detail {
struct persistent_call;
} // namespace detail

/// One op of one group (a collective, a send or a recv), made by
/// group::prepare_allreduce and its siblings: the arguments are checked, copied
/// and bound to the group once, and each run() or start() runs the op again on
/// the same buffers (MPI's persistent collectives, e.g. MPI_Allreduce_init).
/// Between runs the caller may change what the buffers hold, not the buffers:
/// they must stay alive as long as a run may be in progress.
///
/// Each run takes the group's next sequence number like any op, so every
/// rank runs its prepared ops and the group's other ops in the same order;
/// a rank that runs something else fails as for any op the ranks disagree
/// on (errc::mismatch on shm, errc::timeout on Gloo: docs/api.md).
///
/// One run at a time: starting the op again while its previous start() is
/// still in flight fails with errc::invalid_argument, nothing is sent. A
/// persistent_op and its copies (which share its state) are used from one
/// thread at a time.
class persistent_op {
 public:
  /// An empty handle: valid() is false, run() and start() fail.
  persistent_op() = default;

  bool valid() const noexcept { return call_ != nullptr; }

  /// The op it runs.
  op_kind op() const noexcept;

  /// Runs the op once more and waits for it: none on success, else the
  /// error, as the group's blocking call would report it. When the group's
  /// lane is idle the op runs on the calling thread without checking its
  /// arguments again, allocating or handing off to another thread. Blocks:
  /// never call it from a CAF scheduler thread.
  caf::error run();

  /// Starts the op once more and returns at once; the handle completes
  /// like the group's asynchronous calls.
  work start();

 private:
  friend class group;

  explicit persistent_op(std::shared_ptr<detail::persistent_call> call)
    : call_(std::move(call)) {}

  caf::error refusal() const;

  std::shared_ptr<detail::persistent_call> call_;
};

} // namespace caf_collective
