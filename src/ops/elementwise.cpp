// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/elementwise.hpp"

#include "ops/op_support.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::ops {

namespace {

std::string_view name_of(Arithmetic op) {
  switch (op) {
    case Arithmetic::add: return "Add";
    case Arithmetic::sub: return "Sub";
    case Arithmetic::mul: return "Mul";
    case Arithmetic::div: return "Div";
  }
  return "Binary";
}

using kernels::BinaryBroadcast;

BinaryBroadcast check_binary(std::string_view op, const Tensor& x, const Tensor& y) {
  detail::require_floating(op, {"x", x});
  detail::require_same_dtype(op, {"x", x}, {"y", y});
  if (y.shape() == x.shape()) return BinaryBroadcast::same;
  if (y.shape().rank() == 0) return BinaryBroadcast::scalar;
  if (y.shape().rank() == 1 && x.shape().rank() >= 1 &&
      y.shape().dim(0) == x.shape().dim(-1 + static_cast<std::int64_t>(x.shape().rank()))) {
    return BinaryBroadcast::row;
  }
  TP_THROW(InvalidArgument, "ops", op, ": x ", x.shape(), " and y ", y.shape(),
           " do not broadcast; y must have x's shape, x's last dimension, or be a scalar []");
}

}  // namespace

void binary_into(Arithmetic op, const Tensor& x, const Tensor& y, const Tensor& out, const OpContext& context) {
  const std::string_view name = name_of(op);
  device::Device& device = detail::common_device(name, {{"x", x}, {"y", y}, {"out", out}});
  const BinaryBroadcast broadcast = check_binary(name, x, y);
  detail::require_same_dtype(name, {"x", x}, {"out", out});
  detail::require_shape(name, {"out", out}, x.shape());
  device::Stream& stream = detail::stream_for(name, device, context);
  detail::kernel(device, &kernels::KernelTable::binary, name)(
      stream, kernels::BinaryArgs{.op = op, .broadcast = broadcast, .x = x, .y = y, .out = out});
}

Tensor binary(Arithmetic op, const Tensor& x, const Tensor& y, const OpContext& context) {
  device::Device& device = detail::common_device(name_of(op), {{"x", x}, {"y", y}});
  check_binary(name_of(op), x, y);
  Tensor out = detail::allocate_output(name_of(op), x.shape(), x.dtype(), device, context);
  binary_into(op, x, y, out, context);
  return out;
}

void scale_into(const Tensor& x, double alpha, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device("Scale", {{"x", x}, {"out", out}});
  detail::require_floating("Scale", {"x", x});
  detail::require_same_dtype("Scale", {"x", x}, {"out", out});
  detail::require_shape("Scale", {"out", out}, x.shape());
  device::Stream& stream = detail::stream_for("Scale", device, context);
  detail::kernel(device, &kernels::KernelTable::scale, "Scale")(stream,
                                                                kernels::ScaleArgs{.x = x, .alpha = alpha, .out = out});
}

Tensor scale(const Tensor& x, double alpha, const OpContext& context) {
  device::Device& device = detail::common_device("Scale", {{"x", x}});
  detail::require_floating("Scale", {"x", x});
  Tensor out = detail::allocate_output("Scale", x.shape(), x.dtype(), device, context);
  scale_into(x, alpha, out, context);
  return out;
}

namespace {

// y += alpha x on `stream` of y's device; the devices are the caller's to check (x may be y's device's peer).
void enqueue_add_scaled(device::Stream& stream, const Tensor& y, double alpha, const Tensor& x) {
  detail::require_floating_or_half("AddScaled", {"y", y});
  detail::require_same_dtype("AddScaled", {"y", y}, {"x", x});
  detail::require_shape("AddScaled", {"x", x}, y.shape());
  detail::kernel(y.device(), &kernels::KernelTable::add_scaled, "AddScaled")(
      stream, kernels::AddScaledArgs{.y = y, .alpha = alpha, .x = x});
}

}  // namespace

void add_scaled_from_peer(const Tensor& y, double alpha, const Tensor& x, const OpContext& context) {
  if (!y.defined() || !x.defined()) TP_THROW(InvalidArgument, "ops", "AddScaled: y and x must be defined");
  if (!device::peer_accessible(x.device(), y.device())) {
    TP_THROW(InvalidArgument, "ops", "AddScaled: x is on ", x.device().name(), ", which ", y.device().name(),
             " (y's device) cannot read directly; use add_scaled on one device (copy x first)");
  }
  enqueue_add_scaled(detail::stream_for("AddScaled", y.device(), context), y, alpha, x);
}

void add_scaled(const Tensor& y, double alpha, const Tensor& x, const OpContext& context) {
  device::Device& device = detail::common_device("AddScaled", {{"y", y}, {"x", x}});
  enqueue_add_scaled(detail::stream_for("AddScaled", device, context), y, alpha, x);
}

}  // namespace tp::ops
