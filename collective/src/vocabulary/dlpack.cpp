#include "caf_collective/dlpack.hpp"

#include <algorithm>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective {

namespace {

// kDLBool of DLPack 0.8 and later (torch exports bool tensors with it);
// the DLPack 0.6 header Debian ships does not name it yet.
constexpr int dlpack_bool_code = 6;

} // namespace

caf::expected<dtype> from_dlpack_dtype(DLDataType type) {
  auto refuse = [&] {
    return make_error(errc::unsupported,
                      "DLPack dtype code " + std::to_string(type.code) +
                        " bits " + std::to_string(type.bits) + " lanes " +
                        std::to_string(type.lanes) +
                        " has no caf-collective dtype");
  };
  if (type.lanes != 1) return refuse();
  switch (type.code) {
    case kDLInt:
      if (type.bits == 8) return dtype::int8;
      if (type.bits == 32) return dtype::int32;
      if (type.bits == 64) return dtype::int64;
      break;
    case kDLUInt:
      if (type.bits == 8) return dtype::uint8;
      break;
    case kDLFloat:
      if (type.bits == 16) return dtype::float16;
      if (type.bits == 32) return dtype::float32;
      if (type.bits == 64) return dtype::float64;
      break;
    case kDLBfloat:
      if (type.bits == 16) return dtype::bfloat16;
      break;
    case dlpack_bool_code:
      if (type.bits == 8) return dtype::uint8; // one byte per bool
      break;
    default: break;
  }
  return refuse();
}

DLDataType to_dlpack_dtype(dtype type) noexcept {
  auto bits = static_cast<uint8_t>(size_of(type) * 8);
  switch (type) {
    case dtype::int8:
    case dtype::int32:
    case dtype::int64: return {kDLInt, bits, 1};
    case dtype::uint8: return {kDLUInt, bits, 1};
    case dtype::bfloat16: return {kDLBfloat, bits, 1};
    default: return {kDLFloat, bits, 1};
  }
}

caf::expected<tensor_view> view_of(const DLTensor& in) {
  auto type = from_dlpack_dtype(in.dtype);
  if (!type) return std::move(type.error());
  device dev;
  switch (in.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: dev = device::cpu(); break;
    case kDLCUDA: dev = device::cuda(in.device.device_id); break;
    default:
      return make_error(errc::unsupported,
                        "DLPack device type " +
                          std::to_string(in.device.device_type) +
                          " is neither CPU nor CUDA");
  }
  if (in.ndim < 0 || (in.ndim > 0 && in.shape == nullptr))
    return make_error(errc::invalid_argument, "DLPack tensor without shape");
  shape_type shape(in.shape, in.shape + in.ndim);
  // Null strides mean compact row-major; otherwise check that they are.
  // A tensor without elements has no layout to check (torch gives
  // torch.empty(3, 0) the strides {1, 1}).
  bool empty = std::any_of(shape.begin(), shape.end(),
                           [](int64_t extent) { return extent == 0; });
  if (in.strides != nullptr && !empty) {
    int64_t expected = 1;
    for (int i = in.ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && in.strides[i] != expected)
        return make_error(errc::invalid_argument,
                          "DLPack tensor is not contiguous: dimension " +
                            std::to_string(i) + " has stride " +
                            std::to_string(in.strides[i]) + ", expected " +
                            std::to_string(expected));
      expected *= shape[i];
    }
  }
  auto* data = static_cast<std::byte*>(in.data) + in.byte_offset;
  return tensor_view{data, *type, std::move(shape), dev};
}

caf::expected<tensor> from_dlpack(DLManagedTensor* managed) {
  if (managed == nullptr)
    return make_error(errc::invalid_argument, "from_dlpack: null tensor");
  auto release = [](DLManagedTensor* m) {
    if (m->deleter != nullptr) m->deleter(m);
  };
  std::shared_ptr<DLManagedTensor> owner{managed, release};
  auto view = view_of(managed->dl_tensor);
  if (!view) return std::move(view.error()); // owner releases the tensor
  return tensor::adopt(std::move(*view), std::move(owner));
}

namespace {

// What a DLManagedTensor we hand out keeps alive: the tensor (and so its
// memory) and the shape array DLPack points into.
struct exported_tensor {
  tensor owned;
  shape_type shape;
  DLManagedTensor managed;
};

} // namespace

DLManagedTensor* to_dlpack(tensor&& owned) {
  auto* holder = new exported_tensor{std::move(owned), {}, {}};
  holder->shape = holder->owned.shape();
  auto& dl = holder->managed.dl_tensor;
  dl.data = holder->owned.data();
  auto dev = holder->owned.dev();
  dl.device = {dev.is_cpu() ? kDLCPU : kDLCUDA, dev.index};
  dl.ndim = static_cast<int32_t>(holder->shape.size());
  dl.dtype = to_dlpack_dtype(holder->owned.type());
  dl.shape = holder->shape.data();
  dl.strides = nullptr;
  dl.byte_offset = 0;
  holder->managed.manager_ctx = holder;
  holder->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<exported_tensor*>(self->manager_ctx);
  };
  return &holder->managed;
}

} // namespace caf_collective
