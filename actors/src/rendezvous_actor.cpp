#include "caf_collective/rendezvous_actor.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/interfaces.hpp"

#include "member_store.hpp"

namespace caf_collective {

namespace {

using key_timeout_atom = caf::atom_constant<caf::atom("col_ktmo")>;

struct waiter {
  uint64_t id;
  caf::response_promise rp;
};

struct store_state {
  std::map<std::string, std::vector<char>> values;
  std::multimap<std::string, waiter> waiting;
  uint64_t next_id = 0;
  static inline const char* name = "caf_collective.store";
};

caf::behavior store_impl(caf::stateful_actor<store_state>* self) {
  return {
    [=](caf::put_atom, const std::string& key, std::vector<char>& value) {
      auto [first, last] = self->state.waiting.equal_range(key);
      for (auto i = first; i != last; ++i)
        i->second.rp.deliver(value);
      self->state.waiting.erase(first, last);
      self->state.values[key] = std::move(value);
      return caf::ok_atom::value;
    },
    [=](caf::get_atom, const std::string& key,
        int64_t timeout_ms) -> caf::result<std::vector<char>> {
      auto i = self->state.values.find(key);
      if (i != self->state.values.end()) return i->second;
      auto rp = self->make_response_promise();
      auto id = self->state.next_id++;
      self->state.waiting.emplace(key, waiter{id, rp});
      self->delayed_send(self, std::chrono::milliseconds{timeout_ms},
                         key_timeout_atom::value, key, id, timeout_ms);
      return caf::delegated<std::vector<char>>{};
    },
    [=](forget_atom, const std::string& prefix) {
      // Waiters stay: they end at their own timeout, as for a key never set.
      auto& values = self->state.values;
      auto i = values.lower_bound(prefix);
      while (i != values.end() && i->first.starts_with(prefix))
        i = values.erase(i);
      return caf::ok_atom::value;
    },
    [=](key_timeout_atom, const std::string& key, uint64_t id,
        int64_t timeout_ms) {
      auto [first, last] = self->state.waiting.equal_range(key);
      for (auto i = first; i != last; ++i) {
        if (i->second.id == id) {
          i->second.rp.deliver(make_error(
            errc::timeout, "rendezvous key '" + key + "' not set within " +
                             std::to_string(timeout_ms) + " ms"));
          self->state.waiting.erase(i);
          return;
        }
      }
    },
  };
}

class actor_store : public rendezvous_store {
 public:
  actor_store(caf::actor_system& sys, store_actor store, std::string prefix,
              bool holds_system)
    : sys_(sys), store_(typed_store(store)), prefix_(std::move(prefix)),
      holds_system_(holds_system) {
    // Counted as a running actor: the system's destructor waits for it
    // (await_all_actors_done) before it tears down the scheduler and the
    // clock that set() and get() need.
    if (holds_system_) sys_.registry().inc_running();
  }

  ~actor_store() override {
    if (holds_system_) sys_.registry().dec_running();
  }

  actor_store(const actor_store&) = delete;
  actor_store& operator=(const actor_store&) = delete;

  caf::error set(const std::string& key,
                 const std::vector<char>& value) override {
    return set_within(key, value, std::chrono::seconds{30});
  }

  // Within `timeout`: the formation's abortable store asks in slices of
  // 100 ms, and a refusal is told to the other ranks within 1 s; a set to
  // a store whose node was lost held both for 30 s.
  caf::error set_within(const std::string& key, const std::vector<char>& value,
                        std::chrono::milliseconds timeout) override {
    caf::error result;
    caf::scoped_actor self{sys_};
    self
      ->request(store_, bounded(timeout), caf::put_atom::value,
                prefix_ + "/" + key, value)
      .receive(
        [](caf::ok_atom) {},
        [&](caf::error& err) { result = unreachable_or(std::move(err)); });
    return result;
  }

  caf::expected<std::vector<char>>
  get(const std::string& key, std::chrono::milliseconds timeout) override {
    caf::expected<std::vector<char>> result{std::vector<char>{}};
    caf::scoped_actor self{sys_};
    // The store answers with its own timeout error; ours is only a backstop
    // for a store that died.
    timeout = bounded(timeout);
    self
      ->request(store_, timeout + std::chrono::seconds{1}, caf::get_atom::value,
                prefix_ + "/" + key, static_cast<int64_t>(timeout.count()))
      .receive(
        [&](std::vector<char>& value) { result = std::move(value); },
        [&](caf::error& err) { result = unreachable_or(std::move(err)); });
    return result;
  }

 private:
  // At most max_timeout_ms (24 h), at least 0: the clock arithmetic of a
  // longer wait (milliseconds::max() for "for ever") overflowed into a
  // deadline in the past, and the get failed at once.
  static std::chrono::milliseconds bounded(std::chrono::milliseconds timeout) {
    return std::clamp(timeout, std::chrono::milliseconds{0},
                      std::chrono::milliseconds{max_timeout_ms});
  }

  // The store actor's own errors as they are; CAF's for a store that did
  // not answer in time as a timeout naming it, and for a store that is
  // gone as peer_lost: a timeout made waiting stores ask again at once,
  // spinning a core until their deadline.
  static caf::error unreachable_or(caf::error err) {
    if (err == caf::sec::request_timeout)
      return make_error(errc::timeout,
                        "rendezvous store unreachable: " + render(err));
    if (err == caf::sec::request_receiver_down)
      return make_error(errc::peer_lost,
                        "the rendezvous store actor is gone: " + render(err));
    return err;
  }

  caf::actor_system& sys_;
  store_api store_;
  std::string prefix_;
  bool holds_system_;
};

} // namespace

store_actor spawn_store_actor(caf::actor_system& sys) {
  return sys.spawn(store_impl);
}

rendezvous_store_ptr make_actor_store(caf::actor_system& sys, store_actor store,
                                      std::string prefix) {
  return std::make_shared<actor_store>(sys, std::move(store), std::move(prefix),
                                       false);
}

rendezvous_store_ptr make_member_store(caf::actor_system& sys,
                                       store_actor store, std::string prefix) {
  return std::make_shared<actor_store>(sys, std::move(store), std::move(prefix),
                                       true);
}

} // namespace caf_collective
