// SPDX-License-Identifier: Apache-2.0
#include "ops/op_support.hpp"

namespace tp::ops::detail {

device::Device& common_device(std::string_view op, std::initializer_list<Argument> arguments) {
  device::Device* common = nullptr;
  const char* first_name = nullptr;
  for (const Argument& argument : arguments) {
    if (!argument.tensor.defined()) TP_THROW(InvalidArgument, "ops", op, ": ", argument.name, " is undefined");
    device::Device& device = argument.tensor.device();
    if (common == nullptr) {
      common = &device;
      first_name = argument.name;
    } else if (&device != common) {
      TP_THROW(InvalidArgument, "ops", op, ": ", first_name, " is on ", common->name(), " but ", argument.name,
               " is on ", device.name(), "; copy one with Tensor::to() first");
    }
  }
  return *common;
}

device::Stream& stream_for(std::string_view op, device::Device& device, const OpContext& context) {
  if (context.stream == nullptr) return device.stream(0);
  if (&context.stream->device() != &device) {
    TP_THROW(InvalidArgument, "ops", op, ": the tensors are on ", device.name(), " but the stream is ",
             context.stream->name());
  }
  return *context.stream;
}

const kernels::KernelTable& kernel_table(const device::Device& device, std::string_view op) {
  const kernels::KernelTable* table = kernels::kernels_for(device.kind());
  if (table == nullptr) {
    TP_THROW(DeviceError, "ops", op, " has no kernel on ", device.name(), ": the ", device::to_string(device.kind()),
             " backend registered no kernels (it is not built in, or its device factory never ran)");
  }
  return *table;
}

void throw_missing_kernel(const device::Device& device, std::string_view op) {
  TP_THROW(DeviceError, "ops", op, " has no kernel on ", device.name(), ": the ", device::to_string(device.kind()),
           " backend does not implement it; run the op on cpu:0 or a sim device (Tensor::to() copies it there)");
}

void require_floating(std::string_view op, const Argument& argument) {
  const DType dtype = argument.tensor.dtype();
  if (dtype != DType::f32 && dtype != DType::f64) {
    TP_THROW(InvalidArgument, "ops", op, ": ", argument.name, " is ", name_of(dtype), argument.tensor.shape(),
             "; this op takes float32 or float64 (cast first)");
  }
}

void require_floating_or_half(std::string_view op, const Argument& argument) {
  const DType dtype = argument.tensor.dtype();
  if (!is_floating(dtype)) {
    TP_THROW(InvalidArgument, "ops", op, ": ", argument.name, " is ", name_of(dtype), argument.tensor.shape(),
             "; this op takes float32 or float64, or float16 / bfloat16 (cast first)");
  }
}

void require_same_dtype(std::string_view op, const Argument& first, const Argument& second) {
  if (first.tensor.dtype() != second.tensor.dtype()) {
    TP_THROW(InvalidArgument, "ops", op, ": ", first.name, " is ", name_of(first.tensor.dtype()), first.tensor.shape(),
             " but ", second.name, " is ", name_of(second.tensor.dtype()), second.tensor.shape(),
             "; they must share a dtype");
  }
}

void require_rank(std::string_view op, const Argument& argument, std::size_t rank) {
  if (argument.tensor.shape().rank() != rank) {
    TP_THROW(InvalidArgument, "ops", op, ": ", argument.name, " has shape ", argument.tensor.shape(), " (rank ",
             argument.tensor.shape().rank(), "); it must have rank ", rank);
  }
}

void require_shape(std::string_view op, const Argument& argument, const Shape& expected) {
  if (argument.tensor.shape() != expected) {
    TP_THROW(InvalidArgument, "ops", op, ": ", argument.name, " has shape ", argument.tensor.shape(), " but ", expected,
             " is needed");
  }
}

AxisSplit split_axis(std::string_view op, const Shape& shape, std::int64_t axis) {
  const auto rank = static_cast<std::int64_t>(shape.rank());
  if (axis < -rank || axis >= rank) {
    TP_THROW(InvalidArgument, "ops", op, ": axis ", axis, " is out of range for shape ", shape, " (rank ", rank,
             "; valid axes are ", -rank, "..", rank - 1, ")");
  }
  if (axis < 0) axis += rank;
  AxisSplit split;
  std::vector<std::int64_t> kept;
  for (std::int64_t dim = 0; dim < rank; ++dim) {
    const std::int64_t size = shape.dim(dim);
    if (dim < axis) split.outer *= size;
    if (dim == axis) split.axis = size;
    if (dim > axis) split.inner *= size;
    if (dim != axis) kept.push_back(size);
  }
  split.without_axis = Shape(kept);
  return split;
}

Tensor allocate_output(std::string_view op, const Shape& shape, DType dtype, device::Device& device,
                       const OpContext& context) {
  TensorTag tag = context.output;
  if (tag.op.empty()) tag.op = std::string(op);
  if (tag.kind == memory::AllocationKind::unknown) tag.kind = memory::AllocationKind::activation;
  return Tensor::empty(shape, dtype, device, tag);
}

}  // namespace tp::ops::detail
