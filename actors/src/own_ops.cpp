#include "own_ops.hpp"

#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include <caf/all.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective::detail {

namespace {

// Every running member of this process. Looked up once per
// member-initiated op, by the member itself.
struct starters {
  std::mutex mtx;
  std::unordered_map<const caf::actor_control_block*,
                     std::shared_ptr<own_op_starter>>
    by_actor;
};

starters& registry() {
  static starters instance;
  return instance;
}

std::shared_ptr<own_op_starter>
starter_of(const caf::actor_control_block* who) {
  auto& r = registry();
  std::lock_guard<std::mutex> guard{r.mtx};
  auto i = r.by_actor.find(who);
  return i == r.by_actor.end() ? nullptr : i->second;
}

} // namespace

void register_own_ops(const caf::actor_control_block* who,
                      std::shared_ptr<own_op_starter> start) {
  auto& r = registry();
  std::lock_guard<std::mutex> guard{r.mtx};
  r.by_actor[who] = std::move(start);
}

void unregister_own_ops(const caf::actor_control_block* who) {
  auto& r = registry();
  std::lock_guard<std::mutex> guard{r.mtx};
  r.by_actor.erase(who);
}

namespace {

// The promise a request from `self` to itself would have made: its answer
// goes to `self` as the response to `id`.
caf::response_promise answer_to_self(caf::local_actor* self,
                                     caf::message_id id) {
  auto me = caf::actor_cast<caf::strong_actor_ptr>(self);
  return caf::response_promise{me, me, {}, id};
}

caf::error no_member(const std::string& what, const std::string& group) {
  return make_error(errc::unknown_group,
                    "member-initiated " + what + " on group '" + group +
                      "': this actor runs no member protocol");
}

} // namespace

void start_own_op(caf::local_actor* self, member_op op, caf::message_id id) {
  auto answer = answer_to_self(self, id);
  if (auto start = starter_of(self->ctrl()))
    start->op(op, std::move(answer));
  else
    answer.deliver(no_member(std::string{to_string(op.op)}, op.group));
}

void start_own_job(caf::local_actor* self, member_job job, caf::message_id id) {
  auto answer = answer_to_self(self, id);
  if (auto start = starter_of(self->ctrl()))
    start->job(job, std::move(answer));
  else
    answer.deliver(no_member(job.what, job.group));
}

} // namespace caf_collective::detail
