#include "runtime/backend_factory.hpp"

#include "backends/shm/shm_backend.hpp"
#include "caf_collective/error.hpp"
#include "runtime/cancelable_store.hpp"
#include "runtime/formation_round.hpp"
#include "runtime/time_left.hpp"

namespace caf_collective::detail {

namespace {

// "auto": shm when every rank runs on this host, gloo otherwise. Every rank
// publishes its host identity and reads all of them, so all decide alike.
// A group formed by a member does not know its tensors yet: the actor layer
// picks nccl for CUDA tensors itself.
caf::expected<backend_ptr> make_auto_backend(const group_config& cfg,
                                             const std::atomic<bool>* cancel,
                                             milliseconds op_timeout) {
  auto deadline = std::chrono::steady_clock::now() + cfg.timeout;
  auto store = make_prefix_store("auto/" + cfg.name, cfg.store);
  auto me = shm::host_identity();
  if (auto err = store->set("host/" + std::to_string(cfg.rank),
                            std::vector<char>(me.begin(), me.end())))
    return err;
  bool one_host = cfg.world_size <= shm::max_world_size;
  for (int r = 0; r < cfg.world_size; ++r) {
    auto host = store->get("host/" + std::to_string(r), time_left(deadline));
    if (!host) {
      auto where = error_context::member(cfg.name, cfg.rank, cfg.world_size);
      // An abort or a store that broke keeps its code and words.
      if (code_of(host.error()) != errc::timeout)
        return make_error(
          is_collective_error(host.error()) ? code_of(host.error())
                                            : errc::backend_error,
          where, "forming the group failed: " + detail_of(host.error()));
      return make_error(errc::timeout, where,
                        "forming the group failed: rank " + std::to_string(r) +
                          " did not join within " +
                          std::to_string(cfg.timeout.count()) + " ms");
    }
    one_host = one_host && std::string(host->begin(), host->end()) == me;
  }
  auto chosen = cfg;
  chosen.backend = one_host ? "shm" : "gloo";
  chosen.timeout = std::max(milliseconds{1}, time_left(deadline));
  if (one_host) return shm::make_shm_backend(chosen, cancel);
  // make_backend checked only what "auto" needs; Gloo needs more.
  if (auto err = check_gloo_usable(chosen)) return err;
  return make_gloo_backend(chosen, op_timeout);
}

// What this rank can tell alone, before it waits for the others: an
// unknown or missing backend, an NCCL group without a CUDA device, a Gloo
// rank whose hostname does not resolve.
caf::error refused_here(const group_config& cfg) {
  if (cfg.backend == "gloo") return check_gloo_usable(cfg);
  if (cfg.backend == "shm" || cfg.backend == "auto") return {};
  if (cfg.backend == "nccl") {
#if CAF_COLLECTIVE_HAVE_NCCL
    return check_nccl_usable(cfg);
#else
    return make_error(errc::unsupported,
                      "group '" + cfg.name +
                        "': backend nccl is not built in (configure with "
                        "the CUDA toolkit and NCCL present)");
#endif
  }
  return make_error(errc::invalid_argument,
                    "group '" + cfg.name + "': unknown backend '" +
                      cfg.backend + "' (expected gloo, shm, nccl or auto)");
}

// Without its deadline: a refused config's timeout may be out of range.
formation_seat seat_of(const group_config& cfg) {
  formation_seat seat;
  seat.group = cfg.name;
  seat.rank = cfg.rank;
  seat.world_size = cfg.world_size;
  seat.backend = cfg.backend;
  seat.timeout = cfg.timeout;
  return seat;
}

} // namespace

void tell_followers_of_refusal(const group_config& cfg, const caf::error& why) {
  if (cfg.name.empty() || cfg.world_size > max_world_size) return;
  refuse_before_formation(cfg.store, seat_of(cfg), detail_of(why));
}

caf::expected<backend_ptr> make_backend(const group_config& given,
                                        const std::atomic<bool>* cancel) {
  if (auto err = refused_here(given)) {
    tell_followers_of_refusal(given, err);
    return err;
  }
  // Every wait on the store (addresses, host identities, the segment's
  // name, NCCL's unique id) ends soon after the group is aborted.
  auto cfg = given;
  // cfg.timeout shrinks to what is left of the formation; ops keep this.
  const auto op_timeout = given.timeout;
  if (cancel != nullptr && cfg.store)
    cfg.store = make_cancelable_store(
      cfg.store, cancel, "group '" + cfg.name + "' was aborted", cfg.timeout);
  // Every key the backend reads from here on is this formation's own.
  if (cfg.world_size > 1 && cfg.store) {
    auto seat = seat_of(cfg);
    seat.deadline = std::chrono::steady_clock::now() + cfg.timeout;
    auto joined = join_formation(cfg.store, seat);
    if (!joined) return std::move(joined.error());
    cfg.store = std::move(*joined);
    cfg.timeout = std::max(milliseconds{1}, time_left(seat.deadline));
  }
  if (cfg.backend == "gloo") return make_gloo_backend(cfg, op_timeout);
  if (cfg.backend == "shm") return shm::make_shm_backend(cfg, cancel);
  if (cfg.backend == "auto") return make_auto_backend(cfg, cancel, op_timeout);
#if CAF_COLLECTIVE_HAVE_NCCL
  return make_nccl_backend(cfg, cancel);
#else
  return make_error(errc::unsupported, "unreachable: nccl refused above");
#endif
}

} // namespace caf_collective::detail
