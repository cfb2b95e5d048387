// Which member a completion callback acts for. A callback runs on whichever
// thread completes its op: a lane, or, for a small shm op of ranks that are
// threads of one process, the thread of another rank (work.hpp). There,
// group names would resolve in that other member's table (member_scope),
// so a by-name call from the callback would act on another rank's group.
// Such calls are refused instead (api.cpp).
#pragma once

namespace caf_collective::detail {

/// The member (table of groups) by-name calls of the calling thread act
/// for, as an opaque token (api.cpp).
const void* calling_member() noexcept;

/// While alive, the thread runs a completion callback registered by
/// `member`.
class callback_member_scope {
 public:
  explicit callback_member_scope(const void* member) noexcept;
  ~callback_member_scope();
  callback_member_scope(const callback_member_scope&) = delete;
  callback_member_scope& operator=(const callback_member_scope&) = delete;

 private:
  const void* outer_;
};

} // namespace caf_collective::detail
