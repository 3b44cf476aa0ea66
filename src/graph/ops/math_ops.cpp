// SPDX-License-Identifier: Apache-2.0
// Elementwise arithmetic: Add, Sub, Mul, Div (x, y) with the tensor ops' broadcasts (y of x's shape, of x's
// last dimension, or a scalar []), Scale [alpha], Cast [dtype] and AddN (a, b), which autodiff uses to sum
// gradient contributions.

#include "graph/ops/op_support.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/elementwise.hpp"

namespace tp::graph::detail {

namespace {

// ---- Add, Sub, Mul, Div

// The broadcast form follows from the ranks alone, so gradients (built before feeds fix unknown dims) know it.
enum class Broadcast { same, row, scalar };

Broadcast broadcast_of(const TensorType& x, const TensorType& y) {
  if (y.dims.size() == x.dims.size()) return Broadcast::same;
  return y.dims.empty() ? Broadcast::scalar : Broadcast::row;
}

std::vector<TensorType> infer_binary(const InferenceContext& context) {
  require_float(context, 0, "x");
  require_same_dtype(context, 0, "x", 1, "y");
  const TensorType& x = input(context, 0);
  const TensorType& y = input(context, 1);
  if (y.dims.size() == x.dims.size()) return {TensorType{x.dtype, merge_shapes(context, 0, "x", 1, "y")}};
  if (y.dims.empty()) return {x};
  if (y.dims.size() == 1 && !x.dims.empty() && dims_agree(y.dims[0], x.dims.back())) {
    TensorType out = x;
    out.dims.back() = merge_dim(x.dims.back(), y.dims[0]);
    return {out};
  }
  TP_GRAPH_FAIL(context.node, "x ", x, " and y ", y,
                " do not broadcast; y must have x's shape, x's last dimension, or be a scalar []");
}

tp::ops::Arithmetic arithmetic_of(const Node& node) {
  if (node.op == "Add" || node.op == "AddN") return tp::ops::Arithmetic::add;
  if (node.op == "Sub") return tp::ops::Arithmetic::sub;
  if (node.op == "Mul") return tp::ops::Arithmetic::mul;
  return tp::ops::Arithmetic::div;
}

void binary_kernel(KernelContext& context) {
  tp::ops::binary_into(arithmetic_of(context.node), context.inputs[0], context.inputs[1], context.outputs[0],
                       op_context(context));
}

// A gradient of x's shape summed down to y's shape: over every leading axis for a row or scalar broadcast.
Output reduce_to_y(GradientContext& context, Output gradient) {
  const TensorType& x = context.input_type(0);
  const TensorType& y = context.input_type(1);
  if (broadcast_of(x, y) == Broadcast::same) return gradient;
  for (std::size_t axis = y.dims.size(); axis < x.dims.size(); ++axis) {
    gradient = context.add("Sum", {gradient}, {{"axis", std::int64_t{0}}});
  }
  return gradient;
}

Output negate(GradientContext& context, Output value) { return context.add("Scale", {value}, {{"alpha", -1.0}}); }

std::vector<std::optional<Output>> add_gradient(GradientContext& context) {
  const Output dy = upstream(context);
  std::vector<std::optional<Output>> result{dy, std::nullopt};
  if (context.wants(1)) result[1] = reduce_to_y(context, dy);
  return result;
}

std::vector<std::optional<Output>> sub_gradient(GradientContext& context) {
  const Output dy = upstream(context);
  std::vector<std::optional<Output>> result{dy, std::nullopt};
  if (context.wants(1)) result[1] = negate(context, reduce_to_y(context, dy));
  return result;
}

std::vector<std::optional<Output>> mul_gradient(GradientContext& context) {
  const Output dy = upstream(context);
  const Output x = context.node.inputs[0];
  const Output y = context.node.inputs[1];
  std::vector<std::optional<Output>> result = no_gradients(2);
  if (context.wants(0)) result[0] = context.add("Mul", {dy, y});
  if (context.wants(1)) result[1] = reduce_to_y(context, context.add("Mul", {dy, x}));
  return result;
}

// out = x / y: dx = dy / y; dy_y = -dy * x / y^2 = -(dy * out) / y, then reduced to y's shape.
std::vector<std::optional<Output>> div_gradient(GradientContext& context) {
  const Output dy = upstream(context);
  const Output y = context.node.inputs[1];
  std::vector<std::optional<Output>> result = no_gradients(2);
  if (context.wants(0)) result[0] = context.add("Div", {dy, y});
  if (context.wants(1)) {
    const Output quotient = context.add("Div", {context.add("Mul", {dy, output_of(context, 0)}), y});
    result[1] = negate(context, reduce_to_y(context, quotient));
  }
  return result;
}

// ---- Scale [alpha], Cast [dtype], AddN

std::vector<TensorType> infer_scale(const InferenceContext& context) {
  require_float(context, 0, "x");
  (void)attribute_float(context.node, "alpha");  // present and a number; read by the kernel
  return {input(context, 0)};
}

std::vector<TensorType> infer_cast(const InferenceContext& context) {
  return {TensorType{attribute_dtype(context.node, "dtype"), input(context, 0).dims}};
}

// Casting back is the gradient between floating dtypes; integers carry none.
std::vector<std::optional<Output>> cast_gradient(GradientContext& context) {
  const DType source = context.input_type(0).dtype;
  if (!is_floating(source) || !is_floating(attribute_dtype(context.node, "dtype"))) return no_gradients(1);
  return {context.add("Cast", {upstream(context)}, {{"dtype", source}})};
}

std::vector<TensorType> infer_add_n(const InferenceContext& context) {
  require_float(context, 0, "a");
  require_same_dtype(context, 0, "a", 1, "b");
  return {TensorType{input(context, 0).dtype, merge_shapes(context, 0, "a", 1, "b")}};
}

OpDef binary_op(std::string name, std::function<std::vector<std::optional<Output>>(GradientContext&)> gradient) {
  return OpDef{.name = std::move(name),
               .num_inputs = 2,
               .num_outputs = 1,
               .infer = infer_binary,
               .kernels = every_backend(binary_kernel),
               .gradient = std::move(gradient),
               .may_reuse_input = true};
}

}  // namespace

void register_math_ops(OpRegistry& registry) {
  registry.add(binary_op("Add", add_gradient));
  registry.add(binary_op("Sub", sub_gradient));
  registry.add(binary_op("Mul", mul_gradient));
  registry.add(binary_op("Div", div_gradient));
  registry.add(OpDef{.name = "Scale",
                     .num_inputs = 1,
                     .num_outputs = 1,
                     .infer = infer_scale,
                     .kernels = every_backend([](KernelContext& c) {
                       tp::ops::scale_into(c.inputs[0], attribute_float(c.node, "alpha"), c.outputs[0], op_context(c));
                     }),
                     .gradient =
                         [](GradientContext& c) {
                           return std::vector<std::optional<Output>>{
                               c.add("Scale", {upstream(c)}, {{"alpha", attribute_float(c.node, "alpha")}})};
                         },
                     .may_reuse_input = true});
  registry.add(OpDef{
      .name = "Cast",
      .num_inputs = 1,
      .num_outputs = 1,
      .infer = infer_cast,
      .kernels = every_backend([](KernelContext& c) { tp::ops::cast_into(c.inputs[0], c.outputs[0], op_context(c)); }),
      .gradient = cast_gradient});
  registry.add(OpDef{.name = "AddN",
                     .num_inputs = 2,
                     .num_outputs = 1,
                     .infer = infer_add_n,
                     .kernels = every_backend(binary_kernel),
                     .gradient =
                         [](GradientContext& c) {
                           return std::vector<std::optional<Output>>{upstream(c), upstream(c)};
                         },
                     .may_reuse_input = true});
}

}  // namespace tp::graph::detail
