// Reading a stored tensor back into plain C++ memory: the usual last step
// of a client that ran a collective on refs and wants the numbers.
#pragma once

#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/object_store.hpp"

namespace caf_collective {

namespace detail {

/// read_into's copy from `src`, the tensor `ref` names, pinned by the
/// caller for the duration of the call.
caf::error read_pinned(const object_ref& ref, const tensor& src,
                       const tensor_view& dst);

} // namespace detail

/// Copies the object's bytes into `dst`, which must have its dtype and
/// element count. Fails with unknown_object (no such object here),
/// mismatch (another dtype or count, or a ref whose dtype, shape or device
/// disagree with the stored tensor; nothing copied) or unsupported (a
/// device tensor or destination: copy it to the host first). The object
/// stays pinned while it is copied: releasing it meanwhile (from another
/// thread, or release_owned_by when its owner ends) frees its memory only
/// once the copy is done.
caf::error read_into(const object_store& store, const object_ref& ref,
                     const tensor_view& dst);

/// The object's elements as a vector; its dtype must be T's. Fails as
/// read_into does. The vector is sized from the stored tensor, after the
/// store confirmed that the ref describes it: a forged or stale ref fails
/// instead of allocating whatever its shape says.
template<class T>
caf::expected<std::vector<T>> read_vector(const object_store& store,
                                          const object_ref& ref) {
  auto pinned = store.pin(ref);
  if (!pinned) return std::move(pinned.error());
  const tensor& src = **pinned;
  std::vector<T> result;
  // Only a tensor that reads as T needs room; for any other the copy fails
  // before it touches the destination.
  if (src.type() == dtype_of<T>::value && src.dev().is_cpu())
    result.resize(src.numel());
  auto dst = tensor_view{result.data(), dtype_of<T>::value, src.numel()};
  if (auto err = detail::read_pinned(ref, src, dst)) return err;
  return result;
}

} // namespace caf_collective
