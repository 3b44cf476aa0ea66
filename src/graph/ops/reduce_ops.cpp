// SPDX-License-Identifier: Apache-2.0
// Reductions over one axis [axis, required; negative counts from the end]: Sum, Mean, Max (the result drops
// the axis), ArgMax (-> int64), the accuracy metric CorrectCount(predictions, labels) -> float32 [], and
// AllFinite(x) [range: optional {begin, end} of x's flat elements] -> float32 [] (1: no Inf or NaN in x, or in
// that range of it; loss scaling gates the optimizer update on it; ZeRO-2 checks a replica's chunk of its
// reduce-scatter bucket).

#include "graph/ops/op_support.hpp"
#include "tensorpool/ops/finite.hpp"
#include "tensorpool/ops/metrics.hpp"
#include "tensorpool/ops/reduce.hpp"

namespace tp::graph::detail {

namespace {

std::vector<std::int64_t> reduced_dims(const InferenceContext& context) {
  require_float(context, 0, "x");
  const std::int64_t axis = normalize_axis(context, 0, "x", attribute_int(context.node, "axis"));
  std::vector<std::int64_t> dims = input(context, 0).dims;
  dims.erase(dims.begin() + axis);
  return dims;
}

std::vector<TensorType> infer_reduce(const InferenceContext& context) {
  return {TensorType{input(context, 0).dtype, reduced_dims(context)}};
}

std::vector<TensorType> infer_argmax(const InferenceContext& context) {
  return {TensorType{DType::i64, reduced_dims(context)}};
}

tp::ops::Reduction reduction_of(const Node& node) {
  if (node.op == "Sum") return tp::ops::Reduction::sum;
  if (node.op == "Mean") return tp::ops::Reduction::mean;
  return tp::ops::Reduction::max;
}

void reduce_kernel(KernelContext& context) {
  tp::ops::reduce_into(context.inputs[0], attribute_int(context.node, "axis"), reduction_of(context.node),
                       context.outputs[0], op_context(context));
}

// Sum and Mean: the gradient re-inserts the reduced axis, its size taken from x at run time (x's dim may be
// unknown when the gradient is built); Mean divides by that size.
std::vector<std::optional<Output>> reduce_gradient(GradientContext& context) {
  const bool mean = context.node.op == "Mean";
  return {context.add("Broadcast", {upstream(context), context.node.inputs[0]},
                      {{"axis", attribute_int(context.node, "axis")}, {"mean", mean}})};
}

std::vector<TensorType> infer_correct_count(const InferenceContext& context) {
  require_rank(context, 0, "predictions", 2);
  require_float(context, 0, "predictions");
  require_rank(context, 1, "labels", 1);
  require_label_dtype(context, 1, "labels");
  const std::int64_t rows = input(context, 0).dims[0];
  const std::int64_t labels = input(context, 1).dims[0];
  if (!dims_agree(rows, labels)) {
    TP_GRAPH_FAIL(context.node, "predictions ", input(context, 0), " and labels ", input(context, 1), ": ", rows,
                  " rows but ", labels, " labels");
  }
  return {TensorType{DType::f32, {}}};
}

OpDef reduction(std::string name, bool differentiable) {
  return OpDef{.name = std::move(name),
               .num_inputs = 1,
               .num_outputs = 1,
               .infer = infer_reduce,
               .kernels = every_backend(reduce_kernel),
               .gradient = differentiable ? reduce_gradient : nullptr};
}

void check_finite_range(const InferenceContext& context) {
  if (!context.node.attributes.contains("range")) return;
  const std::vector<std::int64_t> range = attribute_ints(context.node, "range");
  std::int64_t elements = 1;
  for (std::int64_t dim : input(context, 0).dims) elements = dim < 0 || elements < 0 ? -1 : elements * dim;
  if (range.size() != 2 || range[0] < 0 || range[1] < range[0] || (elements >= 0 && range[1] > elements)) {
    TP_THROW(InvalidArgument, "graph", "AllFinite '", context.node.name, "': range ",
             to_string(context.node.attributes.at("range")), " is not {begin, end} within the ", elements,
             " elements of x");
  }
}

}  // namespace

void register_reduce_ops(OpRegistry& registry) {
  registry.add(reduction("Sum", true));
  registry.add(reduction("Mean", true));
  registry.add(reduction("Max", false));  // not differentiable (a gradient would need a tie-breaking mask)
  registry.add(OpDef{.name = "ArgMax",
                     .num_inputs = 1,
                     .num_outputs = 1,
                     .infer = infer_argmax,
                     .kernels = every_backend([](KernelContext& c) {
                       tp::ops::argmax_into(c.inputs[0], attribute_int(c.node, "axis"), c.outputs[0], op_context(c));
                     })});
  registry.add(OpDef{.name = "CorrectCount",
                     .num_inputs = 2,
                     .num_outputs = 1,
                     .infer = infer_correct_count,
                     .kernels = every_backend([](KernelContext& c) {
                       tp::ops::correct_count_into(c.inputs[0], c.inputs[1], c.outputs[0], op_context(c));
                     })});
  registry.add(OpDef{.name = "AllFinite",
                     .num_inputs = 1,
                     .num_outputs = 1,
                     .infer =
                         [](const InferenceContext& context) {
                           require_float_or_half(context, 0, "x");
                           check_finite_range(context);
                           return std::vector<TensorType>{TensorType{DType::f32, {}}};
                         },
                     .kernels = every_backend([](KernelContext& c) {
                       Tensor x = c.inputs[0];
                       if (c.node.attributes.contains("range")) {
                         const std::vector<std::int64_t> range = attribute_ints(c.node, "range");
                         x = x.reshape(Shape{x.num_elements()}).slice(range[0], range[1]);
                       }
                       tp::ops::all_finite_into(x, c.outputs[0], op_context(c));
                     })});
}

}  // namespace tp::graph::detail
