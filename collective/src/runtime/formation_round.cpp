#include "runtime/formation_round.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "caf_collective/error.hpp"
#include "runtime/store_text.hpp"
#include "runtime/time_left.hpp"

namespace caf_collective::detail {

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

// Keys, all below the group's own prefix. The name of the current formation
// is the only key written again by every formation; a join key is written
// under a formation's name, an admission under a rank's token, so neither
// can be mistaken for one of an earlier formation. The current key names
// the group too: groups given one store (init_options::store) must not read
// each other's formation. The name's length keeps "a" + "/b" apart from
// "a/" + "b".
std::string current_key(const formation_seat& seat) {
  return "formation/current/" + std::to_string(seat.group.size()) + ":" +
         seat.group;
}

std::string prefix_of(const std::string& formation) {
  return "formation/" + formation;
}

std::string join_key(const std::string& formation, int rank) {
  return prefix_of(formation) + "/join/" + std::to_string(rank);
}

std::string admission_key(const std::string& token) {
  return "formation/admitted/" + token;
}

/// 128 random bits in hex, from the system's entropy source.
std::string fresh_token() {
  static constexpr char digits[] = "0123456789abcdef";
  std::random_device entropy;
  std::string token;
  for (int word = 0; word < 4; ++word) {
    auto bits = static_cast<uint32_t>(entropy());
    for (int digit = 0; digit < 8; ++digit, bits >>= 4)
      token += digits[bits & 0xf];
  }
  return token;
}

error_context where_of(const formation_seat& seat) {
  return error_context::member(seat.group, seat.rank, seat.world_size);
}

// An abort or a store that broke keeps its code and words.
caf::error store_failure(const formation_seat& seat, const caf::error& err) {
  return make_error(
    is_collective_error(err) ? code_of(err) : errc::backend_error,
    where_of(seat), "forming the group failed: " + detail_of(err));
}

bool timed_out(const caf::error& err) {
  return is_collective_error(err) && code_of(err) == errc::timeout;
}

// "rank 2" or "ranks [2, 5]".
std::string ranks_named(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? "rank " + std::to_string(ranks.front())
                           : "ranks " + list_ranks(ranks);
}

caf::error never_joined(const formation_seat& seat,
                        const std::vector<int>& missing,
                        const caf::error& last_wait) {
  return make_error(errc::timeout, where_of(seat),
                    "forming the group failed: " + ranks_named(missing) +
                      " never joined within " +
                      std::to_string(seat.timeout.count()) +
                      " ms (not started, crashed, or forming another "
                      "group): " +
                      detail_of(last_wait));
}

std::string waiting_key(const std::string& formation) {
  return prefix_of(formation) + "/waiting";
}

// The current key's value: "F W B", the formation's name, rank 0's world
// size and the backend it asked for, or "F !why" once rank 0 refused that
// formation (the ranks that joined it read why on their next look at the
// key). A join's value: the rank's token, or, from a rank whose world size
// or backend differs from rank 0's, this marker, its world size and its
// backend.
const std::string other_shape_marker = "other-shape ";
// A join's value from a rank that refused the group on its own: why.
const std::string own_refusal_marker = "refused ";

/// What the ranks of a formation must agree on: the world size and the
/// backend each rank was given.
struct group_shape {
  int world_size = 0; // 0 when refused, missing or unreadable
  std::string backend;

  bool operator==(const group_shape&) const = default;

  /// "W B", as parse_shape reads it.
  std::string text() const {
    return std::to_string(world_size) + " " + backend;
  }
};

group_shape shape_of(const formation_seat& seat) {
  return {seat.world_size, seat.backend};
}

std::string current_value(const std::string& formation,
                          const formation_seat& seat) {
  return formation + " " + shape_of(seat).text();
}

std::string refused_value(const std::string& formation,
                          const std::string& why) {
  return formation + " !" + why;
}

// "F ?why": rank 0 stopped waiting for formation F at its deadline.
std::string gave_up_value(const std::string& formation,
                          const std::string& why) {
  return formation + " ?" + why;
}

// "W B" (or "W" alone).
group_shape parse_shape(const std::string& text) {
  group_shape result;
  std::istringstream in{text};
  in >> result.world_size >> result.backend;
  return result;
}

struct current_formation {
  std::string name;
  group_shape shape;
  std::string refusal; // empty while the formation is live
  /// The refusal is rank 0's timeout: it stopped waiting for ranks that
  /// never joined (a rank that comes later would wait for nobody).
  bool gave_up = false;
};

current_formation parse_current(const std::string& text) {
  auto space = text.find(' ');
  if (space == std::string::npos) return {text, {}, {}};
  current_formation result{text.substr(0, space), {}, {}};
  if (text.compare(space + 1, 1, "!") == 0 ||
      text.compare(space + 1, 1, "?") == 0) {
    result.refusal = text.substr(space + 2);
    result.gave_up = text[space + 1] == '?';
    return result;
  }
  result.shape = parse_shape(text.substr(space + 1));
  return result;
}

// Names what rank `rank` and rank 0 disagree on.
std::string shapes_differ(int rank, const group_shape& given,
                          const group_shape& rank0) {
  std::string why = "ranks disagree on";
  auto who = "rank " + std::to_string(rank);
  if (given.world_size != rank0.world_size)
    why += " its world size: " + who + " was given " +
           std::to_string(given.world_size) + ", rank 0 " +
           std::to_string(rank0.world_size) +
           (given.backend != rank0.backend ? ";" : "");
  if (given.backend != rank0.backend)
    why += " its backend: " + who + " asked for '" + given.backend +
           "', rank 0 for '" + rank0.backend + "'";
  return why;
}

caf::error refused(const formation_seat& seat, const std::string& why) {
  return make_error(errc::invalid_argument, where_of(seat),
                    "forming the group failed: " + why);
}

// The end of formation `seen`, which rank 0 refused or gave up on: for
// this rank (it joined that formation while it was live), or as the last
// one rank 0 published (`stale`: it may be an earlier attempt's).
caf::error refusal_of(const formation_seat& seat, const current_formation& seen,
                      bool stale) {
  if (!seen.gave_up)
    return refused(seat, seen.refusal +
                           (stale ? " (the formation rank 0 published last "
                                    "was refused, and no other came)"
                                  : " (rank 0 refused the formation)"));
  return make_error(
    errc::timeout, where_of(seat),
    "forming the group failed: " +
      std::string{stale ? "the formation rank 0 published last ended at "
                          "rank 0's deadline, and no other came: "
                        : "rank 0 stopped waiting at its deadline: "} +
      seen.refusal);
}

// Rank 0's list of ranks it still waits for: "2 5 7".
std::string encode_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks)
    text += (text.empty() ? "" : " ") + std::to_string(rank);
  return text;
}

std::vector<int> decode_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::istringstream in{text};
  for (int rank = 0; in >> rank;)
    ranks.push_back(rank);
  return ranks;
}

/// Rank 0: publishes a fresh name, collects the token of every rank under
/// it (publishing which ranks it still waits for, for the others' errors),
/// then admits them all. Ranks go on to the backend together: an admitted
/// rank waiting there for rank 0 would blame rank 0 for a missing peer.
caf::expected<std::string> lead(rendezvous_store& store,
                                const formation_seat& seat) {
  auto formation = fresh_token();
  if (auto err = store.set_within(current_key(seat),
                                  bytes_of(current_value(formation, seat)),
                                  time_left_rounded_up(seat.deadline)))
    return store_failure(seat, err);
  std::vector<int> waiting;
  for (int rank = 1; rank < seat.world_size; ++rank)
    waiting.push_back(rank);
  std::vector<std::string> tokens(static_cast<size_t>(seat.world_size));
  caf::error last_wait;
  auto slice = milliseconds{1};
  for (size_t listed = 0; !waiting.empty();) {
    if (waiting.size() != listed) {
      listed = waiting.size();
      if (auto err =
            store.set(waiting_key(formation), bytes_of(encode_ranks(waiting))))
        return store_failure(seat, err);
    }
    // One wait for the first rank not joined, a look at the others.
    std::vector<int> still_waiting;
    for (size_t i = 0; i < waiting.size(); ++i) {
      auto wait =
        i == 0 ? std::min(slice, time_left_rounded_up(seat.deadline)) : 0ms;
      auto token = store.get(join_key(formation, waiting[i]), wait);
      if (token) {
        auto text = text_of(*token);
        if (text.rfind(other_shape_marker, 0) == 0) {
          // Every rank waiting to be admitted learns why it never will be.
          auto why = shapes_differ(
            waiting[i], parse_shape(text.substr(other_shape_marker.size())),
            shape_of(seat));
          (void)store.set(current_key(seat),
                          bytes_of(refused_value(formation, why)));
          return refused(seat, why);
        }
        if (text.rfind(own_refusal_marker, 0) == 0) {
          auto why = "rank " + std::to_string(waiting[i]) +
                     " could not create the group: " +
                     text.substr(own_refusal_marker.size());
          (void)store.set(current_key(seat),
                          bytes_of(refused_value(formation, why)));
          return refused(seat, why);
        }
        tokens[static_cast<size_t>(waiting[i])] = std::move(text);
        continue;
      }
      if (!timed_out(token.error())) return store_failure(seat, token.error());
      if (i == 0) last_wait = token.error();
      still_waiting.push_back(waiting[i]);
    }
    if (!still_waiting.empty() && clock_type::now() >= seat.deadline) {
      // The ranks that joined learn at once that nobody admits them any
      // more, and a rank that comes later reads why.
      (void)store.set_within(
        current_key(seat),
        bytes_of(gave_up_value(
          formation, ranks_named(still_waiting) + " never joined within " +
                       std::to_string(seat.timeout.count()) + " ms")),
        std::clamp(seat.timeout, milliseconds{1}, milliseconds{1000}));
      return never_joined(
        seat, still_waiting,
        make_error(
          errc::timeout,
          "rendezvous key '" + join_key(formation, still_waiting[0]) +
            "' did not appear within " + std::to_string(seat.timeout.count()) +
            " ms (the store's last answer: " + detail_of(last_wait) + ")"));
    }
    if (still_waiting.size() == waiting.size())
      slice = std::min(2 * slice, milliseconds{50});
    waiting = std::move(still_waiting);
  }
  for (int rank = 1; rank < seat.world_size; ++rank) {
    // A rank that gave up and tried again while this formation was open
    // joined it again under a new token: admit the one there now.
    auto& token = tokens[static_cast<size_t>(rank)];
    if (auto now = store.get(join_key(formation, rank), 0ms); now) {
      auto text = text_of(*now);
      if (text.rfind(other_shape_marker, 0) != 0 &&
          text.rfind(own_refusal_marker, 0) != 0)
        token = std::move(text);
    }
    if (auto err = store.set(admission_key(token), bytes_of(formation)))
      return store_failure(seat, err);
  }
  return formation;
}

/// A rank that was not admitted by its deadline: when rank 0 saw it join,
/// it names the ranks rank 0 still waited for; otherwise rank 0 never came
/// (or the name it read is of an earlier formation).
caf::error not_admitted(rendezvous_store& store, const formation_seat& seat,
                        const std::string& formation,
                        const caf::error& last_wait) {
  auto listed = store.get(waiting_key(formation), 0ms);
  if (!listed) return never_joined(seat, {0}, last_wait);
  auto missing = decode_ranks(text_of(*listed));
  if (missing.empty() ||
      std::find(missing.begin(), missing.end(), seat.rank) != missing.end())
    return never_joined(seat, {0}, last_wait);
  return never_joined(seat, missing,
                      make_error(errc::timeout, "rank 0 waited for them"));
}

/// Every other rank: joins the formation rank 0 names, and looks again for
/// its current name while it is not admitted (the one it read may be left
/// by an earlier formation).
caf::expected<std::string> follow(rendezvous_store& store,
                                  const formation_seat& seat) {
  auto token = fresh_token();
  // A value written after this rank first looked is rank 0's answer to this
  // attempt; one already there may be left by an earlier attempt (the store
  // outlives groups).
  auto current = store.get(current_key(seat), 0ms);
  bool written_since_first_look = false;
  if (!current && timed_out(current.error())) {
    written_since_first_look = true;
    current = store.get(current_key(seat), time_left_rounded_up(seat.deadline));
  }
  if (!current) {
    if (!timed_out(current.error()))
      return store_failure(seat, current.error());
    return never_joined(seat, {0}, current.error());
  }
  auto seen = parse_current(text_of(*current));
  if (written_since_first_look && !seen.refusal.empty())
    return refusal_of(seat, seen, false);
  // Whether the formation this rank joined was live when it read it: a
  // refusal it finds later is then for it. One it read as refused may be
  // left by an earlier attempt: it waits for rank 0's next formation
  // instead.
  bool joined_live = seen.refusal.empty();
  auto slice = milliseconds{2};
  for (;;) {
    // A rank given another world size or backend than rank 0 tells rank
    // 0, which refuses the formation for everyone. It waits for that
    // refusal rather than failing at once: the name it read may be of an
    // earlier formation of another shape, and rank 0's current one may
    // still come.
    bool differs = seen.shape != shape_of(seat);
    auto joined = differs ? other_shape_marker + shape_of(seat).text() : token;
    if (joined_live)
      if (auto err =
            store.set_within(join_key(seen.name, seat.rank), bytes_of(joined),
                             time_left_rounded_up(seat.deadline)))
        return store_failure(seat, err);
    for (;;) {
      auto admitted =
        store.get(admission_key(token),
                  std::min(slice, time_left_rounded_up(seat.deadline)));
      if (admitted) return text_of(*admitted);
      if (!timed_out(admitted.error()))
        return store_failure(seat, admitted.error());
      if (clock_type::now() >= seat.deadline) {
        // A refusal already there when this rank first looked may be an
        // earlier attempt's, but far more often it is this one's, refused
        // before this rank came (a peer given another size): quote it.
        if (!seen.refusal.empty()) return refusal_of(seat, seen, true);
        if (differs)
          return refused(seat,
                         shapes_differ(seat.rank, shape_of(seat), seen.shape));
        return not_admitted(store, seat, seen.name, admitted.error());
      }
      slice = std::min(2 * slice, milliseconds{100});
      auto now_current = store.get(current_key(seat), 0ms);
      if (!now_current) return store_failure(seat, now_current.error());
      auto now = parse_current(text_of(*now_current));
      if (now.name != seen.name) {
        // Written while this rank watched: a refusal is for it.
        if (!now.refusal.empty()) return refusal_of(seat, now, false);
        seen = std::move(now);
        joined_live = true;
        break; // join again, under rank 0's new name
      }
      if (!now.refusal.empty()) {
        if (joined_live) return refusal_of(seat, now, false);
        seen.refusal = std::move(now.refusal);
        seen.gave_up = now.gave_up;
      }
    }
  }
}

} // namespace

void refuse_before_formation(const rendezvous_store_ptr& store,
                             const formation_seat& seat,
                             const std::string& why) {
  if (seat.world_size < 2 || !store) return;
  // Best effort and short: the rank's own error must not wait on the store.
  auto bound = std::clamp(seat.timeout, milliseconds{1}, milliseconds{1000});
  if (seat.rank == 0) {
    // A fresh name, so that no rank takes it for a refusal left earlier.
    (void)store->set_within(
      current_key(seat),
      bytes_of(refused_value(fresh_token(),
                             "rank 0 could not create the group: " + why)),
      bound);
    return;
  }
  // Another rank tells a formation rank 0 has published already; rank 0
  // refuses it for everyone. (If rank 0 comes later, it names this rank as
  // never joined at its deadline: a note left for it could not be told
  // from an earlier attempt's.)
  auto current = store->get(current_key(seat), 0ms);
  if (!current) return;
  auto seen = parse_current(text_of(*current));
  if (!seen.refusal.empty()) return;
  (void)store->set_within(join_key(seen.name, seat.rank),
                          bytes_of(own_refusal_marker + why), bound);
}

caf::expected<rendezvous_store_ptr>
join_formation(const rendezvous_store_ptr& store, const formation_seat& seat) {
  auto formation = seat.rank == 0 ? lead(*store, seat) : follow(*store, seat);
  if (!formation) return std::move(formation.error());
  return make_prefix_store(prefix_of(*formation), store);
}

} // namespace caf_collective::detail
