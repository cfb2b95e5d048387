// A stand-in for a rank a test does not run: it joins a formation as every
// rank does first (runtime/formation_round.hpp), then the test publishes in
// its name what the case needs (a host identity, an address) and it goes no
// further.
#pragma once

#include <chrono>
#include <future>
#include <string>

#include <caf_collective/error.hpp>
#include <caf_collective/rendezvous.hpp>

#include "runtime/formation_round.hpp"

namespace test {

/// Joins the formation of group `group` on `store` as rank `rank` of
/// `world` asking for `backend` (the real ranks' backend), on a thread of
/// its own (rank 0 admits a rank only once every
/// rank joined). The future holds the formation's store, under which the
/// backend's keys live, or throws the formation's error.
inline std::future<caf_collective::rendezvous_store_ptr>
join_as_fake(caf_collective::rendezvous_store_ptr store, std::string group,
             int rank, int world, std::string backend,
             std::chrono::milliseconds timeout = std::chrono::seconds{60}) {
  return std::async(std::launch::async, [=] {
    caf_collective::detail::formation_seat seat;
    seat.group = group;
    seat.rank = rank;
    seat.world_size = world;
    seat.backend = backend;
    seat.timeout = timeout;
    seat.deadline = std::chrono::steady_clock::now() + timeout;
    auto joined = caf_collective::detail::join_formation(store, seat);
    if (!joined) throw caf_collective::collective_error{joined.error()};
    return *joined;
  });
}

} // namespace test
