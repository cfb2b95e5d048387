// Lets Gloo's rendezvous use any caf-collective rendezvous_store.
#pragma once

#include <gloo/rendezvous/store.h>

#include "caf_collective/rendezvous.hpp"

namespace caf_collective::detail {

/// Gloo expects exceptions from its store: errors of the wrapped store are
/// thrown as gloo::IoException, which the backend turns back into errors.
/// Every wait ends by one deadline, `timeout` after construction: Gloo
/// waits for one key per peer, and a fresh timeout per key would stretch
/// formation far past the group's deadline in large groups.
class gloo_store_adapter : public gloo::rendezvous::Store {
 public:
  gloo_store_adapter(rendezvous_store_ptr store,
                     std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;

  std::vector<char> get(const std::string& key) override;

  void wait(const std::vector<std::string>& keys) override;

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::chrono::milliseconds time_left(std::chrono::milliseconds limit) const;

  rendezvous_store_ptr store_;
  std::chrono::steady_clock::time_point deadline_;
};

} // namespace caf_collective::detail
