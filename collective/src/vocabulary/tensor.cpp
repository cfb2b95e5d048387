#include "caf_collective/tensor.hpp"

#include <cstring>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "vocabulary/device_memory.hpp"

namespace caf_collective {

namespace {

// The element count of `shape`, or the reason it has none.
const char* count_elements(const shape_type& shape, size_t& count) noexcept {
  count = 0;
  bool empty = false;
  for (auto extent : shape) {
    if (extent < 0) return "a negative extent";
    empty = empty || extent == 0;
  }
  if (empty) return nullptr; // {0, 2^40, 2^40} has no elements, no overflow
  size_t result = 1;
  for (auto extent : shape)
    if (__builtin_mul_overflow(result, static_cast<size_t>(extent), &result))
      return "more elements than size_t can count";
  count = result;
  return nullptr;
}

} // namespace

size_t numel_of(const shape_type& shape) noexcept {
  size_t count = 0;
  count_elements(shape, count);
  return count;
}

const char* shape_defect(const shape_type& shape, dtype type) noexcept {
  if (!is_valid(type)) return "a dtype outside the enum";
  size_t count = 0;
  if (auto why = count_elements(shape, count)) return why;
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size_of(type), &bytes))
    return "more bytes than size_t can count";
  return nullptr;
}

std::string to_string(const shape_type& shape) {
  std::string result = "{";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) result += ", ";
    result += std::to_string(shape[i]);
  }
  return result + "}";
}

tensor_view::tensor_view(void* data, dtype type, shape_type shape, device dev)
  : data_(data), type_(type), shape_(std::move(shape)), dev_(dev),
    defect_(shape_defect(shape_, type)) {
  if (defect_ == nullptr) numel_ = numel_of(shape_);
}

tensor_view::tensor_view(void* data, dtype type, size_t count, device dev)
  : data_(data), type_(type), dev_(dev) {
  // Built on every call of the API: the one extent goes straight into the
  // shape (no temporary), and the count is known without numel_of.
  if (count > size_t{INT64_MAX}) {
    shape_.push_back(-1); // what the extent would read as
    defect_ = "a count above INT64_MAX";
    return;
  }
  shape_.push_back(static_cast<int64_t>(count));
  defect_ = shape_defect(shape_, type);
  if (defect_ == nullptr) numel_ = count;
}

tensor_view tensor_view::slice(size_t first, size_t count) const noexcept {
  auto* base = static_cast<std::byte*>(data_);
  return tensor_view{base == nullptr ? nullptr : base + first * size_of(type_),
                     type_, count, dev_};
}

caf::expected<tensor> tensor::empty(dtype type, shape_type shape, device dev) {
  if (auto why = shape_defect(shape, type))
    return make_error(errc::invalid_argument,
                      "tensor::empty: shape " + to_string(shape) + " of " +
                        std::string{to_string(type)} + " has " + why);
  auto bytes = numel_of(shape) * size_of(type);
  auto memory = detail::allocate_memory(dev, bytes);
  if (!memory) return std::move(memory.error());
  tensor result;
  result.view_ = tensor_view{memory->get(), type, std::move(shape), dev};
  result.storage_ = std::move(*memory);
  return result;
}

caf::expected<tensor> tensor::zeros(dtype type, shape_type shape, device dev) {
  auto result = empty(type, std::move(shape), dev);
  if (!result) return result;
  if (auto err = detail::zero_memory(result->data(), dev, result->nbytes()))
    return err;
  return result;
}

tensor tensor::adopt(tensor_view view, std::shared_ptr<void> keep_alive) {
  tensor result;
  result.view_ = std::move(view);
  result.storage_ = std::move(keep_alive);
  return result;
}

tensor tensor::empty_host(dtype type, shape_type shape) {
  auto result = empty(type, std::move(shape), device::cpu());
  if (!result) throw collective_error{result.error()};
  return std::move(*result);
}

caf::expected<tensor> tensor::clone() const {
  auto result = empty(type(), shape(), dev());
  if (!result) return result;
  if (auto err =
        detail::copy_memory(result->data(), dev(), data(), dev(), nbytes()))
    return err;
  return result;
}

} // namespace caf_collective
