#include "caf_collective/client.hpp"

#include <algorithm>
#include <thread>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective {

caf::expected<op_result> run_op(caf::scoped_actor& self,
                                const driver_actor& driver, op_request req,
                                client_timeout timeout) {
  caf::expected<op_result> result{op_result{}};
  self->request(driver, timeout, std::move(req))
    .receive([&](op_result& x) { result = std::move(x); },
             [&](caf::error& err) { result = std::move(err); });
  return result;
}

namespace {

template<class... Ts>
caf::error ok_or_error(caf::scoped_actor& self, const caf::actor& dest,
                       client_timeout timeout, Ts&&... xs) {
  caf::error result;
  self->request(dest, timeout, std::forward<Ts>(xs)...)
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) { result = std::move(err); });
  return result;
}

} // namespace

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
  caf::expected<group_status> result{group_status{}};
  self->request(driver_or_member, timeout, status_atom::value, name)
    .receive([&](group_status& x) { result = std::move(x); },
             [&](caf::error& err) { result = std::move(err); });
  return result;
}

} // namespace caf_collective
