#include "caf_collective/client.hpp"

#include <algorithm>
#include <thread>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective {

namespace {

// A blocking request whose timeout is the scoped actor's own timed wait. A
// request timeout goes through CAF's clock thread, and waking it cost about
// 45 us per call on 2 cores (docs/benchmarks.md, driver round trip). A
// response arriving after the timeout stays unread in the mailbox.
template<class OnResult, class... Ts>
caf::error blocking_request(caf::scoped_actor& self, const caf::actor& dest,
                            client_timeout timeout, OnResult on_result,
                            Ts&&... xs) {
  caf::error failure;
  auto pending = self->request(dest, caf::infinite, std::forward<Ts>(xs)...);
  caf::blocking_actor::accept_one_cond once;
  self->varargs_receive(
    once, pending.id(), std::move(on_result),
    [&](caf::error& err) { failure = std::move(err); },
    caf::after(timeout) >>
      [&] { failure = caf::make_error(caf::sec::request_timeout); });
  return failure;
}

template<class... Ts>
caf::error ok_or_error(caf::scoped_actor& self, const caf::actor& dest,
                       client_timeout timeout, Ts&&... xs) {
  return blocking_request(
    self, dest, timeout, [](caf::ok_atom) {}, std::forward<Ts>(xs)...);
}

} // namespace

caf::expected<op_result> run_op(caf::scoped_actor& self,
                                const driver_actor& driver, op_request req,
                                client_timeout timeout) {
  op_result result;
  auto err = blocking_request(
    self, driver, timeout, [&](op_result& x) { result = std::move(x); },
    std::move(req));
  if (err) return err;
  return result;
}

caf::error await_group(caf::scoped_actor& self, const driver_actor& driver,
                       const std::string& name, client_timeout timeout) {
  using clock = std::chrono::steady_clock;
  // Members register once they run, which may be after the client asked:
  // the driver answers unknown_group until the first registration, so ask
  // again until the timeout and then report that answer.
  constexpr client_timeout pause{10};
  auto deadline = clock::now() + timeout;
  for (;;) {
    auto left =
      std::chrono::duration_cast<client_timeout>(deadline - clock::now());
    auto err = ok_or_error(self, driver, std::max(left, client_timeout{1}),
                           wait_atom::value, name);
    if (code_of(err) != errc::unknown_group || clock::now() + pause >= deadline)
      return err;
    std::this_thread::sleep_for(pause);
  }
}

caf::error declare_group(caf::scoped_actor& self, const driver_actor& driver,
                         const std::string& name,
                         const std::vector<member_actor>& members,
                         const std::string& backend, client_timeout timeout) {
  return ok_or_error(self, driver, timeout, declare_atom::value, name, members,
                     backend, static_cast<int64_t>(timeout.count()));
}

caf::error destroy_group(caf::scoped_actor& self, const driver_actor& driver,
                         const std::string& name, client_timeout timeout) {
  return ok_or_error(self, driver, timeout, destroy_atom::value, name);
}

caf::expected<group_status> status_of(caf::scoped_actor& self,
                                      const caf::actor& driver_or_member,
                                      const std::string& name,
                                      client_timeout timeout) {
  group_status result;
  auto err = blocking_request(
    self, driver_or_member, timeout,
    [&](group_status& x) { result = std::move(x); }, status_atom::value, name);
  if (err) return err;
  return result;
}

} // namespace caf_collective
