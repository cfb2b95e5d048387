// The error vocabulary of caf-collective: one `errc` enum, registered with
// CAF as the error category "collective", and helpers that attach where and
// why an error happened (group, op, sequence number, rank, detail).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/make_message.hpp>

#include "caf_collective/op_kind.hpp"

namespace caf_collective {

/// Error codes of the "collective" category. Who is at fault:
/// the caller (invalid_argument, unknown_group, duplicate_group, mismatch,
/// unsupported), a peer (peer_lost, timeout) or the system (backend_error,
/// out_of_memory, aborted).
enum class errc : uint8_t {
  /// An argument is wrong: size, dtype, rank, root, null buffer, ...
  invalid_argument = 1,
  /// The backend cannot run this op on this device or dtype.
  unsupported,
  /// An operation or a group formation did not finish within its deadline.
  timeout,
  /// A member of the group died or became unreachable.
  peer_lost,
  /// No group with this name exists in the calling member.
  unknown_group,
  /// A group with this name already exists in the calling member.
  duplicate_group,
  /// Ranks called the same operation with arguments that do not agree.
  mismatch,
  /// The transport or library below failed (Gloo, NCCL, CUDA, sockets).
  backend_error,
  /// A memory or capacity limit was reached.
  out_of_memory,
  /// The operation was cancelled: the group was destroyed, aborted or is
  /// broken by an earlier failure.
  aborted,
  /// An object reference names no object in the store.
  unknown_object,
};

std::string_view to_string(errc code) noexcept;

/// The atom under which `errc` is registered with CAF.
caf::atom_value error_category() noexcept;

/// Where an error happened; every field is optional (empty / negative).
struct error_context {
  std::string_view group;
  int64_t op = -1; ///< an op_kind, or -1
  int64_t seq = -1;
  int rank = -1;
  int world_size = -1;

  error_context() = default;
  error_context(std::string_view group_name, op_kind kind, int64_t sequence,
                int member_rank, int size)
    : group(group_name), op(static_cast<int64_t>(kind)), seq(sequence),
      rank(member_rank), world_size(size) {
    // nop
  }

  /// A member of a group, with no op: formation, abort and close name
  /// group and rank only, since no single op (or several) is at fault.
  static error_context member(std::string_view group_name, int member_rank,
                              int size) {
    error_context where;
    where.group = group_name;
    where.rank = member_rank;
    where.world_size = size;
    return where;
  }
};

/// Makes an error whose context reads "group 'g' allreduce seq 3 rank 1/4:
/// detail".
caf::error make_error(errc code, std::string detail);
caf::error make_error(errc code, const error_context& where,
                      std::string detail);

/// Returns the code if `err` belongs to the "collective" category.
bool is_collective_error(const caf::error& err) noexcept;
errc code_of(const caf::error& err) noexcept;

/// Renders any error readably without an actor system, e.g.
/// "collective.timeout: group 'g' allreduce seq 3 rank 1/4: ...". CAF's own
/// categories (sec, exit_reason) are rendered by name too.
std::string render(const caf::error& err);

/// The text of `err` without its code ("group 'g' ...: ..."), for wrapping
/// an error into another; render(err) for an error without a single text.
std::string detail_of(const caf::error& err);

/// "[0, 2, 3]": ranks as errors name them.
std::string list_ranks(const std::vector<int>& ranks);

/// Registers the renderer for the "collective" category with a config, so
/// `actor_system::render` prints our errors readably.
void add_error_category(caf::actor_system_config& cfg);

/// The one exception type of the blocking API; carries the error.
class collective_error : public std::runtime_error {
 public:
  explicit collective_error(caf::error err);

  const caf::error& error() const noexcept { return err_; }

  errc code() const noexcept { return code_of(err_); }

 private:
  caf::error err_;
};

/// Throws collective_error if `err` is set.
void throw_if(const caf::error& err);

} // namespace caf_collective

CAF_ERROR_CODE_ENUM(caf_collective::errc, "collective")
