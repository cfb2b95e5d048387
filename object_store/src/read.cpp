#include "caf_collective/read.hpp"

#include <cstring>
#include <string>

#include "caf_collective/error.hpp"

namespace caf_collective {

caf::error read_into(const object_store& store, const object_ref& ref,
                     const tensor_view& dst) {
  auto src = store.get(ref);
  if (!src) return std::move(src.error());
  auto object = "object " + std::to_string(ref.id) + " of node " + ref.node;
  if (!src->dev().is_cpu() || !dst.dev().is_cpu())
    return make_error(errc::unsupported,
                      "reading " + object +
                        ": only host tensors are read here; copy a device "
                        "tensor to the host first");
  if (src->type() != dst.type() || src->numel() != dst.numel())
    return make_error(errc::mismatch, "reading " + object + ": it holds " +
                                        std::to_string(src->numel()) + " x " +
                                        std::string{to_string(src->type())} +
                                        ", the destination " +
                                        std::to_string(dst.numel()) + " x " +
                                        std::string{to_string(dst.type())});
  if (src->nbytes() > 0) std::memcpy(dst.data(), src->data(), src->nbytes());
  return {};
}

} // namespace caf_collective
