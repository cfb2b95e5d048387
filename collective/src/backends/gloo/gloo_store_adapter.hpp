// Lets Gloo's rendezvous use any caf-collective rendezvous_store.
#pragma once

#include <mutex>

#include <gloo/rendezvous/store.h>

#include <caf/error.hpp>

#include "backends/gloo/gloo_peer_check.hpp"
#include "caf_collective/rendezvous.hpp"

namespace caf_collective::detail {

/// Gloo expects exceptions from its store: errors of the wrapped store are
/// thrown as gloo::IoException, which the backend turns back into errors
/// (failure() keeps the original). Every wait ends by one deadline,
/// `timeout` after construction: Gloo waits for one key per peer, and a
/// fresh timeout per key would stretch formation far past the group's
/// deadline in large groups. Before Gloo reads the first peer's address,
/// the adapter checks that every peer listens (gloo_peer_check.hpp).
class gloo_store_adapter : public gloo::rendezvous::Store {
 public:
  /// `host`: the address this rank's Gloo device binds to.
  gloo_store_adapter(rendezvous_store_ptr store, int rank, int world_size,
                     std::string host, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;

  std::vector<char> get(const std::string& key) override;

  void wait(const std::vector<std::string>& keys) override;

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  /// The error behind the last exception thrown to Gloo, if any.
  const caf::error& failure() const noexcept { return failure_; }

  /// What this rank published under Gloo's key "<rank>" (its pairs'
  /// listening addresses), empty before. Safe from any thread.
  std::vector<char> own_addresses() const;

 private:
  std::chrono::milliseconds time_left(std::chrono::milliseconds limit) const;

  /// The peer rank a key of Gloo's full-mesh rendezvous names, or -1.
  int peer_of(const std::string& key) const;

  /// Whether `key` is Gloo's hostname key of another rank ("rank_<r>").
  bool names_peer_host(const std::string& key) const;

  /// Runs the peer check once; throws on failure.
  void meet_peers();

  [[noreturn]] void fail(caf::error err);

  rendezvous_store_ptr store_;
  int rank_;
  int world_size_;
  std::string host_;
  std::chrono::steady_clock::time_point deadline_;
  bool met_ = false;
  peer_check check_;
  caf::error failure_;
  mutable std::mutex own_mtx_;
  std::vector<char> own_;
};

} // namespace caf_collective::detail
