// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/reduce.hpp"

#include "ops/op_support.hpp"

namespace tp::ops {

namespace {

detail::AxisSplit split_axis(std::string_view op, const Tensor& x, std::int64_t axis) {
  return detail::split_axis(op, x.shape(), axis);
}

std::string_view name_of(Reduction reduction) {
  switch (reduction) {
    case Reduction::sum: return "Sum";
    case Reduction::mean: return "Mean";
    case Reduction::max: return "Max";
  }
  return "Reduce";
}

}  // namespace

void reduce_into(const Tensor& x, std::int64_t axis, Reduction reduction, const Tensor& out, const OpContext& context) {
  const std::string_view op = name_of(reduction);
  device::Device& device = detail::common_device(op, {{"x", x}, {"out", out}});
  detail::require_floating(op, {"x", x});
  detail::require_same_dtype(op, {"x", x}, {"out", out});
  const detail::AxisSplit split = split_axis(op, x, axis);
  detail::require_shape(op, {"out", out}, split.without_axis);
  device::Stream& stream = detail::stream_for(op, device, context);
  detail::kernel(device, &kernels::KernelTable::reduce, op)(
      stream, kernels::ReduceArgs{.x = x,
                                  .extent = {.outer = split.outer, .axis = split.axis, .inner = split.inner},
                                  .reduction = reduction,
                                  .out = out});
}

Tensor reduce(const Tensor& x, std::int64_t axis, Reduction reduction, const OpContext& context) {
  const std::string_view op = name_of(reduction);
  device::Device& device = detail::common_device(op, {{"x", x}});
  detail::require_floating(op, {"x", x});
  Tensor out = detail::allocate_output(op, split_axis(op, x, axis).without_axis, x.dtype(), device, context);
  reduce_into(x, axis, reduction, out, context);
  return out;
}

void argmax_into(const Tensor& x, std::int64_t axis, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device("ArgMax", {{"x", x}, {"out", out}});
  detail::require_floating("ArgMax", {"x", x});
  const detail::AxisSplit split = split_axis("ArgMax", x, axis);
  if (out.dtype() != DType::i64) {
    TP_THROW(InvalidArgument, "ops", "ArgMax: out is ", tp::name_of(out.dtype()), out.shape(), "; it must be int64");
  }
  detail::require_shape("ArgMax", {"out", out}, split.without_axis);
  device::Stream& stream = detail::stream_for("ArgMax", device, context);
  detail::kernel(device, &kernels::KernelTable::argmax, "ArgMax")(
      stream, kernels::ArgMaxArgs{
                  .x = x, .extent = {.outer = split.outer, .axis = split.axis, .inner = split.inner}, .out = out});
}

Tensor argmax(const Tensor& x, std::int64_t axis, const OpContext& context) {
  device::Device& device = detail::common_device("ArgMax", {{"x", x}});
  Tensor out =
      detail::allocate_output("ArgMax", split_axis("ArgMax", x, axis).without_axis, DType::i64, device, context);
  argmax_into(x, axis, out, context);
  return out;
}

}  // namespace tp::ops
