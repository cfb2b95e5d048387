// The first step of every formation of a group with more than one rank: the
// ranks agree on a fresh name for this formation, and every key the backend
// publishes afterwards lives under it.
//
// Why: a store outlives a group. A group destroyed and formed again under
// its name on the same store (the documented recovery after a failure), or
// a second run against a server that keeps its keys, would otherwise read
// the keys of the earlier formation: a shm segment's name that was already
// unlinked, an NCCL unique id whose root is gone, host identities of
// processes that left. None of those can be told apart from fresh ones by
// their value, so no key of a formation is read before its rank knows the
// formation is the current one.
#pragma once

#include <chrono>
#include <string>

#include <caf/expected.hpp>

#include "caf_collective/rendezvous.hpp"

namespace caf_collective::detail {

/// Who joins, and until when.
struct formation_seat {
  std::string group;
  int rank = 0;
  int world_size = 1;
  /// The backend the rank asked for ("auto", "gloo", "shm", "nccl"): ranks
  /// that ask for different ones would wait under different keys after the
  /// round, each blaming a peer that is running.
  std::string backend;
  /// The formation's whole timeout (named in errors) and when it ends.
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point deadline;
};

/// Rank 0 picks a random name F and publishes it; every other rank publishes
/// a random token of its own under F and waits until rank 0 admits that
/// token. A rank that read F of an earlier formation re-reads it until rank
/// 0's current one comes: its token is admitted only under the current F.
/// Rank 0 admits ranks as they come and returns once all were admitted; the
/// others return once admitted. A rank given another world size or backend
/// than rank 0's makes rank 0 refuse the formation (invalid_argument on
/// every rank that joined it, naming both). Returns `store` with the prefix
/// "formation/F", or a timeout naming the ranks that never joined (rank 0)
/// or rank 0 (the others). Errors of the store (an abort, a broken
/// connection) keep their code and words: give it a cancelable store
/// (cancelable_store.hpp) so that an abort ends the waits.
caf::expected<rendezvous_store_ptr>
join_formation(const rendezvous_store_ptr& store, const formation_seat& seat);

/// A rank that refused a group on its own, before the round (an unknown
/// backend, no usable CUDA device). Rank 0 publishes `why` as its refusal
/// under a fresh formation name: the ranks already waiting for its
/// formation fail at once quoting it, those that come later quote it at
/// their deadline (they cannot tell it from a refusal left by an earlier
/// attempt). Another rank tells the formation rank 0 has published, if
/// any: rank 0 then refuses it for every rank, naming this one. Asks the
/// store to give up after 1 s (a TCP store adds its handshake floor and
/// reply grace to that).
void refuse_before_formation(const rendezvous_store_ptr& store,
                             const formation_seat& seat,
                             const std::string& why);

} // namespace caf_collective::detail
