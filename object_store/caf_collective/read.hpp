// Reading a stored tensor back into plain C++ memory: the usual last step
// of a client that ran a collective on refs and wants the numbers.
#pragma once

#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/object_store.hpp"

namespace caf_collective {

/// Copies the object's bytes into `dst`, which must have its dtype and
/// element count. Fails with unknown_object (no such object here),
/// mismatch (another dtype or count; nothing copied) or unsupported (a
/// device tensor or destination: copy it to the host first).
caf::error read_into(const object_store& store, const object_ref& ref,
                     const tensor_view& dst);

/// The object's elements as a vector; its dtype must be T's.
template<class T>
caf::expected<std::vector<T>> read_vector(const object_store& store,
                                          const object_ref& ref) {
  std::vector<T> result(ref.numel());
  auto dst = tensor_view{result.data(), dtype_of<T>::value, result.size()};
  if (auto err = read_into(store, ref, dst)) return err;
  return result;
}

} // namespace caf_collective
