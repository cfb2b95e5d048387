#include "caf_collective/client.hpp"

#include <algorithm>
#include <thread>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"

#include "blocking_answer.hpp"

namespace caf_collective {

namespace {

error_context about(const std::string& group) {
  error_context where;
  where.group = group;
  return where;
}

template<class... Ts>
caf::error ok_or_error(caf::scoped_actor& self, const caf::actor& dest,
                       client_timeout timeout, const error_context& where,
                       Ts&&... xs) {
  return detail::blocking_request(
    self, dest, timeout, where, [](caf::ok_atom) {}, std::forward<Ts>(xs)...);
}

// How much longer than a declaration's own timeout its client waits: the
// driver answers a formation that failed after that timeout and its grace
// (200 ms by default), naming the ranks; a client that stopped waiting at
// the timeout itself got a bare timeout instead.
constexpr client_timeout declare_answer_margin{5000};

} // namespace

caf::expected<op_result> run_op(caf::scoped_actor& self,
                                const driver_actor& driver, op_request req,
                                client_timeout timeout) {
  return detail::blocking_op(self, driver, std::move(req), timeout);
}

caf::error await_group(caf::scoped_actor& self, const driver_actor& driver,
                       const std::string& name, client_timeout timeout) {
  using clock = std::chrono::steady_clock;
  // Members register once they run, which may be after the client asked:
  // the driver answers unknown_group until the first registration, so ask
  // again until the timeout and then report that answer.
  constexpr client_timeout pause{10};
  auto deadline = clock::now() + timeout;
  caf::error unknown; // the driver's last unknown_group answer
  for (;;) {
    auto left =
      std::chrono::duration_cast<client_timeout>(deadline - clock::now());
    // Raw: the bare request_timeout tells the caller's limit from the
    // driver's own timeout answer below.
    auto err = detail::blocking_request_raw(
      self, driver, std::max(left, client_timeout{1}), about(name),
      [](caf::ok_atom) {}, wait_atom::value, name);
    // A later ask may run out of time before the driver answers (a pause
    // that overslept on a loaded machine leaves it a millisecond): the
    // driver's answer to the ask before says more than the bare timeout.
    if (err == caf::sec::request_timeout && unknown) return unknown;
    if (code_of(err) != errc::unknown_group || clock::now() + pause >= deadline)
      return detail::named_timeout(std::move(err), about(name), timeout);
    unknown = std::move(err);
    std::this_thread::sleep_for(pause);
  }
}

caf::error declare_group(caf::scoped_actor& self, const driver_actor& driver,
                         const std::string& name,
                         const std::vector<member_actor>& members,
                         const std::string& backend, client_timeout timeout) {
  return ok_or_error(self, driver, timeout + declare_answer_margin, about(name),
                     declare_atom::value, name, members, backend,
                     static_cast<int64_t>(timeout.count()));
}

caf::error destroy_group(caf::scoped_actor& self, const driver_actor& driver,
                         const std::string& name, client_timeout timeout) {
  return ok_or_error(self, driver, timeout, about(name), destroy_atom::value,
                     name);
}

caf::expected<group_status> status_of(caf::scoped_actor& self,
                                      const caf::actor& driver_or_member,
                                      const std::string& name,
                                      client_timeout timeout) {
  group_status result;
  auto err = detail::blocking_request(
    self, driver_or_member, timeout, about(name),
    [&](group_status& x) { result = std::move(x); }, status_atom::value, name);
  if (err) return err;
  return result;
}

} // namespace caf_collective
