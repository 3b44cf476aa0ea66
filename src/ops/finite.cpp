#include "tensorpool/ops/finite.hpp"

#include "backend/cpu/kernels/finite.hpp"
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
  const auto enqueue = [&]<typename T>(T) {
    stream.enqueue(
        [x, out] { *out.data<float>() = backend::cpu::all_finite<T>(x.data<T>(), x.num_elements()) ? 1.0F : 0.0F; });
  };
  if (detail::is_half(x.dtype())) {
    detail::dispatch_half(x.dtype(), enqueue);
  } else {
    detail::dispatch_floating(x.dtype(), enqueue);
  }
}

Tensor all_finite(const Tensor& x, const OpContext& context) {
  device::Device& device = detail::common_device(kOp, {{"x", x}});
  Tensor out = detail::allocate_output(kOp, Shape{}, DType::f32, device, context);
  all_finite_into(x, out, context);
  return out;
}

}  // namespace tp::ops
