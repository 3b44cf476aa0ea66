#pragma once
// What every op shares: validation on the calling thread (naming the op, the argument and the shapes), the
// output allocation, and the choice of stream. Kernels run as tasks that capture their tensors by value.

#include <initializer_list>
#include <string_view>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/half.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/ops/op_context.hpp"

namespace tp::ops::detail {

struct Argument {
  const char* name;
  const Tensor& tensor;
};

// Throws unless every argument is defined and all live on one device; returns it.
device::Device& common_device(std::string_view op, std::initializer_list<Argument> arguments);
// The stream the op runs on: context.stream (which must belong to `device`) or the device's stream 0. Throws
// tp::DeviceError when the device's backend has no kernels for tensor ops.
device::Stream& stream_for(std::string_view op, device::Device& device, const OpContext& context);

void require_floating(std::string_view op, const Argument& argument);
// The MLP path's ops (MatMul, BiasAdd(Grad), Relu(Grad)) also take float16 and bfloat16 (mixed precision).
void require_floating_or_half(std::string_view op, const Argument& argument);
inline bool is_half(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }
void require_same_dtype(std::string_view op, const Argument& first, const Argument& second);
void require_rank(std::string_view op, const Argument& argument, std::size_t rank);
void require_shape(std::string_view op, const Argument& argument, const Shape& expected);

// `shape` viewed as [outer, axis, inner] around one axis (in [-rank, rank), negative from the end), and the
// shape without that axis. Throws tp::InvalidArgument naming the op, the axis and the shape when out of range.
struct AxisSplit {
  std::int64_t outer = 1, axis = 1, inner = 1;
  Shape without_axis;
};
AxisSplit split_axis(std::string_view op, const Shape& shape, std::int64_t axis);

// An output of `shape` and `dtype` on `device`, tagged with the context's tag (op and kind filled in).
Tensor allocate_output(std::string_view op, const Shape& shape, DType dtype, device::Device& device,
                       const OpContext& context);

// Calls function(T{}) with T the C++ type of a floating dtype checked by require_floating.
template <typename Function>
void dispatch_floating(DType dtype, Function&& function) {
  if (dtype == DType::f32) {
    std::forward<Function>(function)(float{});
  } else {
    std::forward<Function>(function)(double{});
  }
}

// Calls function(H{}) with H = tp::Half or tp::BFloat16 for a dtype for which is_half holds.
template <typename Function>
void dispatch_half(DType dtype, Function&& function) {
  if (dtype == DType::f16) {
    std::forward<Function>(function)(Half{});
  } else {
    std::forward<Function>(function)(BFloat16{});
  }
}

}  // namespace tp::ops::detail
