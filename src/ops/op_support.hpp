// SPDX-License-Identifier: Apache-2.0
#pragma once
// What every op shares: validation on the calling thread (naming the op, the argument and the shapes), the
// output allocation, the choice of stream, and the lookup of the kernel that the device's backend registered
// (tensorpool/ops/kernel_table.hpp). The kernel puts the work on the stream.

#include <initializer_list>
#include <string_view>

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/ops/kernel_table.hpp"
#include "tensorpool/ops/op_context.hpp"

namespace tp::ops::detail {

struct Argument {
  const char* name;
  const Tensor& tensor;
};

// Throws unless every argument is defined and all live on one device; returns it.
device::Device& common_device(std::string_view op, std::initializer_list<Argument> arguments);
// The stream the op runs on: context.stream (which must belong to `device`) or the device's stream 0.
device::Stream& stream_for(std::string_view op, device::Device& device, const OpContext& context);

// The table that `device`'s backend registered; throws tp::DeviceError naming the op and the device when it
// registered none.
const kernels::KernelTable& kernel_table(const device::Device& device, std::string_view op);
[[noreturn]] void throw_missing_kernel(const device::Device& device, std::string_view op);

// The kernel `entry` of `device`'s backend, called as kernel(device, &KernelTable::x, "Op")(stream, args).
// Throws tp::DeviceError naming the op and the device when the backend has no table or no such kernel.
template <typename Args>
kernels::Kernel<Args> kernel(const device::Device& device, kernels::Kernel<Args> kernels::KernelTable::*entry,
                             std::string_view op) {
  const kernels::Kernel<Args> found = kernel_table(device, op).*entry;
  if (found == nullptr) throw_missing_kernel(device, op);
  return found;
}

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

}  // namespace tp::ops::detail
