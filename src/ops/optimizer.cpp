// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/optimizer.hpp"

#include "ops/op_support.hpp"
#include "tensorpool/device/device.hpp"

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

// grad has param's dtype, or is float16 / bfloat16 for a float32 param (mixed precision's weight gradients).
void check_gradient(std::string_view op, const Tensor& param, const Tensor& grad) {
  if (!(param.dtype() == DType::f32 && detail::is_half(grad.dtype()))) {
    detail::require_same_dtype(op, {"param", param}, {"grad", grad});
  }
  detail::require_shape(op, {"grad", grad}, param.shape());
}

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
  check_gradient("SgdUpdate", param, grad);
  if (has_velocity) {
    detail::require_same_dtype("SgdUpdate", {"param", param}, {"velocity", velocity});
    detail::require_shape("SgdUpdate", {"velocity", velocity}, param.shape());
  }
  device::Stream& stream = detail::stream_for("SgdUpdate", device, context);
  detail::kernel(device, &kernels::KernelTable::sgd, "SgdUpdate")(
      stream, kernels::SgdArgs{.apply = apply, .param = param, .grad = grad, .velocity = velocity, .options = options});
}

void adam_update_impl(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                      std::int64_t step, const AdamOptions& options, const OpContext& context) {
  device::Device& device = detail::common_device("AdamUpdate", {{"param", param}, {"grad", grad}, {"m", m}, {"v", v}});
  detail::require_floating("AdamUpdate", {"param", param});
  check_gradient("AdamUpdate", param, grad);
  for (const detail::Argument& slot : {detail::Argument{"m", m}, detail::Argument{"v", v}}) {
    detail::require_same_dtype("AdamUpdate", {"param", param}, slot);
    detail::require_shape("AdamUpdate", slot, param.shape());
  }
  if (step < 1) TP_THROW(InvalidArgument, "ops", "AdamUpdate: step ", step, " must be >= 1 (steps count from 1)");
  device::Stream& stream = detail::stream_for("AdamUpdate", device, context);
  detail::kernel(device, &kernels::KernelTable::adam, "AdamUpdate")(
      stream, kernels::AdamArgs{
                  .apply = apply, .param = param, .grad = grad, .m = m, .v = v, .step = step, .options = options});
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

void adam_update_across_peers(const Tensor& param, std::span<const Tensor> grads, const Tensor& m, const Tensor& v,
                              std::int64_t step, const AdamOptions& options, const OpContext& context) {
  adam_update_across_peers(AdamState{.param = param, .m = m, .v = v}, grads, {}, step, options, context);
}

void adam_update_across_peers(const AdamState& state, std::span<const Tensor> grads, std::span<const AdamState> mirrors,
                              std::int64_t step, const AdamOptions& options, const OpContext& context) {
  constexpr std::string_view kOp = "AdamAcrossPeers";
  const Tensor& param = state.param;
  device::Device& device = detail::common_device(kOp, {{"param", param}, {"m", state.m}, {"v", state.v}});
  detail::require_floating(kOp, {"param", param});
  for (const detail::Argument& slot : {detail::Argument{"m", state.m}, detail::Argument{"v", state.v}}) {
    detail::require_same_dtype(kOp, {"param", param}, slot);
    detail::require_shape(kOp, slot, param.shape());
  }
  auto require_reachable = [&](const Tensor& tensor, const char* what, std::string_view fix) {
    if (&tensor.device() != &device && !device::peer_accessible(tensor.device(), device)) {
      TP_THROW(InvalidArgument, "ops", kOp, ": a ", what, " is on ", tensor.device().name(), ", which ", device.name(),
               " (the parameter's device) cannot reach directly; ", fix);
    }
    detail::require_same_dtype(kOp, {"param", param}, {what, tensor});
    detail::require_shape(kOp, {what, tensor}, param.shape());
  };
  if (grads.empty()) TP_THROW(InvalidArgument, "ops", kOp, ": no gradients; pass at least one");
  for (const Tensor& grad : grads) {
    if (!grad.defined()) TP_THROW(InvalidArgument, "ops", kOp, ": every gradient must be defined");
    require_reachable(grad, "gradient", "all-reduce it and use AdamUpdate");
  }
  for (const AdamState& mirror : mirrors) {
    if (!mirror.param.defined() || mirror.m.defined() != mirror.v.defined()) {
      TP_THROW(InvalidArgument, "ops", kOp,
               ": a mirror needs a defined param, and m and v both defined (whole slots) or both undefined (the "
               "parameter only)");
    }
    for (const Tensor* tensor : {&mirror.param, &mirror.m, &mirror.v}) {
      if (!tensor->defined()) continue;
      if (&tensor->device() != &mirror.param.device()) {
        TP_THROW(InvalidArgument, "ops", kOp, ": a mirror's param, m and v must share one device; one is on ",
                 tensor->device().name(), ", its param on ", mirror.param.device().name());
      }
      require_reachable(*tensor, "mirror", "copy the updated state there instead");
    }
  }
  if (step < 1) TP_THROW(InvalidArgument, "ops", kOp, ": step ", step, " must be >= 1 (steps count from 1)");
  device::Stream& stream = detail::stream_for(kOp, device, context);
  detail::kernel(device, &kernels::KernelTable::adam_across_peers, kOp)(
      stream, kernels::AdamAcrossPeersArgs{.param = param,
                                           .grads = std::vector<Tensor>(grads.begin(), grads.end()),
                                           .m = state.m,
                                           .v = state.v,
                                           .step = step,
                                           .options = options,
                                           .mirrors = std::vector<AdamState>(mirrors.begin(), mirrors.end())});
}

}  // namespace tp::ops
