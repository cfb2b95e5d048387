#include "caf_collective/persistent_op.hpp"

#include <string>

#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"
#include "runtime/persistent_call.hpp"

namespace caf_collective {

op_kind persistent_op::op() const noexcept {
  return call_ ? call_->op : op_kind::barrier;
}

caf::error persistent_op::refusal() const {
  if (!call_)
    return make_error(errc::invalid_argument,
                      "this persistent_op is empty: make it with one of "
                      "group::prepare_*");
  if (call_->last.valid() && !call_->last.ready())
    return make_error(
      errc::invalid_argument, call_->owner->context(call_->op, -1),
      "this persistent " + std::string{to_string(call_->op)} +
        " is still running its previous start (wait for its work first)");
  return {};
}

caf::error persistent_op::run() {
  if (auto refused = refusal()) return refused;
  return call_->owner->run_persistent(call_);
}

work persistent_op::start() {
  if (auto refused = refusal()) return work::completed(0, std::move(refused));
  call_->last = call_->owner->start_persistent(call_);
  return call_->last;
}

} // namespace caf_collective
