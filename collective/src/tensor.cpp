#include "caf_collective/tensor.hpp"

#include <cstring>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "device_memory.hpp"

namespace caf_collective {

size_t numel_of(const shape_type& shape) noexcept {
  size_t result = 1;
  for (auto extent : shape)
    result *= extent > 0 ? static_cast<size_t>(extent) : 0;
  return result;
}

tensor_view::tensor_view(void* data, dtype type, shape_type shape, device dev)
  : data_(data), type_(type), shape_(std::move(shape)), dev_(dev),
    numel_(numel_of(shape_)) {
  // nop
}

tensor_view::tensor_view(void* data, dtype type, size_t count, device dev)
  : tensor_view(data, type, shape_type{static_cast<int64_t>(count)}, dev) {
  // nop
}

tensor_view tensor_view::slice(size_t first, size_t count) const noexcept {
  auto* base = static_cast<std::byte*>(data_);
  return tensor_view{base == nullptr ? nullptr : base + first * size_of(type_),
                     type_, count, dev_};
}

caf::expected<tensor> tensor::empty(dtype type, shape_type shape, device dev) {
  for (auto extent : shape)
    if (extent < 0)
      return make_error(errc::invalid_argument,
                        "tensor::empty: negative extent " +
                          std::to_string(extent));
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
