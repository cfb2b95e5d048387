// Host name resolution with a deadline. getaddrinfo has none: a resolver
// that does not answer holds the caller for the resolver's own timeouts
// (5 s a try, twice, per name in the search list), which put a rank's
// formation far past its deadline, or held it for good.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <netdb.h>
#include <string>

namespace caf_collective::detail {

/// What a resolution found: `list` (freed with the last copy), or why not.
struct resolved_host {
  std::shared_ptr<addrinfo> list;
  std::string why;
  bool timed_out = false; // the resolver did not answer by the deadline
};

/// Resolves host names for one peer: at most one lookup runs at a time,
/// and a caller whose deadline passes leaves it running for the next call
/// rather than starting another (a stalled resolver must not pile up
/// threads while a connection is retried).
class bounded_resolver {
 public:
  /// `hints` as for getaddrinfo; an empty `service` asks for addresses
  /// only.
  bounded_resolver(std::string host, std::string service, addrinfo hints);

  /// A numeric address at once; a name through getaddrinfo on a thread of
  /// its own, waited for until `deadline`.
  resolved_host resolve(std::chrono::steady_clock::time_point deadline);

 private:
  struct lookup;

  std::string host_;
  std::string service_;
  addrinfo hints_;
  std::mutex mtx_;
  std::shared_ptr<lookup> running_; // under mtx_
};

} // namespace caf_collective::detail
