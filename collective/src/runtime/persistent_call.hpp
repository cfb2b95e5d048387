// What a persistent_op holds: one op's body with its arguments copied, its
// group, and the handle of its last start.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include <caf/error.hpp>

#include "caf_collective/backend.hpp"
#include "caf_collective/group.hpp"
#include "caf_collective/op_kind.hpp"
#include "caf_collective/work.hpp"

namespace caf_collective::detail {

struct persistent_call {
  std::shared_ptr<group> owner;
  op_kind op;
  device dev;
  dtype type;
  size_t bytes;
  std::chrono::milliseconds timeout;
  /// The op's blocking form and, if the backend may take it without
  /// blocking, its start form (op_body's operator() and start).
  std::function<caf::error(backend&, const op_call&)> run;
  std::function<bool(backend&, const op_call&, op_completion&)> start;
  /// The last start(): a start while it is in flight is refused.
  work last;
};

/// A persistent op as the body group::submit runs (op_body's interface):
/// its arguments are the call's own copies already, so keep() is free.
struct persistent_body {
  static constexpr bool startable = true;

  explicit persistent_body(std::shared_ptr<persistent_call> c)
    : dev(c->dev), type(c->type), bytes(c->bytes), timeout(c->timeout),
      call(std::move(c)) {}

  device dev;
  dtype type;
  size_t bytes;
  std::chrono::milliseconds timeout;
  std::shared_ptr<persistent_call> call;

  void keep() noexcept {}

  caf::error operator()(backend& be, const op_call& c) {
    return call->run(be, c);
  }

  bool start(backend& be, const op_call& c, op_completion& done) {
    return call->start && call->start(be, c, done);
  }
};

} // namespace caf_collective::detail
