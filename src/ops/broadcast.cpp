// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/broadcast.hpp"

#include <vector>

#include "ops/op_support.hpp"

namespace tp::ops {

namespace {

constexpr std::string_view kBroadcast = "BroadcastAxis";
constexpr std::string_view kScaleRows = "ScaleRows";

}  // namespace

void broadcast_axis_into(const Tensor& x, std::int64_t axis, const Tensor& out, BroadcastMode mode,
                         const OpContext& context) {
  device::Device& device = detail::common_device(kBroadcast, {{"x", x}, {"out", out}});
  detail::require_floating(kBroadcast, {"x", x});
  detail::require_same_dtype(kBroadcast, {"x", x}, {"out", out});
  if (out.shape().rank() != x.shape().rank() + 1) {
    TP_THROW(InvalidArgument, "ops", kBroadcast, ": out ", out.shape(), " must have one more axis than x ", x.shape());
  }
  const detail::AxisSplit split = detail::split_axis(kBroadcast, out.shape(), axis);
  if (x.shape() != split.without_axis) {
    TP_THROW(InvalidArgument, "ops", kBroadcast, ": x ", x.shape(), " does not match out ", out.shape(),
             " without axis ", axis, " (", split.without_axis, ")");
  }
  device::Stream& stream = detail::stream_for(kBroadcast, device, context);
  detail::kernel(device, &kernels::KernelTable::broadcast_axis, kBroadcast)(
      stream, kernels::BroadcastAxisArgs{.x = x,
                                         .extent = {.outer = split.outer, .axis = split.axis, .inner = split.inner},
                                         .mode = mode,
                                         .out = out});
}

Tensor broadcast_axis(const Tensor& x, std::int64_t axis, std::int64_t size, BroadcastMode mode,
                      const OpContext& context) {
  device::Device& device = detail::common_device(kBroadcast, {{"x", x}});
  detail::require_floating(kBroadcast, {"x", x});
  if (size < 0) TP_THROW(InvalidArgument, "ops", kBroadcast, ": size ", size, " is negative");
  std::vector<std::int64_t> dims = x.shape().dims_vector();
  const auto out_rank = static_cast<std::int64_t>(dims.size()) + 1;
  std::vector<std::int64_t> probe = dims;
  probe.push_back(1);
  detail::split_axis(kBroadcast, Shape(probe), axis);  // checks the axis against out's rank
  const std::int64_t position = axis < 0 ? axis + out_rank : axis;
  dims.insert(dims.begin() + position, size);
  Tensor out = detail::allocate_output(kBroadcast, Shape(dims), x.dtype(), device, context);
  broadcast_axis_into(x, axis, out, mode, context);
  return out;
}

void scale_rows_into(const Tensor& x, const Tensor& s, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device(kScaleRows, {{"x", x}, {"s", s}, {"out", out}});
  detail::require_rank(kScaleRows, {"x", x}, 2);
  detail::require_floating(kScaleRows, {"x", x});
  detail::require_same_dtype(kScaleRows, {"x", x}, {"s", s});
  detail::require_same_dtype(kScaleRows, {"x", x}, {"out", out});
  detail::require_shape(kScaleRows, {"s", s}, Shape{x.shape().dim(0)});
  detail::require_shape(kScaleRows, {"out", out}, x.shape());
  device::Stream& stream = detail::stream_for(kScaleRows, device, context);
  detail::kernel(device, &kernels::KernelTable::scale_rows, kScaleRows)(
      stream, kernels::ScaleRowsArgs{.x = x, .s = s, .out = out});
}

Tensor scale_rows(const Tensor& x, const Tensor& s, const OpContext& context) {
  device::Device& device = detail::common_device(kScaleRows, {{"x", x}, {"s", s}});
  detail::require_floating(kScaleRows, {"x", x});
  Tensor out = detail::allocate_output(kScaleRows, x.shape(), x.dtype(), device, context);
  scale_rows_into(x, s, out, context);
  return out;
}

}  // namespace tp::ops
