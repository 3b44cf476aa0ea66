// SPDX-License-Identifier: Apache-2.0
// Sources: Placeholder (fed per run), Variable (the session's persistent tensor) and Fill (a constant). The
// executor binds the first two itself, so their kernel maps are empty.

#include "graph/ops/op_support.hpp"
#include "tensorpool/ops/init.hpp"

namespace tp::graph::detail {

namespace {

// The `shape` attribute; -1 (unknown) only where `allow_unknown`.
std::vector<std::int64_t> shape_attribute(const Node& node, bool allow_unknown) {
  std::vector<std::int64_t> dims = attribute_ints(node, "shape");
  for (std::size_t index = 0; index < dims.size(); ++index) {
    if (dims[index] < (allow_unknown ? -1 : 0)) {
      TP_GRAPH_FAIL(
          node, "shape ", to_string(AttrValue(dims)), " has dim ", index, " = ", dims[index],
          allow_unknown ? "; dims must be >= 0, or -1 for unknown" : "; the shape must be fully defined (dims >= 0)");
    }
  }
  return dims;
}

std::vector<TensorType> infer_placeholder(const InferenceContext& context) {
  return {TensorType{attribute_dtype(context.node, "dtype"), shape_attribute(context.node, true)}};
}

std::vector<TensorType> infer_variable(const InferenceContext& context) {
  return {TensorType{attribute_dtype(context.node, "dtype"), shape_attribute(context.node, false)}};
}

std::vector<TensorType> infer_fill(const InferenceContext& context) {
  const DType dtype = attribute_dtype(context.node, "dtype");
  if (dtype != DType::f32 && dtype != DType::f64) {
    TP_GRAPH_FAIL(context.node, "dtype ", name_of(dtype), " is not supported; Fill makes float32 or float64");
  }
  (void)attribute_float(context.node, "value");  // present and a number; read by the kernel
  return {TensorType{dtype, shape_attribute(context.node, false)}};
}

void fill_kernel(KernelContext& context) {
  tp::ops::fill(context.outputs[0], attribute_float(context.node, "value"), op_context(context));
}

}  // namespace

void register_io_ops(OpRegistry& registry) {
  registry.add(OpDef{.name = "Placeholder", .num_inputs = 0, .num_outputs = 1, .infer = infer_placeholder});
  registry.add(OpDef{.name = "Variable", .num_inputs = 0, .num_outputs = 1, .infer = infer_variable, .stateful = true});
  // A constant: it has no inputs, so there is nothing to differentiate (an empty list of input gradients).
  registry.add(OpDef{.name = "Fill",
                     .num_inputs = 0,
                     .num_outputs = 1,
                     .infer = infer_fill,
                     .kernels = every_backend(fill_kernel),
                     .gradient = [](GradientContext&) { return no_gradients(0); }});
}

}  // namespace tp::graph::detail
