// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/finite.hpp"

#include "ops/op_support.hpp"

namespace tp::ops {

namespace {
constexpr std::string_view kOp = "AllFinite";
}

void all_finite_into(const Tensor& x, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device(kOp, {{"x", x}, {"out", out}});
  detail::require_floating_or_half(kOp, {"x", x});
  detail::require_shape(kOp, {"out", out}, Shape{});
  if (out.dtype() != DType::f32) {
    TP_THROW(InvalidArgument, "ops", kOp, ": out is ", name_of(out.dtype()), "; it must be float32");
  }
  device::Stream& stream = detail::stream_for(kOp, device, context);
  detail::kernel(device, &kernels::KernelTable::all_finite, kOp)(stream, kernels::AllFiniteArgs{.x = x, .out = out});
}

Tensor all_finite(const Tensor& x, const OpContext& context) {
  device::Device& device = detail::common_device(kOp, {{"x", x}});
  Tensor out = detail::allocate_output(kOp, Shape{}, DType::f32, device, context);
  all_finite_into(x, out, context);
  return out;
}

}  // namespace tp::ops
