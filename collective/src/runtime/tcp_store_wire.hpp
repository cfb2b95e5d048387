// The TCP rendezvous store's wire format and the socket helpers its server
// and client share. Every integer is big-endian.
//
//   handshake (client -> server):
//     "CAFSTOR1", u32 secret length, secret, u32 run id length, run id
//   handshake reply (server -> client):
//     u8 0 (accepted) or 1 (refused), u32 reason length, reason
//   request:
//     u8 op, u32 key length, key, then
//       op 1 (set): u32 value length, value
//       op 2 (get): u64 timeout in milliseconds
//   reply:
//     u8 0 (ok) or 1 (timeout), u32 value length, value
//
// The server keeps the run id of each connection and prefixes every key the
// connection names with it, so a client can neither see nor write another
// run's keys, whatever keys it asks for.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace caf_collective::detail::tcp_store_wire {

inline constexpr std::string_view magic = "CAFSTOR1";

enum class op : uint8_t { set = 1, get = 2 };

enum class status : uint8_t { ok = 0, refused_or_timeout = 1 };

// Bounds a server checks before it allocates anything for a peer's message.
inline constexpr uint32_t max_secret_size = 1024;
inline constexpr uint32_t max_run_id_size = 1024;
inline constexpr uint32_t max_key_size = 4096;
inline constexpr uint32_t max_value_size = 64u << 20;

using clock = std::chrono::steady_clock;

/// Outcome of a socket transfer bounded by a deadline.
enum class io_result { done, closed, timed_out, stopped, failed };

/// Writes all of `data`, or gives up at `deadline`. `stop_fd`, when not -1,
/// is a descriptor whose readability means "give up now" (the server's
/// shutdown pipe).
io_result send_all(int fd, const void* data, size_t size,
                   clock::time_point deadline, int stop_fd = -1);

/// Reads exactly `size` bytes, or gives up at `deadline` (or on `stop_fd`).
io_result recv_all(int fd, void* data, size_t size, clock::time_point deadline,
                   int stop_fd = -1);

/// Appends big-endian integers and length-prefixed byte strings to a frame.
void put_u8(std::vector<char>& out, uint8_t x);
void put_u32(std::vector<char>& out, uint32_t x);
void put_u64(std::vector<char>& out, uint64_t x);
void put_bytes(std::vector<char>& out, std::string_view bytes);

uint32_t decode_u32(const char* in);
uint64_t decode_u64(const char* in);

/// Reads a u32 length (at most `limit`) and that many bytes into `out`.
/// Returns failed when the length exceeds `limit`.
io_result recv_sized(int fd, std::string& out, uint32_t limit,
                     clock::time_point deadline, int stop_fd = -1);

/// "host:port" with brackets around IPv6 hosts.
std::string endpoint(const std::string& host, uint16_t port);

/// Constant-time comparison, so the time a refusal takes does not reveal
/// how much of a guessed secret was right.
bool same_secret(std::string_view a, std::string_view b);

} // namespace caf_collective::detail::tcp_store_wire
