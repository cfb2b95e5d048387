// Collectives on objects instead of tensors, in the spirit of torch's
// broadcast_object_list / all_gather_object: any type CAF 0.17 can serialize
// (an `inspect` overload; for caf::message, types registered with the actor
// system). Objects may have a different size on every rank.
//
// Each op serializes, exchanges a small header per rank (status and size),
// then the payloads as uint8 tensors, then (for ops where a rank reads what
// another sent) whether every reader could deserialize. So a rank that cannot
// serialize its object, an unregistered type, or bytes that do not read as
// the receiver's type fail the op on every rank with the same code and a
// text naming group, op and the ranks at fault:
//   - invalid_argument: a rank could not serialize (names that rank and why),
//   - mismatch: a rank could not deserialize what it received (type
//     mismatch between ranks or corrupted bytes),
//   - out_of_memory: a rank's object or what it received does not fit in
//     its memory while it serializes or reads it (the group stays usable);
//     between the exchanges the rank aborts the group instead, and its
//     peers see peer_lost or aborted,
//   - peer_lost / timeout / aborted: from the tensor ops underneath.
// The calls block (the caller's thread runs the tensor ops) and throw
// collective_error; call them where the imperative API may block, never on
// a CAF scheduler thread or on the group's own lane.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "caf_collective/api.hpp"
#include "caf_collective/object_codec.hpp"

namespace caf_collective {

/// `timeout` bounds each tensor op underneath (header, payload, verdict),
/// so one object op may take up to about three times as long.
struct object_options : op_options {
  /// send_object / recv_object: a recv matches a send with the same
  /// (peer, tag), as with send_options::tag.
  uint32_t tag = 0;
  /// The actor system whose type registry (de)serializes caf::message and
  /// actor handles. Required for caf::message, unused for plain types.
  /// Actor handles move only between ranks of one actor system: one
  /// written by another process or system fails every rank with mismatch
  /// (except inside a caf::message held by another type, and in containers
  /// or typed handles inside a caf::message: docs/api.md).
  caf::actor_system* system = nullptr;
};

namespace detail {

/// One object op as its errors describe it.
struct object_call {
  group& grp;
  std::string_view op;
  const object_options& opts;
};

// The byte exchanges under the templates below. Each throws
// collective_error naming group, op and the ranks at fault; a failure in
// `mine` (a rank that could not serialize) reaches every rank.

/// Every rank returns the root's bytes.
std::vector<char> broadcast_bytes(const object_call& call, int root,
                                  encoded_object mine);
/// Every rank returns every rank's bytes, in rank order.
std::vector<std::vector<char>> allgather_bytes(const object_call& call,
                                               encoded_object mine);
/// The root returns every rank's bytes in rank order; the others nothing.
std::vector<std::vector<char>> gather_bytes(const object_call& call, int root,
                                            encoded_object mine);
/// Every rank returns its part; `parts` (one per rank) is read on the root.
std::vector<char> scatter_bytes(const object_call& call, int root,
                                std::vector<encoded_object> parts);
/// Sends the bytes to `dst` and waits for its verdict on them.
void send_bytes(const object_call& call, int dst, encoded_object mine);
/// Receives the bytes `src` sent; the caller then answers with send_verdict.
std::vector<char> recv_bytes(const object_call& call, int src);
/// Tells `src` whether its bytes could be read; throws if they could not.
void send_verdict(const object_call& call, int src,
                  const caf::error& decode_failure);

/// After the ranks read what they received: every rank learns which ranks
/// could not, and throws if any could not. `source` names where this rank's
/// unreadable bytes came from (-1 when it read everything).
void agree_on_decoding(const object_call& call, const caf::error& failure,
                       int source);

/// Hooks for tests, per thread (ranks run as threads): `tamper` sees the
/// serialized bytes this rank is about to send (after serialization, before
/// the header exchange); `between_phases` runs after the header exchange,
/// before the payloads move.
struct object_test_hooks {
  std::function<void(std::vector<char>&)> tamper;
  std::function<void()> between_phases;
};
object_test_hooks& test_hooks();

/// Reads every rank's bytes as a T, in rank order; then every rank learns
/// whether some rank could not read (agree_on_decoding), naming the first
/// sender whose bytes this rank could not read.
template<class T>
std::vector<T> decode_all(const object_call& call,
                          const std::vector<std::vector<char>>& parts) {
  std::vector<T> result(parts.size());
  caf::error failure;
  int source = -1;
  for (size_t r = 0; r < parts.size() && !failure; ++r) {
    // Decoded into a T of its own, then moved in: std::vector<bool> hands
    // out proxies, not the bool& decode_object takes.
    T x{};
    failure =
      decode_object(parts[r].data(), parts[r].size(), x, call.opts.system);
    if (failure)
      source = static_cast<int>(r);
    else
      result[r] = std::move(x);
  }
  agree_on_decoding(call, failure, source);
  return result;
}

} // namespace detail

// -- the object collectives, by group object
// -----------------------------------

/// In place: `obj` on every rank becomes a copy of the root's `obj`.
template<class T>
void broadcast_object(group& grp, T& obj, int root,
                      const object_options& opts = {}) {
  detail::object_call call{grp, "broadcast_object", opts};
  detail::encoded_object mine;
  if (grp.rank() == root) mine = detail::encode_object(obj, opts.system);
  auto bytes = detail::broadcast_bytes(call, root, std::move(mine));
  caf::error failure;
  if (grp.rank() != root)
    failure =
      detail::decode_object(bytes.data(), bytes.size(), obj, opts.system);
  detail::agree_on_decoding(call, failure, failure ? root : -1);
}

/// Every rank's `obj`, in rank order, on every rank.
template<class T>
std::vector<T> allgather_object(group& grp, const T& obj,
                                const object_options& opts = {}) {
  detail::object_call call{grp, "allgather_object", opts};
  auto parts =
    detail::allgather_bytes(call, detail::encode_object(obj, opts.system));
  return detail::decode_all<T>(call, parts);
}

/// On the root: every rank's `obj` in rank order; elsewhere: empty.
template<class T>
std::vector<T> gather_object(group& grp, const T& obj, int root,
                             const object_options& opts = {}) {
  detail::object_call call{grp, "gather_object", opts};
  auto parts =
    detail::gather_bytes(call, root, detail::encode_object(obj, opts.system));
  return detail::decode_all<T>(call, parts);
}

/// Rank r receives `objs[r]` of the root; `objs` is read only on the root
/// and must hold one object per rank there.
template<class T>
T scatter_object(group& grp, const std::vector<T>& objs, int root,
                 const object_options& opts = {}) {
  detail::object_call call{grp, "scatter_object", opts};
  std::vector<detail::encoded_object> parts;
  if (grp.rank() == root) {
    if (objs.size() != static_cast<size_t>(grp.world_size())) {
      parts.resize(1);
      parts[0].failure = make_error(
        errc::invalid_argument,
        "the root passed " + std::to_string(objs.size()) +
          " objects for a world of " + std::to_string(grp.world_size()));
    } else {
      for (const auto& x : objs)
        parts.push_back(detail::encode_object(x, opts.system));
    }
  }
  auto bytes = detail::scatter_bytes(call, root, std::move(parts));
  T result{};
  auto failure =
    detail::decode_object(bytes.data(), bytes.size(), result, opts.system);
  detail::agree_on_decoding(call, failure, failure ? root : -1);
  return result;
}

/// Sends `obj` to `dst` and returns once `dst` has read it (a synchronous
/// send: two ranks that both send_object to each other first deadlock
/// until the timeout; order such exchanges by rank).
template<class T>
void send_object(group& grp, const T& obj, int dst,
                 const object_options& opts = {}) {
  detail::object_call call{grp, "send_object", opts};
  detail::send_bytes(call, dst, detail::encode_object(obj, opts.system));
}

/// Receives the object `src` sends with send_object (same tag).
template<class T>
T recv_object(group& grp, int src, const object_options& opts = {}) {
  detail::object_call call{grp, "recv_object", opts};
  auto bytes = detail::recv_bytes(call, src);
  T result{};
  auto failure =
    detail::decode_object(bytes.data(), bytes.size(), result, opts.system);
  detail::send_verdict(call, src, failure);
  return result;
}

// -- the same by group name (the calling thread's member scope) ---------------

template<class T>
void broadcast_object(T& obj, int root,
                      std::string_view group_name = default_group_name,
                      const object_options& opts = {}) {
  broadcast_object(*get_group(group_name), obj, root, opts);
}

template<class T>
std::vector<T>
allgather_object(const T& obj, std::string_view group_name = default_group_name,
                 const object_options& opts = {}) {
  return allgather_object(*get_group(group_name), obj, opts);
}

template<class T>
std::vector<T> gather_object(const T& obj, int root,
                             std::string_view group_name = default_group_name,
                             const object_options& opts = {}) {
  return gather_object(*get_group(group_name), obj, root, opts);
}

template<class T>
T scatter_object(const std::vector<T>& objs, int root,
                 std::string_view group_name = default_group_name,
                 const object_options& opts = {}) {
  return scatter_object(*get_group(group_name), objs, root, opts);
}

template<class T>
void send_object(const T& obj, int dst,
                 std::string_view group_name = default_group_name,
                 const object_options& opts = {}) {
  send_object(*get_group(group_name), obj, dst, opts);
}

template<class T>
T recv_object(int src, std::string_view group_name = default_group_name,
              const object_options& opts = {}) {
  return recv_object<T>(*get_group(group_name), src, opts);
}

// -- type-erased: caf::message with the system's type registry ----------------

/// Options with `system` set, for the caf::message forms below.
inline object_options with_system(caf::actor_system& sys,
                                  object_options opts = {}) {
  opts.system = &sys;
  return opts;
}

inline void broadcast_message(caf::actor_system& sys, caf::message& msg,
                              int root,
                              std::string_view group_name = default_group_name,
                              object_options opts = {}) {
  broadcast_object(msg, root, group_name, with_system(sys, std::move(opts)));
}

inline std::vector<caf::message>
allgather_message(caf::actor_system& sys, const caf::message& msg,
                  std::string_view group_name = default_group_name,
                  object_options opts = {}) {
  return allgather_object(msg, group_name, with_system(sys, std::move(opts)));
}

inline std::vector<caf::message>
gather_message(caf::actor_system& sys, const caf::message& msg, int root,
               std::string_view group_name = default_group_name,
               object_options opts = {}) {
  return gather_object(msg, root, group_name,
                       with_system(sys, std::move(opts)));
}

inline caf::message
scatter_message(caf::actor_system& sys, const std::vector<caf::message>& msgs,
                int root, std::string_view group_name = default_group_name,
                object_options opts = {}) {
  return scatter_object(msgs, root, group_name,
                        with_system(sys, std::move(opts)));
}

inline void send_message(caf::actor_system& sys, const caf::message& msg,
                         int dst,
                         std::string_view group_name = default_group_name,
                         object_options opts = {}) {
  send_object(msg, dst, group_name, with_system(sys, std::move(opts)));
}

inline caf::message
recv_message(caf::actor_system& sys, int src,
             std::string_view group_name = default_group_name,
             object_options opts = {}) {
  return recv_object<caf::message>(src, group_name,
                                   with_system(sys, std::move(opts)));
}

} // namespace caf_collective
