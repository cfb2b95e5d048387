// Rendezvous stores: where the members of a group publish and find each
// other's addresses (Gloo) or unique ids (NCCL) when the group is formed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

namespace caf_collective {

/// A key-value store that every member of a group can reach. A formation
/// writes its keys under a name of its own (docs/config.md, "Formations are
/// named"): a store may serve many formations of one group.
class rendezvous_store {
 public:
  virtual ~rendezvous_store();

  virtual caf::error set(const std::string& key,
                         const std::vector<char>& value) = 0;

  /// set(), giving up after `timeout` where the store may wait: a TCP store
  /// whose server is not up yet retries until then (at most its
  /// connect_timeout) and fails with errc::timeout. The default is set()
  /// for stores that never wait.
  virtual caf::error set_within(const std::string& key,
                                const std::vector<char>& value,
                                std::chrono::milliseconds timeout);

  /// Waits until `key` exists and returns its value; fails with
  /// errc::timeout naming the key after `timeout`. The stores of this
  /// library wait at most 100 years (milliseconds::max() waits that long),
  /// a store actor's view (make_actor_store) at most 24 h per call.
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
/// directory for processes on one machine, NFS across machines). Keys are
/// never removed; formations never read each other's, so a directory may
/// serve several.
rendezvous_store_ptr make_file_store(std::string directory);

/// A view of `base` that prefixes every key with `prefix` + "/".
rendezvous_store_ptr make_prefix_store(std::string prefix,
                                       rendezvous_store_ptr base);

// -- TCP rendezvous store (the role of torch's TCPStore) ----------------------

/// How a client reaches a TCP store and proves it belongs to a run.
struct tcp_store_options {
  /// Host name or address of the server.
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  /// The run's shared secret; the server refuses a client without it. Never
  /// logged.
  std::string secret;
  /// Names the run (non-empty). The server prefixes every key of this
  /// client with it, so runs sharing one server never see each other's keys.
  std::string run_id;
  /// How long a set keeps retrying to reach a server that is not up yet. A
  /// get retries for its own timeout instead.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds{30};
};

/// A client of a TCP store. It connects on first use (retrying until the
/// request's deadline while the server is not up) and keeps its connections
/// open between requests (one per request in flight at once); a request
/// never goes out on a connection the server has closed since.
/// Errors: timeout (server unreachable or key absent by the deadline, naming
/// the address or key), invalid_argument (refused: wrong or missing secret,
/// empty run id), backend_error (the connection broke).
rendezvous_store_ptr make_tcp_store(tcp_store_options opts);

/// Serves a TCP store from a thread of this process: one rank of a group,
/// or the launcher. It binds only the address it is given and accepts only
/// clients that present `secret`; a refusal is logged (logger
/// "caf_collective.store", warning) without the secret. Stops when
/// destroyed.
class tcp_store_server {
 public:
  /// Binds `host`:`port` (port 0: the system picks one; see port()).
  /// Fails with invalid_argument for an empty secret and backend_error when
  /// the address cannot be bound.
  static caf::expected<std::unique_ptr<tcp_store_server>>
  start(std::string host, uint16_t port, std::string secret);

  ~tcp_store_server();

  tcp_store_server(const tcp_store_server&) = delete;
  tcp_store_server& operator=(const tcp_store_server&) = delete;

  const std::string& host() const noexcept;

  uint16_t port() const noexcept;

  /// Clients refused so far (wrong or missing secret, malformed handshake,
  /// or turned away while 256 connections were still in their handshake).
  size_t refused_clients() const noexcept;

  struct impl;

 private:
  explicit tcp_store_server(std::unique_ptr<impl> ptr);

  std::unique_ptr<impl> impl_;
};

} // namespace caf_collective
