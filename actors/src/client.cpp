#include "caf_collective/client.hpp"

#include <caf/all.hpp>

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
  return ok_or_error(self, driver, timeout, wait_atom::value, name);
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
