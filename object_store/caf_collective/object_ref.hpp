// object_ref: the small, serializable name of a tensor in a node's object
// store. Collectives driven by actors carry refs, never tensor data.
#pragma once

#include <cstdint>
#include <string>

#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include "caf_collective/device.hpp"
#include "caf_collective/dtype.hpp"
#include "caf_collective/tensor.hpp"

namespace caf_collective {

/// Names one tensor in the object store of one node. Besides the id it
/// carries the tensor's fingerprint (dtype, shape, device), so a driver can
/// check a whole request without touching any store. A default-constructed
/// ref (id 0) names nothing; ops use it where a rank has no tensor.
struct object_ref {
  /// The node (actor system) whose store holds the tensor, as rendered by
  /// `to_string(caf::node_id)`.
  std::string node;
  /// Unique per store, starting at 1; 0 means "no object".
  uint64_t id = 0;
  dtype type = dtype::float32;
  shape_type shape;
  device dev;

  bool valid() const noexcept { return id != 0; }

  size_t numel() const noexcept { return numel_of(shape); }

  size_t nbytes() const noexcept { return numel() * size_of(type); }

  friend bool operator==(const object_ref&, const object_ref&) = default;
};

/// E.g. "obj#3@<node> float32[2,4] cpu".
std::string to_string(const object_ref& x);

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, object_ref& x) {
  return f(caf::meta::type_name("object_ref"), x.node, x.id, x.type, x.shape,
           x.dev);
}

/// Registers object_ref (and the vocabulary it carries: dtype, device,
/// shapes) as CAF message types. The actor layer's `add_message_types`
/// calls this; call it yourself only when you use the store without actors.
void add_object_store_types(caf::actor_system_config& cfg);

} // namespace caf_collective
