#include "caf_collective/read.hpp"

#include <cstring>
#include <string>

#include "caf_collective/error.hpp"

namespace caf_collective {

namespace detail {

caf::error read_pinned(const object_ref& ref, const tensor& src,
                       const tensor_view& dst) {
  auto object = "object " + std::to_string(ref.id) + " of node " + ref.node;
  if (!src.dev().is_cpu() || !dst.dev().is_cpu())
    return make_error(errc::unsupported,
                      "reading " + object +
                        ": only host tensors are read here; copy a device "
                        "tensor to the host first");
  if (src.type() != dst.type() || src.numel() != dst.numel())
    return make_error(errc::mismatch, "reading " + object + ": it holds " +
                                        std::to_string(src.numel()) + " x " +
                                        std::string{to_string(src.type())} +
                                        ", the destination " +
                                        std::to_string(dst.numel()) + " x " +
                                        std::string{to_string(dst.type())});
  if (src.nbytes() > 0) std::memcpy(dst.data(), src.data(), src.nbytes());
  return {};
}

} // namespace detail

caf::error read_into(const object_store& store, const object_ref& ref,
                     const tensor_view& dst) {
  // Pinned, not viewed: a release meanwhile (another actor's, or
  // release_owned_by when the owning actor ends) must neither free the
  // memory under the copy nor let the next put reuse it.
  auto src = store.pin(ref);
  if (!src) return std::move(src.error());
  return detail::read_pinned(ref, **src, dst);
}

} // namespace caf_collective
