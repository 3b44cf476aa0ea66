// SPDX-License-Identifier: Apache-2.0
// Ops that move or repeat elements: Reshape [shape], Broadcast(dy, like) [axis, mean] (re-inserts an axis a
// reduction removed, taking its size from `like`) and ScaleRows(x [rows, cols], s [rows]).

#include <algorithm>

#include "graph/ops/op_support.hpp"
#include "tensorpool/ops/broadcast.hpp"
#include "tensorpool/ops/cast.hpp"

namespace tp::graph::detail {

namespace {

// ---- Reshape [shape]: at most one -1 in `shape`, inferred from the element count.

std::vector<TensorType> infer_reshape(const InferenceContext& context) {
  const TensorType& x = input(context, 0);
  std::vector<std::int64_t> dims = attribute_ints(context.node, "shape");
  const std::string requested = to_string(AttrValue(dims));
  std::int64_t known_product = 1;
  std::optional<std::size_t> unknown;
  for (std::size_t index = 0; index < dims.size(); ++index) {
    if (dims[index] == -1 && !unknown.has_value()) {
      unknown = index;
    } else if (dims[index] < 0) {
      TP_GRAPH_FAIL(context.node, "shape ", requested, " may hold one -1 (inferred) and otherwise dims >= 0");
    } else {
      known_product *= dims[index];
    }
  }
  if (!x.fully_defined()) return {TensorType{x.dtype, dims}};
  const std::int64_t elements = x.shape().num_elements();
  if (unknown.has_value()) {
    if (known_product == 0 || elements % known_product != 0) {
      TP_GRAPH_FAIL(context.node, "x ", x, " (", elements, " elements) cannot be reshaped to ", requested);
    }
    dims[*unknown] = elements / known_product;
  } else if (known_product != elements) {
    TP_GRAPH_FAIL(context.node, "x ", x, " has ", elements, " elements but shape ", requested, " holds ",
                  known_product);
  }
  return {TensorType{x.dtype, dims}};
}

// A copy into the planned output (a view would alias the input's buffer, which the planner does not expect).
void reshape_kernel(KernelContext& context) {
  tp::ops::cast_into(context.inputs[0].reshape(context.outputs[0].shape()), context.outputs[0], op_context(context));
}

std::vector<std::optional<Output>> reshape_gradient(GradientContext& context) {
  const TensorType& x = context.input_type(0);
  if (std::count(x.dims.begin(), x.dims.end(), std::int64_t{-1}) > 1) {
    TP_GRAPH_FAIL(context.node, "the gradient must reshape back to x ", x, ", which has more than one unknown dim");
  }
  if (!is_floating(x.dtype)) return no_gradients(1);
  return {context.add("Reshape", {upstream(context)}, {{"shape", x.dims}})};
}

// ---- Broadcast(dy, like) [axis, mean]: out has like's shape; like's data is never read.

std::vector<TensorType> infer_broadcast(const InferenceContext& context) {
  require_float(context, 0, "dy");
  require_same_dtype(context, 0, "dy", 1, "like");
  const TensorType& dy = input(context, 0);
  const TensorType& like = input(context, 1);
  const std::int64_t axis = normalize_axis(context, 1, "like", attribute_int(context.node, "axis"));
  (void)attribute_bool(context.node, "mean", false);  // type-checked here, read by the kernel
  if (dy.dims.size() + 1 != like.dims.size()) {
    TP_GRAPH_FAIL(context.node, "dy ", dy, " must have one axis less than like ", like);
  }
  TensorType out = like;
  for (std::size_t dim = 0, source = 0; dim < out.dims.size(); ++dim) {
    if (static_cast<std::int64_t>(dim) == axis) continue;
    if (!dims_agree(out.dims[dim], dy.dims[source])) {
      TP_GRAPH_FAIL(context.node, "dy ", dy, " does not match like ", like, " without axis ", axis);
    }
    out.dims[dim] = merge_dim(out.dims[dim], dy.dims[source++]);
  }
  return {out};
}

void broadcast_kernel(KernelContext& context) {
  const auto mode =
      attribute_bool(context.node, "mean", false) ? tp::ops::BroadcastMode::mean : tp::ops::BroadcastMode::copy;
  tp::ops::broadcast_axis_into(context.inputs[0], attribute_int(context.node, "axis"), context.outputs[0], mode,
                               op_context(context));
}

// The adjoint of repeating along an axis is summing along it (averaging for the mean form).
std::vector<std::optional<Output>> broadcast_gradient(GradientContext& context) {
  const bool mean = attribute_bool(context.node, "mean", false);
  return {context.add(mean ? "Mean" : "Sum", {upstream(context)}, {{"axis", attribute_int(context.node, "axis")}}),
          std::nullopt};
}

// ---- ScaleRows(x [rows, cols], s [rows])

std::vector<TensorType> infer_scale_rows(const InferenceContext& context) {
  require_rank(context, 0, "x", 2);
  require_float(context, 0, "x");
  require_rank(context, 1, "s", 1);
  require_same_dtype(context, 0, "x", 1, "s");
  TensorType out = input(context, 0);
  const std::int64_t rows = input(context, 1).dims[0];
  if (!dims_agree(out.dims[0], rows)) {
    TP_GRAPH_FAIL(context.node, "x ", out, " and s ", input(context, 1), ": ", out.dims[0], " rows but ", rows,
                  " scales");
  }
  out.dims[0] = merge_dim(out.dims[0], rows);
  return {out};
}

std::vector<std::optional<Output>> scale_rows_gradient(GradientContext& context) {
  const Output dy = upstream(context);
  std::vector<std::optional<Output>> result = no_gradients(2);
  if (context.wants(0)) result[0] = context.add("ScaleRows", {dy, context.node.inputs[1]});
  if (context.wants(1)) {
    const Output product = context.add("Mul", {dy, context.node.inputs[0]});
    result[1] = context.add("Sum", {product}, {{"axis", std::int64_t{-1}}});
  }
  return result;
}

}  // namespace

void register_array_ops(OpRegistry& registry) {
  registry.add(OpDef{.name = "Reshape",
                     .num_inputs = 1,
                     .num_outputs = 1,
                     .infer = infer_reshape,
                     .kernels = every_backend(reshape_kernel),
                     .gradient = reshape_gradient});
  registry.add(OpDef{.name = "Broadcast",
                     .num_inputs = 2,
                     .num_outputs = 1,
                     .infer = infer_broadcast,
                     .kernels = every_backend(broadcast_kernel),
                     .gradient = broadcast_gradient});
  registry.add(OpDef{.name = "ScaleRows",
                     .num_inputs = 2,
                     .num_outputs = 1,
                     .infer = infer_scale_rows,
                     .kernels = every_backend([](KernelContext& c) {
                       tp::ops::scale_rows_into(c.inputs[0], c.inputs[1], c.outputs[0], op_context(c));
                     }),
                     .gradient = scale_rows_gradient,
                     .may_reuse_input = true});
}

}  // namespace tp::graph::detail
