// The launcher's own standard output and error, written by a thread of
// their own. A reader that stalls (`| less`, a stopped terminal, a stuck
// `tee`) held the launcher in write(): it then forwarded no signal, reaped
// no rank and enforced no grace period until the reader moved on.
#pragma once

#include <cstddef>
#include <string>

namespace caf_collective::launcher {

/// Queues `text` for file descriptor `fd` (1 or 2); texts go out whole and
/// in the order queued. Never blocks.
void queue_output(int fd, std::string text);

/// Bytes queued and not written yet. Above a bound the launcher stops
/// reading its ranks' output, so that they, not its memory, wait for the
/// reader.
size_t output_backlog();

/// Waits until everything queued is written (or failed to be: its reader
/// is gone).
void flush_output();

} // namespace caf_collective::launcher
