#include "backend_factory.hpp"

#include "caf_collective/error.hpp"

namespace caf_collective::detail {

caf::expected<backend_ptr> make_backend(const group_config& cfg) {
  // "auto" resolves to gloo here: a group formed by a member does not know
  // its tensors yet. The actor layer picks nccl for CUDA tensors itself.
  if (cfg.backend == "gloo" || cfg.backend == "auto")
    return make_gloo_backend(cfg);
  if (cfg.backend == "nccl") {
#if CAF_COLLECTIVE_HAVE_NCCL
    return make_nccl_backend(cfg);
#else
    return make_error(errc::unsupported,
                      "group '" + cfg.name +
                        "': backend nccl is not built in (configure with "
                        "the CUDA toolkit and NCCL present)");
#endif
  }
  return make_error(errc::invalid_argument,
                    "group '" + cfg.name + "': unknown backend '" +
                      cfg.backend + "' (expected gloo, nccl or auto)");
}

} // namespace caf_collective::detail
