#include "tensorpool/ops/optimizer.hpp"

#include "backend/cpu/kernels/optimizer.hpp"
#include "ops/op_support.hpp"

namespace tp::ops {

namespace {

// The flag of the conditional updates: a float32 scalar on the parameter's device. Undefined: always apply.
void check_apply_flag(std::string_view op, const Tensor& apply, const Tensor& param) {
  detail::common_device(op, {{"param", param}, {"apply", apply}});
  detail::require_shape(op, {"apply", apply}, Shape{});
  if (apply.dtype() != DType::f32) {
    TP_THROW(InvalidArgument, "ops", op, ": apply is ", name_of(apply.dtype()), "; it must be a float32 scalar");
  }
}

// Read on the stream, inside the task: the flag is computed by an earlier kernel of the same step.
bool should_apply(const Tensor& apply) { return !apply.defined() || *apply.data<float>() != 0.0F; }

void sgd_update_impl(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& velocity,
                     const SgdOptions& options, const OpContext& context) {
  const bool has_velocity = velocity.defined();
  if (!has_velocity && options.momentum != 0.0) {
    TP_THROW(InvalidArgument, "ops", "SgdUpdate: momentum ", options.momentum,
             " needs a velocity tensor (of the parameter's shape)");
  }
  device::Device& device =
      has_velocity ? detail::common_device("SgdUpdate", {{"param", param}, {"grad", grad}, {"velocity", velocity}})
                   : detail::common_device("SgdUpdate", {{"param", param}, {"grad", grad}});
  detail::require_floating("SgdUpdate", {"param", param});
  detail::require_same_dtype("SgdUpdate", {"param", param}, {"grad", grad});
  detail::require_shape("SgdUpdate", {"grad", grad}, param.shape());
  if (has_velocity) {
    detail::require_same_dtype("SgdUpdate", {"param", param}, {"velocity", velocity});
    detail::require_shape("SgdUpdate", {"velocity", velocity}, param.shape());
  }
  device::Stream& stream = detail::stream_for("SgdUpdate", device, context);
  detail::dispatch_floating(param.dtype(), [&]<typename T>(T) {
    stream.enqueue([apply, param, grad, velocity, options, has_velocity] {
      if (!should_apply(apply)) return;
      backend::cpu::sgd_update<T>(param.data<T>(), grad.data<T>(), has_velocity ? velocity.data<T>() : nullptr,
                                  param.num_elements(), static_cast<T>(options.learning_rate),
                                  static_cast<T>(options.momentum), options.nesterov);
    });
  });
}

void adam_update_impl(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                      std::int64_t step, const AdamOptions& options, const OpContext& context) {
  device::Device& device = detail::common_device("AdamUpdate", {{"param", param}, {"grad", grad}, {"m", m}, {"v", v}});
  detail::require_floating("AdamUpdate", {"param", param});
  for (const detail::Argument& other :
       {detail::Argument{"grad", grad}, detail::Argument{"m", m}, detail::Argument{"v", v}}) {
    detail::require_same_dtype("AdamUpdate", {"param", param}, other);
    detail::require_shape("AdamUpdate", other, param.shape());
  }
  if (step < 1) TP_THROW(InvalidArgument, "ops", "AdamUpdate: step ", step, " must be >= 1 (steps count from 1)");
  device::Stream& stream = detail::stream_for("AdamUpdate", device, context);
  detail::dispatch_floating(param.dtype(), [&]<typename T>(T) {
    stream.enqueue([apply, param, grad, m, v, step, options] {
      if (!should_apply(apply)) return;
      backend::cpu::adam_update<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), param.num_elements(),
                                   static_cast<T>(options.learning_rate), static_cast<T>(options.beta1),
                                   static_cast<T>(options.beta2), static_cast<T>(options.epsilon), step);
    });
  });
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity, const SgdOptions& options,
                const OpContext& context) {
  sgd_update_impl(Tensor{}, param, grad, velocity, options, context);
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, std::int64_t step,
                 const AdamOptions& options, const OpContext& context) {
  adam_update_impl(Tensor{}, param, grad, m, v, step, options, context);
}

void sgd_update_if(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& velocity,
                   const SgdOptions& options, const OpContext& context) {
  check_apply_flag("SgdUpdate", apply, param);
  sgd_update_impl(apply, param, grad, velocity, options, context);
}

void adam_update_if(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    std::int64_t step, const AdamOptions& options, const OpContext& context) {
  check_apply_flag("AdamUpdate", apply, param);
  adam_update_impl(apply, param, grad, m, v, step, options, context);
}

}  // namespace tp::ops
