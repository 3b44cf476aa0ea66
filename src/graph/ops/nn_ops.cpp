// SPDX-License-Identifier: Apache-2.0
// The neural-network ops of the MLP path and their gradient ops: BiasAdd, BiasAddGrad, Relu, ReluGrad,
// Softmax, LogSoftmax and SparseSoftmaxCrossEntropy.

#include "graph/ops/op_support.hpp"
#include "tensorpool/ops/nn.hpp"

namespace tp::graph::detail {

namespace {

// ---- BiasAdd(x [rows, cols], bias [cols]) and BiasAddGrad(dy [rows, cols]) -> [cols]

std::vector<TensorType> infer_bias_add(const InferenceContext& context) {
  require_rank(context, 0, "x", 2);
  require_float_or_half(context, 0, "x");
  require_rank(context, 1, "bias", 1);
  require_same_dtype(context, 0, "x", 1, "bias");
  TensorType out = input(context, 0);
  const std::int64_t bias_size = input(context, 1).dims[0];
  if (!dims_agree(out.dims[1], bias_size)) {
    TP_GRAPH_FAIL(context.node, "x ", out, " and bias ", input(context, 1), ": bias size ", bias_size,
                  " differs from x's column count ", out.dims[1]);
  }
  out.dims[1] = merge_dim(out.dims[1], bias_size);
  return {out};
}

std::vector<TensorType> infer_bias_add_grad(const InferenceContext& context) {
  require_rank(context, 0, "dy", 2);
  require_float_or_half(context, 0, "dy");
  return {TensorType{input(context, 0).dtype, {input(context, 0).dims[1]}}};
}

std::vector<std::optional<Output>> bias_add_gradient(GradientContext& context) {
  const Output dy = upstream(context);
  std::vector<std::optional<Output>> result{dy, std::nullopt};
  if (context.wants(1)) result[1] = context.add("BiasAddGrad", {dy});
  return result;
}

// dbias = column sums of dy, so d dbias / d dy re-broadcasts the gradient over the rows.
std::vector<std::optional<Output>> bias_add_grad_gradient(GradientContext& context) {
  return {context.add("Broadcast", {upstream(context), context.node.inputs[0]}, {{"axis", std::int64_t{0}}})};
}

// ---- Relu(x) and ReluGrad(dy, x)

std::vector<TensorType> infer_unary_float(const InferenceContext& context) {
  require_float_or_half(context, 0, "x");
  return {input(context, 0)};
}

std::vector<TensorType> infer_relu_grad(const InferenceContext& context) {
  require_float_or_half(context, 0, "dy");
  require_same_dtype(context, 0, "dy", 1, "x");
  return {TensorType{input(context, 0).dtype, merge_shapes(context, 0, "dy", 1, "x")}};
}

std::vector<std::optional<Output>> relu_gradient(GradientContext& context) {
  return {context.add("ReluGrad", {upstream(context), context.node.inputs[0]})};
}

// ReluGrad is linear in dy with the same mask; its derivative in x is zero wherever it exists.
std::vector<std::optional<Output>> relu_grad_gradient(GradientContext& context) {
  std::vector<std::optional<Output>> result = no_gradients(2);
  if (context.wants(0)) result[0] = context.add("ReluGrad", {upstream(context), context.node.inputs[1]});
  return result;
}

// ---- Softmax(x) and LogSoftmax(x), rank 2, over the last axis

std::vector<TensorType> infer_softmax(const InferenceContext& context) {
  require_rank(context, 0, "x", 2);
  require_float(context, 0, "x");
  return {input(context, 0)};
}

// dx = y * (dy - sum(dy * y, -1)) = dy * y - ScaleRows(y, sum(dy * y, -1)).
std::vector<std::optional<Output>> softmax_gradient(GradientContext& context) {
  const Output y = output_of(context, 0);
  const Output product = context.add("Mul", {upstream(context), y});
  const Output row_sums = context.add("Sum", {product}, {{"axis", std::int64_t{-1}}});
  return {context.add("Sub", {product, context.add("ScaleRows", {y, row_sums})})};
}

// dx = dy - exp(y) * sum(dy, -1), with exp(y) = softmax(x).
std::vector<std::optional<Output>> log_softmax_gradient(GradientContext& context) {
  const Output dy = upstream(context);
  const Output probabilities = context.add("Softmax", {context.node.inputs[0]});
  const Output row_sums = context.add("Sum", {dy}, {{"axis", std::int64_t{-1}}});
  return {context.add("Sub", {dy, context.add("ScaleRows", {probabilities, row_sums})})};
}

// ---- SparseSoftmaxCrossEntropy(input [rows, cols], labels [rows]) -> loss [rows], backprop [rows, cols]

tp::ops::CrossEntropyInput cross_entropy_kind(const Node& node) {
  const std::string kind = attribute_string(node, "input", "logits");
  if (kind == "logits") return tp::ops::CrossEntropyInput::logits;
  if (kind == "probabilities") return tp::ops::CrossEntropyInput::probabilities;
  TP_GRAPH_FAIL(node, "attribute 'input' = '", kind, "' must be 'logits' or 'probabilities'");
}

std::vector<TensorType> infer_cross_entropy(const InferenceContext& context) {
  cross_entropy_kind(context.node);
  require_rank(context, 0, "input", 2);
  require_float(context, 0, "input");
  require_rank(context, 1, "labels", 1);
  require_label_dtype(context, 1, "labels");
  const TensorType& logits = input(context, 0);
  const std::int64_t label_rows = input(context, 1).dims[0];
  if (!dims_agree(logits.dims[0], label_rows)) {
    TP_GRAPH_FAIL(context.node, "input ", logits, " and labels ", input(context, 1), ": ", logits.dims[0], " rows but ",
                  label_rows, " labels");
  }
  const std::int64_t rows = merge_dim(logits.dims[0], label_rows);
  return {TensorType{logits.dtype, {rows}}, TensorType{logits.dtype, {rows, logits.dims[1]}}};
}

void cross_entropy_kernel(KernelContext& context) {
  tp::ops::sparse_cross_entropy_into(context.inputs[0], context.inputs[1], context.outputs[0], context.outputs[1],
                                     cross_entropy_kind(context.node), op_context(context));
}

// d loss[r] / d input[r, :] is backprop[r, :], so dinput = backprop scaled per row by the loss's gradient.
std::vector<std::optional<Output>> cross_entropy_gradient(GradientContext& context) {
  if (context.output_gradients.at(1).has_value()) {
    TP_GRAPH_FAIL(context.node, "output 1 (backprop) is not differentiable; differentiate through output 0 (the loss)");
  }
  std::vector<std::optional<Output>> result = no_gradients(2);
  if (context.wants(0) && context.output_gradients[0].has_value()) {
    result[0] = context.add("ScaleRows", {output_of(context, 1), *context.output_gradients[0]});
  }
  return result;
}

}  // namespace

void register_nn_ops(OpRegistry& registry) {
  registry.add(OpDef{.name = "BiasAdd",
                     .num_inputs = 2,
                     .num_outputs = 1,
                     .infer = infer_bias_add,
                     .kernels = every_backend([](KernelContext& c) {
                       tp::ops::bias_add_into(c.inputs[0], c.inputs[1], c.outputs[0], op_context(c));
                     }),
                     .gradient = bias_add_gradient,
                     .may_reuse_input = true});
  registry.add(OpDef{.name = "BiasAddGrad",
                     .num_inputs = 1,
                     .num_outputs = 1,
                     .infer = infer_bias_add_grad,
                     .kernels = every_backend([](KernelContext& c) {
                       tp::ops::bias_add_grad_into(c.inputs[0], c.outputs[0], op_context(c));
                     }),
                     .gradient = bias_add_grad_gradient});
  registry.add(OpDef{
      .name = "Relu",
      .num_inputs = 1,
      .num_outputs = 1,
      .infer = infer_unary_float,
      .kernels = every_backend([](KernelContext& c) { tp::ops::relu_into(c.inputs[0], c.outputs[0], op_context(c)); }),
      .gradient = relu_gradient,
      .may_reuse_input = true});
  registry.add(OpDef{.name = "ReluGrad",
                     .num_inputs = 2,
                     .num_outputs = 1,
                     .infer = infer_relu_grad,
                     .kernels = every_backend([](KernelContext& c) {
                       tp::ops::relu_grad_into(c.inputs[0], c.inputs[1], c.outputs[0], op_context(c));
                     }),
                     .gradient = relu_grad_gradient,
                     .may_reuse_input = true});
  registry.add(OpDef{.name = "Softmax",
                     .num_inputs = 1,
                     .num_outputs = 1,
                     .infer = infer_softmax,
                     .kernels = every_backend(
                         [](KernelContext& c) { tp::ops::softmax_into(c.inputs[0], c.outputs[0], op_context(c)); }),
                     .gradient = softmax_gradient,
                     .may_reuse_input = true});
  registry.add(OpDef{.name = "LogSoftmax",
                     .num_inputs = 1,
                     .num_outputs = 1,
                     .infer = infer_softmax,
                     .kernels = every_backend(
                         [](KernelContext& c) { tp::ops::log_softmax_into(c.inputs[0], c.outputs[0], op_context(c)); }),
                     .gradient = log_softmax_gradient,
                     .may_reuse_input = true});
  registry.add(OpDef{.name = "SparseSoftmaxCrossEntropy",
                     .num_inputs = 2,
                     .num_outputs = 2,
                     .infer = infer_cross_entropy,
                     .kernels = every_backend(cross_entropy_kernel),
                     .gradient = cross_entropy_gradient});
}

}  // namespace tp::graph::detail
