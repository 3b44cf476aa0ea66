// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/cast.hpp"

#include "ops/op_support.hpp"

namespace tp::ops {

void cast_into(const Tensor& x, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device("Cast", {{"x", x}, {"out", out}});
  detail::require_shape("Cast", {"out", out}, x.shape());
  device::Stream& stream = detail::stream_for("Cast", device, context);
  detail::kernel(device, &kernels::KernelTable::cast, "Cast")(stream, kernels::CastArgs{.x = x, .out = out});
}

Tensor cast(const Tensor& x, DType dtype, const OpContext& context) {
  device::Device& device = detail::common_device("Cast", {{"x", x}});
  Tensor out = detail::allocate_output("Cast", x.shape(), dtype, device, context);
  cast_into(x, out, context);
  return out;
}

}  // namespace tp::ops
