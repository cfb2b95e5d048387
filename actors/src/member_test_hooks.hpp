// A test's way into a member's handlers (tests/actors/node_process.cpp):
// null in programs. It lets a test put a release between the driver's check
// of an op and the member's start, a window of microseconds otherwise.
#pragma once

#include <cstdint>
#include <string>

namespace caf_collective::detail {

/// Runs in a member's start handler before the member takes its input,
/// with the group and the member's rank in it.
inline void (*before_start_test_hook)(const std::string& group,
                                      int32_t rank) = nullptr;

} // namespace caf_collective::detail
