// Object collectives a member starts from its own handlers. Object ops
// (object_collectives.hpp) block while they exchange sizes, payloads and
// verdicts, so they may run neither on a scheduler thread nor on the
// group's lane: the member runs each on a thread of its own and holds its
// later ops of that group until it finished, so every rank runs the
// group's ops in one order. The result (the objects) or the error comes
// back as the response, as for member_ops.hpp's tensor ops.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <utility>

#include <caf/expected.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"

namespace caf_collective {

/// Blocking work on one group, run on a thread of the member's.
class group_job {
 public:
  virtual ~group_job();

  /// Runs on a thread that may block. Returns the response's content.
  virtual caf::expected<caf::message> run(group& g) = 0;
};

using group_job_ptr = std::shared_ptr<group_job>;

/// An object op a member started (member_ops.hpp), answered with the
/// job's message or error. Never sent: the member starts it in its own
/// handler, and the job is code, not data.
struct member_job {
  std::string group;
  /// For errors before the job runs, e.g. "broadcast_object".
  std::string what;
  group_job_ptr job;
};

namespace detail {

template<class Fn>
class fn_job final : public group_job {
 public:
  explicit fn_job(Fn fn) : fn_(std::move(fn)) {
    // nop
  }

  caf::expected<caf::message> run(group& g) override {
    try {
      return fn_(g);
    } catch (const collective_error& ex) {
      return ex.error();
    } catch (const std::exception& ex) {
      return make_error(errc::backend_error, ex.what());
    }
  }

 private:
  Fn fn_;
};

/// `fn(group&) -> caf::message`, run as a member's group job.
template<class Fn>
group_job_ptr make_job(Fn fn) {
  return std::make_shared<fn_job<Fn>>(std::move(fn));
}

} // namespace detail

} // namespace caf_collective
