// Conversion between caf-collective tensors and DLPack, so any framework's
// tensor (PyTorch, CuPy, NumPy, JAX, ...) can come in and go out.
#pragma once

#include <dlpack/dlpack.h>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "caf_collective/tensor.hpp"

namespace caf_collective {

/// Maps a DLPack dtype to ours; fails with unsupported for types we do not
/// carry (complex, bool with bits != 8, lanes != 1, ...).
caf::expected<dtype> from_dlpack_dtype(DLDataType type);
DLDataType to_dlpack_dtype(dtype type) noexcept;

/// Borrows a DLTensor. Fails with invalid_argument for non-contiguous
/// strides and unsupported for devices other than CPU and CUDA.
caf::expected<tensor_view> view_of(const DLTensor& in);

/// Takes ownership of a managed tensor: its deleter runs when the returned
/// tensor (or the last tensor adopted from it) is destroyed. On error the
/// managed tensor is released before returning.
caf::expected<tensor> from_dlpack(DLManagedTensor* managed);

/// Hands a tensor out through DLPack. The caller owns the result and must
/// call its deleter exactly once.
DLManagedTensor* to_dlpack(tensor&& owned);

} // namespace caf_collective
