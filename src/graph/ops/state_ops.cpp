// SPDX-License-Identifier: Apache-2.0
// Optimizer updates: ApplySgd(var, grad, velocity) and ApplyAdam(var, grad, m, v) update their inputs in
// place (var and the slots are the session's persistent tensors) and have no outputs. Hyperparameters are
// attributes with Keras's defaults; Adam's bias-correction step is KernelContext::step (1-based).
// ApplySgdIf(var, grad, velocity, apply) and ApplyAdamIf(var, grad, m, v, apply) take a float32 scalar
// `apply`: 0 skips the update (dynamic loss scaling skips a non-finite step), any other value multiplies the
// gradient (AllFinite's flag times 1 / loss scale unscales a gradient that is still scaled).
// A float32 var may take a float16 or bfloat16 grad (mixed precision's weight gradients stay 16-bit).
// With the attribute slice = [var_offset, count, grad_offset, slot_offset] each updates only `count` elements:
// var's flat elements from var_offset with grad's from grad_offset and the slots' from slot_offset (ZeRO: a
// replica updates its shard of the parameters with its shard of the optimizer state); shapes may then differ.

#include <algorithm>
#include <optional>

#include "graph/ops/op_support.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::graph::detail {

namespace {

constexpr double kSgdLearningRate = 0.01;
constexpr double kAdamLearningRate = 1e-3;
constexpr double kAdamBeta1 = 0.9;
constexpr double kAdamBeta2 = 0.999;
constexpr double kAdamEpsilon = 1e-7;

struct Slice {
  std::int64_t var_offset = 0;
  std::int64_t count = 0;
  std::int64_t grad_offset = 0;
  std::int64_t slot_offset = 0;
};

std::optional<Slice> slice_of(const Node& node) {
  if (!node.attributes.contains("slice")) return std::nullopt;
  const std::vector<std::int64_t> values = attribute_ints(node, "slice");
  if (values.size() != 4 || std::any_of(values.begin(), values.end(), [](std::int64_t v) { return v < 0; })) {
    TP_GRAPH_FAIL(node, "slice must be 4 non-negative integers [var_offset, count, grad_offset, slot_offset]");
  }
  return Slice{values[0], values[1], values[2], values[3]};
}

std::int64_t elements_of(const TensorType& type) {
  std::int64_t elements = 1;
  for (std::int64_t dim : type.dims) elements = dim < 0 || elements < 0 ? -1 : elements * dim;
  return elements;
}

// Every input has var's dtype and shape; with a slice, each input holds its range instead.
void check_slots(const InferenceContext& context, const std::vector<std::string_view>& roles) {
  require_float(context, 0, roles[0]);
  const std::optional<Slice> slice = slice_of(context.node);
  for (std::size_t index = 1; index < roles.size(); ++index) {
    const bool half_gradient = index == 1 && input(context, 0).dtype == DType::f32 &&
                               (input(context, 1).dtype == DType::f16 || input(context, 1).dtype == DType::bf16);
    if (!half_gradient) require_same_dtype(context, 0, roles[0], static_cast<int>(index), roles[index]);
    if (!slice) merge_shapes(context, 0, roles[0], static_cast<int>(index), roles[index]);
  }
  if (!slice) return;
  for (std::size_t index = 0; index < roles.size(); ++index) {
    const std::int64_t offset = index == 0 ? slice->var_offset : index == 1 ? slice->grad_offset : slice->slot_offset;
    const std::int64_t elements = elements_of(input(context, static_cast<int>(index)));
    if (elements >= 0 && offset + slice->count > elements) {
      TP_GRAPH_FAIL(context.node, roles[index], " has ", elements, " elements; the slice needs [", offset, ", ",
                    offset + slice->count, ")");
    }
  }
}

// The kernel's inputs (var, grad, slots...) as the flat ranges the slice names; unchanged without one.
std::vector<Tensor> sliced(const KernelContext& context, std::size_t tensors) {
  std::vector<Tensor> views(context.inputs.begin(), context.inputs.begin() + static_cast<std::ptrdiff_t>(tensors));
  const std::optional<Slice> slice = slice_of(context.node);
  if (!slice) return views;
  for (std::size_t index = 0; index < tensors; ++index) {
    const std::int64_t offset = index == 0 ? slice->var_offset : index == 1 ? slice->grad_offset : slice->slot_offset;
    views[index] = views[index].reshape(Shape{views[index].num_elements()}).slice(offset, offset + slice->count);
  }
  return views;
}

tp::ops::SgdOptions sgd_options(const Node& node) {
  return tp::ops::SgdOptions{.learning_rate = non_negative_attribute(node, "learning_rate", kSgdLearningRate),
                             .momentum = non_negative_attribute(node, "momentum", 0.0),
                             .nesterov = attribute_bool(node, "nesterov", false)};
}

tp::ops::AdamOptions adam_options(const Node& node) {
  return tp::ops::AdamOptions{.learning_rate = non_negative_attribute(node, "learning_rate", kAdamLearningRate),
                              .beta1 = unit_attribute(node, "beta1", kAdamBeta1),
                              .beta2 = unit_attribute(node, "beta2", kAdamBeta2),
                              .epsilon = non_negative_attribute(node, "epsilon", kAdamEpsilon)};
}

std::vector<TensorType> infer_sgd(const InferenceContext& context) {
  check_slots(context, {"var", "grad", "velocity"});
  sgd_options(context.node);
  return {};
}

std::vector<TensorType> infer_adam(const InferenceContext& context) {
  check_slots(context, {"var", "grad", "m", "v"});
  adam_options(context.node);
  return {};
}

// The conditional forms take one more input, `apply`, a float32 scalar.
std::vector<TensorType> infer_conditional(const InferenceContext& context,
                                          std::vector<TensorType> (*infer)(const InferenceContext&)) {
  const TensorType& apply = input(context, static_cast<int>(context.inputs.size()) - 1);
  if (apply.dtype != DType::f32 || !apply.dims.empty()) {
    TP_GRAPH_FAIL(context.node, "apply ", apply, " must be a float32 scalar [] (0 skips, else the gradient's factor)");
  }
  InferenceContext rest{context.node, context.inputs};
  rest.inputs.pop_back();
  return infer(rest);
}

void sgd_kernel(KernelContext& context) {
  const std::vector<Tensor> in = sliced(context, 3);
  tp::ops::sgd_update(in[0], in[1], in[2], sgd_options(context.node), op_context(context));
}

void adam_kernel(KernelContext& context) {
  if (context.step < 1) {
    TP_GRAPH_FAIL(context.node, "step ", context.step, " must be >= 1 (the session passes the 1-based training step)");
  }
  const std::vector<Tensor> in = sliced(context, 4);
  tp::ops::adam_update(in[0], in[1], in[2], in[3], context.step, adam_options(context.node), op_context(context));
}

void sgd_if_kernel(KernelContext& context) {
  const std::vector<Tensor> in = sliced(context, 3);
  tp::ops::sgd_update_if(context.inputs[3], in[0], in[1], in[2], sgd_options(context.node), op_context(context));
}

void adam_if_kernel(KernelContext& context) {
  if (context.step < 1) {
    TP_GRAPH_FAIL(context.node, "step ", context.step, " must be >= 1 (the session passes the 1-based training step)");
  }
  const std::vector<Tensor> in = sliced(context, 4);
  tp::ops::adam_update_if(context.inputs[4], in[0], in[1], in[2], in[3], context.step, adam_options(context.node),
                          op_context(context));
}

}  // namespace

void register_state_ops(OpRegistry& registry) {
  registry.add(OpDef{.name = "ApplySgd",
                     .num_inputs = 3,
                     .num_outputs = 0,
                     .infer = infer_sgd,
                     .kernels = every_backend(sgd_kernel),
                     .stateful = true});
  registry.add(OpDef{.name = "ApplyAdam",
                     .num_inputs = 4,
                     .num_outputs = 0,
                     .infer = infer_adam,
                     .kernels = every_backend(adam_kernel),
                     .stateful = true});
  registry.add(OpDef{.name = "ApplySgdIf",
                     .num_inputs = 4,
                     .num_outputs = 0,
                     .infer = [](const InferenceContext& c) { return infer_conditional(c, infer_sgd); },
                     .kernels = every_backend(sgd_if_kernel),
                     .stateful = true});
  registry.add(OpDef{.name = "ApplyAdamIf",
                     .num_inputs = 5,
                     .num_outputs = 0,
                     .infer = [](const InferenceContext& c) { return infer_conditional(c, infer_adam); },
                     .kernels = every_backend(adam_if_kernel),
                     .stateful = true});
}

}  // namespace tp::graph::detail
