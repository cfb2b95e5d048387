// How a blocking client (a caf::scoped_actor: client.cpp, client_ops.cpp)
// waits for the answer to one request. CAF 0.17 answers nothing when the
// node of a remote actor is lost (it has no broken promises), so a request
// to a driver or member on another node would wait until its timeout, or
// forever without one. While the client waits for an actor on another
// node, it watches that actor (an attachable, not a monitor: no message
// lands in the client's mailbox) and stops waiting once the actor is gone.
// An actor of this node needs no watch: the driver answers everything it
// holds when it exits (driver_failure.hpp), and CAF bounces requests sent
// to an actor that is gone.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/messages.hpp"

namespace caf_collective::detail {

/// The error of a request whose receiver on another node went away
/// (`reason`) before it answered; `where` names the group and op asked
/// about, where there is one.
inline caf::error gone_before_answer(const error_context& where,
                                     const caf::error& reason) {
  return make_error(errc::aborted, where,
                    "the actor asked, on another node, went away (" +
                      render(reason) +
                      ") before it answered: whether the request took "
                      "effect there is unknown");
}

/// Learns when a watched actor terminates or its node is lost.
class exit_watch {
 public:
  /// Starts watching `whom`: fires at once if it is gone already.
  explicit exit_watch(caf::strong_actor_ptr whom)
    : whom_(std::move(whom)), seen_(std::make_shared<seen>()) {
    whom_->get()->attach(std::make_unique<sensor>(seen_));
  }

  ~exit_watch() {
    whom_->get()->detach(
      caf::attachable::token{caf::attachable::token::anonymous, seen_.get()});
  }

  exit_watch(const exit_watch&) = delete;
  exit_watch& operator=(const exit_watch&) = delete;

  /// The reason the actor went, once it did.
  std::optional<caf::error> gone() const {
    std::lock_guard<std::mutex> guard{seen_->mtx};
    return seen_->reason;
  }

 private:
  struct seen {
    std::mutex mtx;
    std::optional<caf::error> reason;
  };

  // Attached to the actor; the actor owns it and destroys it when it runs.
  class sensor : public caf::attachable {
   public:
    explicit sensor(std::shared_ptr<seen> s) : seen_(std::move(s)) {}

    void actor_exited(const caf::error& reason, caf::execution_unit*) override {
      std::lock_guard<std::mutex> guard{seen_->mtx};
      seen_->reason = reason;
    }

    // The token is the shared record, not this object: that address stays
    // unique while the watch exists, even after the sensor was destroyed.
    bool matches(const token& what) override {
      return what.subtype == token::anonymous && what.ptr == seen_.get();
    }

   private:
    std::shared_ptr<seen> seen_;
  };

  caf::strong_actor_ptr whom_;
  std::shared_ptr<seen> seen_;
};

/// Waits for the answer to request `id`, which `self` sent to `dest`:
/// `on_result` takes it, and the result is none, or the error it carried.
/// After `timeout` (none: no limit) the result is request_timeout. When
/// `dest` lives on another node and goes away first (terminates, or its
/// node is lost), the result is `lost(reason)`, within `slice` of it.
template<class OnResult, class Lost>
caf::error
await_answer(caf::scoped_actor& self, const caf::strong_actor_ptr& dest,
             caf::message_id id,
             std::optional<std::chrono::milliseconds> timeout,
             OnResult on_result, Lost lost,
             std::chrono::milliseconds slice = std::chrono::milliseconds{50}) {
  caf::error failure;
  auto on_error = [&](caf::error& err) { failure = std::move(err); };
  caf::blocking_actor::accept_one_cond once;
  auto no_answer = [&] {
    failure = caf::make_error(caf::sec::request_timeout);
  };
  if (!dest || dest->node() == self->node()) {
    if (timeout)
      self->varargs_receive(once, id, on_result, on_error,
                            caf::after(*timeout) >> no_answer);
    else
      self->varargs_receive(once, id, on_result, on_error);
    return failure;
  }
  exit_watch watch{dest};
  using clock = std::chrono::steady_clock;
  auto deadline = timeout ? clock::now() + *timeout : clock::time_point::max();
  for (;;) {
    bool waited_out = false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clock::now());
    self->varargs_receive(
      once, id, on_result, on_error,
      caf::after(std::clamp(left, std::chrono::milliseconds{0}, slice)) >>
        [&] { waited_out = true; });
    if (!waited_out) return failure;
    if (auto reason = watch.gone()) {
      // An answer may have come just before the loss was seen.
      waited_out = false;
      self->varargs_receive(
        once, id, on_result, on_error,
        caf::after(std::chrono::milliseconds{0}) >> [&] { waited_out = true; });
      return waited_out ? lost(*reason) : failure;
    }
    if (clock::now() >= deadline) {
      no_answer();
      return failure;
    }
  }
}

/// The answer to a request about object `ref` (`request`: "release", ...)
/// whose target went away first: `outcome` may or may not have happened.
/// The relay's answer and the blocking calls' error alike.
inline std::function<caf::error(const caf::error&)>
lost_object_request(const object_ref& ref, const char* request,
                    const char* outcome) {
  return
    [id = ref.id, node = ref.node, request, outcome](const caf::error& why) {
      return make_error(
        errc::aborted,
        std::string{request} + " of object " + std::to_string(id) +
          " of node " + node + ": the actor asked went away (" + render(why) +
          ") before it answered: whether " + outcome + " is unknown");
    };
}

/// Sends `xs` to `dest` (a driver or member handle, typed or not) and waits
/// for the answer as await_answer does; the loss of a `dest` on another
/// node fails with an error naming `where`. The timeout is the scoped
/// actor's own timed wait, not a request timeout: that one goes through
/// CAF's clock thread, whose wake-up cost about 45 us per call on 2 cores
/// (docs/benchmarks.md, driver round trip). An answer arriving after the
/// timeout stays unread in the mailbox.
template<class Handle, class OnResult, class... Ts>
caf::error
blocking_request_raw(caf::scoped_actor& self, const Handle& dest,
                     std::optional<std::chrono::milliseconds> timeout,
                     const error_context& where, OnResult on_result,
                     Ts&&... xs) {
  auto pending = self->request(dest, caf::infinite, std::forward<Ts>(xs)...);
  return await_answer(self, caf::actor_cast<caf::strong_actor_ptr>(dest),
                      pending.id(), timeout, std::move(on_result),
                      [&](const caf::error& reason) {
                        return gone_before_answer(where, reason);
                      });
}

/// CAF's bare request_timeout of a blocking call as a timeout naming
/// `where` and the wait; any other result as it is.
inline caf::error
named_timeout(caf::error err, const error_context& where,
              std::optional<std::chrono::milliseconds> limit) {
  if (err != caf::sec::request_timeout || !limit) return err;
  return make_error(errc::timeout, where,
                    "no answer within " + std::to_string(limit->count()) +
                      " ms (the actor asked is busy, or its answer comes "
                      "later than the caller waits)");
}

/// blocking_request_raw, with a timeout that names `where`.
template<class Handle, class OnResult, class... Ts>
caf::error blocking_request(caf::scoped_actor& self, const Handle& dest,
                            std::optional<std::chrono::milliseconds> timeout,
                            const error_context& where, OnResult on_result,
                            Ts&&... xs) {
  return named_timeout(blocking_request_raw(self, dest, timeout, where,
                                            std::move(on_result),
                                            std::forward<Ts>(xs)...),
                       where, timeout);
}

/// Runs op `req` through blocking_request.
template<class Handle>
caf::expected<op_result>
blocking_op(caf::scoped_actor& self, const Handle& driver, op_request req,
            std::optional<std::chrono::milliseconds> timeout) {
  op_result result;
  // error_context holds a view: keep the name past the request's move.
  auto group = req.group;
  error_context where{group, req.op, -1, -1, -1};
  auto err = blocking_request(
    self, driver, timeout, where, [&](op_result& x) { result = std::move(x); },
    std::move(req));
  if (err) return err;
  return result;
}

} // namespace caf_collective::detail
