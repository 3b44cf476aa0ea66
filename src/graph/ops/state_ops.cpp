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
// ApplySgdMulti(var..., grad..., velocity...) and ApplyAdamMulti(var..., grad..., m..., v...) take N entries as
// parallel lists (input k of each list is entry k) and update them all in one kernel launch, bitwise as N
// ApplySgd / ApplyAdam nodes with the same attributes would; `slices` (4 integers per entry) gives each entry
// the range `slice` gives one update. Every input shares one float dtype (no 16-bit gradients, no apply flag).

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
void check_slots(const InferenceContext& context, const std::vector<std::string_view>& roles,
                 const std::optional<Slice>& slice) {
  require_float(context, 0, roles[0]);
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

void check_slots(const InferenceContext& context, const std::vector<std::string_view>& roles) {
  check_slots(context, roles, slice_of(context.node));
}

// `views` (var, grad, slots...) as the flat ranges the slice names; unchanged without one.
std::vector<Tensor> sliced(std::vector<Tensor> views, const std::optional<Slice>& slice) {
  if (!slice) return views;
  for (std::size_t index = 0; index < views.size(); ++index) {
    const std::int64_t offset = index == 0 ? slice->var_offset : index == 1 ? slice->grad_offset : slice->slot_offset;
    views[index] = views[index].reshape(Shape{views[index].num_elements()}).slice(offset, offset + slice->count);
  }
  return views;
}

// The kernel's first `tensors` inputs (var, grad, slots...) as the node's slice names them.
std::vector<Tensor> sliced(const KernelContext& context, std::size_t tensors) {
  return sliced(
      std::vector<Tensor>(context.inputs.begin(), context.inputs.begin() + static_cast<std::ptrdiff_t>(tensors)),
      slice_of(context.node));
}

// The multi-tensor forms: `groups` lists of N inputs each (var..., grad..., then each slot's list), and
// optionally `slices`, 4 integers per entry as `slice` is for one. Returns N.
std::size_t entries_of(const Node& node, std::size_t inputs, std::size_t groups) {
  if (inputs == 0 || inputs % groups != 0) {
    TP_GRAPH_FAIL(node, inputs, " inputs are not ", groups, " lists of one length (var..., grad..., then the slots)");
  }
  const std::size_t entries = inputs / groups;
  if (node.attributes.contains("slices") && attribute_ints(node, "slices").size() != 4 * entries) {
    TP_GRAPH_FAIL(node, "slices has ", attribute_ints(node, "slices").size(), " integers; it needs 4 per entry (",
                  4 * entries, "): [var_offset, count, grad_offset, slot_offset] each");
  }
  return entries;
}

// Entry `entry`'s slice of a multi-tensor node, as slice_of reads a single update's.
std::optional<Slice> entry_slice(const Node& node, std::size_t entry) {
  if (!node.attributes.contains("slices")) return std::nullopt;
  const std::vector<std::int64_t> values = attribute_ints(node, "slices");
  const auto first = values.begin() + static_cast<std::ptrdiff_t>(4 * entry);
  if (std::any_of(first, first + 4, [](std::int64_t v) { return v < 0; })) {
    TP_GRAPH_FAIL(node, "slices of entry ", entry, " must be 4 non-negative integers");
  }
  return Slice{first[0], first[1], first[2], first[3]};
}

// Each entry checked as its single update's inputs are, every input of entry 0's var dtype (no 16-bit gradient).
void check_multi(const InferenceContext& context, const std::vector<std::string_view>& roles) {
  const std::size_t entries = entries_of(context.node, context.inputs.size(), roles.size());
  for (std::size_t entry = 0; entry < entries; ++entry) {
    InferenceContext one{context.node, {}};
    for (std::size_t group = 0; group < roles.size(); ++group) {
      const TensorType& type = context.inputs[group * entries + entry];
      if (type.dtype != context.inputs[0].dtype) {
        TP_GRAPH_FAIL(context.node, roles[group], " of entry ", entry, " is ", type, " but the first var is ",
                      context.inputs[0], "; every input of a multi-tensor update shares one float dtype");
      }
      one.inputs.push_back(type);
    }
    check_slots(one, roles, entry_slice(context.node, entry));
  }
}

// The multi-tensor kernel's lists (var, grad, slots...), each entry as its slice names it.
std::vector<std::vector<Tensor>> multi_lists(const KernelContext& context, std::size_t groups) {
  const std::size_t entries = entries_of(context.node, context.inputs.size(), groups);
  std::vector<std::vector<Tensor>> lists(groups);
  for (std::size_t entry = 0; entry < entries; ++entry) {
    std::vector<Tensor> views;
    for (std::size_t group = 0; group < groups; ++group) views.push_back(context.inputs[group * entries + entry]);
    views = sliced(std::move(views), entry_slice(context.node, entry));
    for (std::size_t group = 0; group < groups; ++group) lists[group].push_back(std::move(views[group]));
  }
  return lists;
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

std::vector<TensorType> infer_sgd_multi(const InferenceContext& context) {
  check_multi(context, {"var", "grad", "velocity"});
  sgd_options(context.node);
  return {};
}

std::vector<TensorType> infer_adam_multi(const InferenceContext& context) {
  check_multi(context, {"var", "grad", "m", "v"});
  adam_options(context.node);
  return {};
}

void sgd_multi_kernel(KernelContext& context) {
  const std::vector<std::vector<Tensor>> lists = multi_lists(context, 3);
  tp::ops::sgd_update_multi(lists[0], lists[1], lists[2], sgd_options(context.node), op_context(context));
}

void adam_multi_kernel(KernelContext& context) {
  if (context.step < 1) {
    TP_GRAPH_FAIL(context.node, "step ", context.step, " must be >= 1 (the session passes the 1-based training step)");
  }
  const std::vector<std::vector<Tensor>> lists = multi_lists(context, 4);
  tp::ops::adam_update_multi(lists[0], lists[1], lists[2], lists[3], context.step, adam_options(context.node),
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
  registry.add(OpDef{.name = "ApplySgdMulti",
                     .num_inputs = 0,
                     .num_outputs = 0,
                     .infer = infer_sgd_multi,
                     .kernels = every_backend(sgd_multi_kernel),
                     .stateful = true,
                     .variadic = true});
  registry.add(OpDef{.name = "ApplyAdamMulti",
                     .num_inputs = 0,
                     .num_outputs = 0,
                     .infer = infer_adam_multi,
                     .kernels = every_backend(adam_multi_kernel),
                     .stateful = true,
                     .variadic = true});
}

}  // namespace tp::graph::detail
