// Tensors: `tensor_view` borrows memory, `tensor` owns it. Both are dense
// and contiguous (row-major); collectives look only at the element count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "caf_collective/device.hpp"
#include "caf_collective/dtype.hpp"
#include "caf_collective/shape.hpp"

namespace caf_collective {

/// Number of elements of a shape: the product of its extents (1 for a
/// scalar, i.e. an empty shape); 0 when an extent is negative or the product
/// does not fit in size_t (shape_defect says which).
size_t numel_of(const shape_type& shape) noexcept;

/// Why `shape` of `type` elements describes no memory: a negative extent, an
/// element count or a byte size beyond size_t, or a dtype outside the enum;
/// null for a well-formed one. Sizes never wrap around silently.
const char* shape_defect(const shape_type& shape, dtype type) noexcept;

/// "{2, 3}": a shape for error messages.
std::string to_string(const shape_type& shape);

/// A non-owning, contiguous view {data, dtype, shape, device}. The caller
/// keeps the memory alive for as long as an operation uses the view.
///
/// A view whose shape or dtype describes no memory (see shape_defect) is
/// malformed: it has no elements, and every operation refuses it with
/// errc::invalid_argument instead of moving nothing.
class tensor_view {
 public:
  tensor_view() = default;

  tensor_view(void* data, dtype type, shape_type shape,
              device dev = device::cpu());

  /// A one-dimensional view of `count` elements (malformed when `count`
  /// exceeds the largest extent, INT64_MAX).
  tensor_view(void* data, dtype type, size_t count, device dev = device::cpu());

  void* data() const noexcept { return data_; }

  template<class T>
  T* data_as() const noexcept {
    return static_cast<T*>(data_);
  }

  dtype type() const noexcept { return type_; }

  const shape_type& shape() const noexcept { return shape_; }

  device dev() const noexcept { return dev_; }

  size_t numel() const noexcept { return numel_; }

  size_t nbytes() const noexcept { return numel_ * size_of(type_); }

  /// Why this view is malformed; null when it is well-formed.
  const char* defect() const noexcept { return defect_; }

  /// The elements [first, first + count) as a one-dimensional view.
  tensor_view slice(size_t first, size_t count) const noexcept;

 private:
  void* data_ = nullptr;
  dtype type_ = dtype::float32;
  shape_type shape_;
  device dev_;
  size_t numel_ = 0;
  const char* defect_ = nullptr;
};

/// Maps C++ element types to dtypes (uint16_t is not mapped: float16 and
/// bfloat16 are both stored in 16 bits and must be named explicitly).
template<class T>
struct dtype_of;
template<>
struct dtype_of<int8_t> {
  static constexpr dtype value = dtype::int8;
};
template<>
struct dtype_of<uint8_t> {
  static constexpr dtype value = dtype::uint8;
};
template<>
struct dtype_of<int32_t> {
  static constexpr dtype value = dtype::int32;
};
template<>
struct dtype_of<int64_t> {
  static constexpr dtype value = dtype::int64;
};
template<>
struct dtype_of<float> {
  static constexpr dtype value = dtype::float32;
};
template<>
struct dtype_of<double> {
  static constexpr dtype value = dtype::float64;
};

/// A view of a vector's elements (one-dimensional).
template<class T>
tensor_view view_of(std::vector<T>& xs) {
  return tensor_view{xs.data(), dtype_of<T>::value, xs.size()};
}

/// An owning tensor. Host memory is 64-byte aligned; CUDA memory comes from
/// the CUDA runtime (only in builds with CUDA). Move-only: copies are
/// explicit through `clone`.
class tensor {
 public:
  tensor() = default;
  tensor(tensor&&) noexcept = default;
  tensor& operator=(tensor&&) noexcept = default;
  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;

  /// Allocates uninitialized memory; fails with out_of_memory, or with
  /// unsupported for CUDA in a build without CUDA.
  static caf::expected<tensor> empty(dtype type, shape_type shape,
                                     device dev = device::cpu());

  /// Like `empty`, zero-filled.
  static caf::expected<tensor> zeros(dtype type, shape_type shape,
                                     device dev = device::cpu());

  /// Adopts memory owned elsewhere; `keep_alive` is released with the
  /// tensor (used by DLPack import and the object store).
  static tensor adopt(tensor_view view, std::shared_ptr<void> keep_alive);

  /// Host tensor holding a copy of `xs`.
  template<class T>
  static tensor from_vector(const std::vector<T>& xs) {
    auto result =
      empty_host(dtype_of<T>::value, {static_cast<int64_t>(xs.size())});
    std::copy(xs.begin(), xs.end(), result.view_.template data_as<T>());
    return result;
  }

  /// A deep copy on the same device.
  caf::expected<tensor> clone() const;

  const tensor_view& view() const noexcept { return view_; }

  operator const tensor_view&() const noexcept { return view_; }

  void* data() const noexcept { return view_.data(); }

  dtype type() const noexcept { return view_.type(); }

  const shape_type& shape() const noexcept { return view_.shape(); }

  device dev() const noexcept { return view_.dev(); }

  size_t numel() const noexcept { return view_.numel(); }

  size_t nbytes() const noexcept { return view_.nbytes(); }

  bool defined() const noexcept {
    return storage_ != nullptr || view_.numel() == 0;
  }

 private:
  static tensor empty_host(dtype type, shape_type shape);

  std::shared_ptr<void> storage_;
  tensor_view view_;
};

} // namespace caf_collective
