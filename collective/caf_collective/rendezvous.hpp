// Rendezvous stores: where the members of a group publish and find each
// other's addresses (Gloo) or unique ids (NCCL) when the group is formed.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

namespace caf_collective {

/// A key-value store that every member of a group can reach. Keys are
/// written once per group formation.
class rendezvous_store {
 public:
  virtual ~rendezvous_store();

  virtual caf::error set(const std::string& key,
                         const std::vector<char>& value) = 0;

  /// Waits until `key` exists and returns its value; fails with
  /// errc::timeout naming the key after `timeout`.
  virtual caf::expected<std::vector<char>>
  get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

using rendezvous_store_ptr = std::shared_ptr<rendezvous_store>;

/// A store in this process's memory, for members that are threads of one
/// process. All members of a group must use the same store object (or the
/// same `name` with `shared_in_process_store`).
rendezvous_store_ptr make_in_process_store();

/// The in-process store registered under `name`; created on first use and
/// dropped when the last user releases it.
rendezvous_store_ptr shared_in_process_store(const std::string& name);

/// A store in a directory of a file system every member can read (a local
/// directory for processes on one machine, NFS across machines). Use a
/// fresh, empty directory per group formation: keys are never removed.
rendezvous_store_ptr make_file_store(std::string directory);

/// A view of `base` that prefixes every key with `prefix` + "/".
rendezvous_store_ptr make_prefix_store(std::string prefix,
                                       rendezvous_store_ptr base);

} // namespace caf_collective
