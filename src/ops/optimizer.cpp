// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/optimizer.hpp"

#include <initializer_list>
#include <string>
#include <vector>

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

// The multi-tensor forms' checks: `lists` parallel to params (same length), every tensor on params[0]'s device
// with its dtype (f32 or f64), each entry of a list of its param's shape. Returns the device.
struct NamedList {
  const char* name;
  std::span<const Tensor> tensors;
};

device::Device& check_multi(std::string_view op, std::span<const Tensor> params,
                            std::initializer_list<NamedList> lists) {
  if (params.empty()) TP_THROW(InvalidArgument, "ops", op, ": no params; pass at least one entry");
  for (const NamedList& list : lists) {
    if (list.tensors.size() != params.size()) {
      TP_THROW(InvalidArgument, "ops", op, ": ", params.size(), " params but ", list.tensors.size(), " ", list.name,
               "; pass one ", list.name, " entry per param, in the same order");
    }
  }
  if (!params[0].defined()) TP_THROW(InvalidArgument, "ops", op, ": params[0] is undefined");
  device::Device& device = params[0].device();
  detail::require_floating(op, {"params[0]", params[0]});
  // The entry's name is built only for a message: this runs for every tensor of every step.
  auto check = [&](const char* list, std::size_t index, const Tensor& tensor, const Tensor& param) {
    const auto name = [&] { return std::string(list) + "[" + std::to_string(index) + "]"; };
    if (!tensor.defined()) TP_THROW(InvalidArgument, "ops", op, ": ", name(), " is undefined");
    if (&tensor.device() != &device) {
      TP_THROW(InvalidArgument, "ops", op, ": ", name(), " is on ", tensor.device().name(), " but params[0] on ",
               device.name(), "; one call updates the tensors of one device");
    }
    if (tensor.dtype() != params[0].dtype()) {
      TP_THROW(InvalidArgument, "ops", op, ": ", name(), " is ", name_of(tensor.dtype()), " but params[0] is ",
               name_of(params[0].dtype()),
               "; every tensor of one call shares a dtype (use the single update for 16-bit gradients)");
    }
    if (tensor.shape() != param.shape()) {
      TP_THROW(InvalidArgument, "ops", op, ": ", name(), " has shape ", tensor.shape(), " but its param ",
               param.shape(), "; each entry's grad and slots have its param's shape");
    }
  };
  for (std::size_t index = 0; index < params.size(); ++index) {
    check("params", index, params[index], params[index]);
    for (const NamedList& list : lists) check(list.name, index, list.tensors[index], params[index]);
  }
  return device;
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
    detail::require_shape(kOp, {what, tensor}, param.shape());
  };
  if (grads.empty()) TP_THROW(InvalidArgument, "ops", kOp, ": no gradients; pass at least one");
  for (const Tensor& grad : grads) {
    if (!grad.defined()) TP_THROW(InvalidArgument, "ops", kOp, ": every gradient must be defined");
    require_reachable(grad, "gradient", "all-reduce it and use AdamUpdate");
    // A float32 parameter may take float16 / bfloat16 gradients (mixed precision's), all of one dtype.
    const bool half = param.dtype() == DType::f32 && (grad.dtype() == DType::f16 || grad.dtype() == DType::bf16);
    if (!half) detail::require_same_dtype(kOp, {"param", param}, {"gradient", grad});
    detail::require_same_dtype(kOp, {"grads[0]", grads[0]}, {"gradient", grad});
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
      detail::require_same_dtype(kOp, {"param", param}, {"mirror", *tensor});
    }
  }
  if (state.copy.defined()) {
    // The compute copy: a float32 parameter's, of the 16-bit gradients' dtype, on the parameter's device.
    if (param.dtype() != DType::f32 || !detail::is_half(state.copy.dtype()) || state.copy.dtype() != grads[0].dtype()) {
      TP_THROW(InvalidArgument, "ops", kOp, ": the compute copy is ", name_of(state.copy.dtype()), " for a ",
               name_of(param.dtype()), " parameter with ", name_of(grads[0].dtype()),
               " gradients; a copy is float16 / bfloat16, of the gradients' dtype, for a float32 parameter");
    }
    if (&state.copy.device() != &device) {
      TP_THROW(InvalidArgument, "ops", kOp, ": the compute copy is on ", state.copy.device().name(),
               ", the parameter on ", device.name(), "; keep a replica's copy beside its parameter");
    }
    detail::require_shape(kOp, {"copy", state.copy}, param.shape());
  }
  for (const AdamState& mirror : mirrors) {
    if (mirror.copy.defined() != state.copy.defined()) {
      TP_THROW(InvalidArgument, "ops", kOp, ": ", state.copy.defined() ? "a mirror has no" : "a mirror has a",
               " compute copy but the updated state ", state.copy.defined() ? "has one" : "has none",
               "; give every mirror a copy exactly when the state has one");
    }
    if (!mirror.copy.defined()) continue;
    if (&mirror.copy.device() != &mirror.param.device()) {
      TP_THROW(InvalidArgument, "ops", kOp, ": a mirror's compute copy is on ", mirror.copy.device().name(),
               ", its param on ", mirror.param.device().name(), "; keep a replica's copy beside its parameter");
    }
    require_reachable(mirror.copy, "mirror's copy", "copy the updated state there instead");
    detail::require_same_dtype(kOp, {"copy", state.copy}, {"mirror's copy", mirror.copy});
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
                                           .mirrors = std::vector<AdamState>(mirrors.begin(), mirrors.end()),
                                           .copy = state.copy});
}

void sgd_update_multi(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> velocities,
                      const SgdOptions& options, const OpContext& context) {
  constexpr std::string_view kOp = "SgdUpdateMulti";
  if (velocities.empty() && options.momentum != 0.0) {
    TP_THROW(InvalidArgument, "ops", kOp, ": momentum ", options.momentum,
             " needs velocities (one per param, of its shape)");
  }
  device::Device& device = velocities.empty()
                               ? check_multi(kOp, params, {{"grads", grads}})
                               : check_multi(kOp, params, {{"grads", grads}, {"velocities", velocities}});
  device::Stream& stream = detail::stream_for(kOp, device, context);
  detail::kernel(device, &kernels::KernelTable::sgd_multi, kOp)(
      stream, kernels::SgdMultiArgs{.params = std::vector<Tensor>(params.begin(), params.end()),
                                    .grads = std::vector<Tensor>(grads.begin(), grads.end()),
                                    .velocities = std::vector<Tensor>(velocities.begin(), velocities.end()),
                                    .options = options});
}

void adam_update_multi(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                       std::span<const Tensor> v, std::int64_t step, const AdamOptions& options,
                       const OpContext& context) {
  constexpr std::string_view kOp = "AdamUpdateMulti";
  device::Device& device = check_multi(kOp, params, {{"grads", grads}, {"m", m}, {"v", v}});
  if (step < 1) TP_THROW(InvalidArgument, "ops", kOp, ": step ", step, " must be >= 1 (steps count from 1)");
  device::Stream& stream = detail::stream_for(kOp, device, context);
  detail::kernel(device, &kernels::KernelTable::adam_multi, kOp)(
      stream, kernels::AdamMultiArgs{.params = std::vector<Tensor>(params.begin(), params.end()),
                                     .grads = std::vector<Tensor>(grads.begin(), grads.end()),
                                     .m = std::vector<Tensor>(m.begin(), m.end()),
                                     .v = std::vector<Tensor>(v.begin(), v.end()),
                                     .step = step,
                                     .options = options});
}

}  // namespace tp::ops
