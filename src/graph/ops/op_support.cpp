// SPDX-License-Identifier: Apache-2.0
#include "graph/ops/op_support.hpp"

#include <cmath>

namespace tp::graph {

Kernels every_backend(const Kernel& kernel) {
  Kernels kernels;
  for (device::DeviceKind kind : device::kDeviceKinds) kernels.emplace(kind, kernel);
  return kernels;
}

void require_float_or_half(const InferenceContext& context, int index, std::string_view role) {
  const TensorType& type = detail::input(context, index);
  if (!is_floating(type.dtype)) {
    TP_GRAPH_FAIL(context.node, role, " is ", type,
                  "; this op takes float32 or float64, or float16 / bfloat16 (insert a Cast)");
  }
}

}  // namespace tp::graph

namespace tp::graph::detail {

const TensorType& input(const InferenceContext& context, int index) {
  return context.inputs.at(static_cast<std::size_t>(index));
}

void require_float(const InferenceContext& context, int index, std::string_view role) {
  const TensorType& type = input(context, index);
  if (type.dtype != DType::f32 && type.dtype != DType::f64) {
    TP_GRAPH_FAIL(context.node, role, " is ", type, "; this op takes float32 or float64 (insert a Cast)");
  }
}

void require_rank(const InferenceContext& context, int index, std::string_view role, std::size_t rank) {
  const TensorType& type = input(context, index);
  if (type.dims.size() != rank) TP_GRAPH_FAIL(context.node, role, " ", type, " must have rank ", rank);
}

void require_same_dtype(const InferenceContext& context, int first, std::string_view first_role, int second,
                        std::string_view second_role) {
  const TensorType& a = input(context, first);
  const TensorType& b = input(context, second);
  if (a.dtype != b.dtype) {
    TP_GRAPH_FAIL(context.node, first_role, " ", a, " and ", second_role, " ", b, " must share a dtype");
  }
}

void require_label_dtype(const InferenceContext& context, int index, std::string_view role) {
  const TensorType& type = input(context, index);
  if (type.dtype != DType::i32 && type.dtype != DType::i64) {
    TP_GRAPH_FAIL(context.node, role, " ", type, " must be int32 or int64 class indexes");
  }
}

std::vector<std::int64_t> merge_shapes(const InferenceContext& context, int first, std::string_view first_role,
                                       int second, std::string_view second_role) {
  const TensorType& a = input(context, first);
  const TensorType& b = input(context, second);
  if (a.dims.size() != b.dims.size()) {
    TP_GRAPH_FAIL(context.node, first_role, " ", a, " and ", second_role, " ", b, " must have one shape (ranks ",
                  a.dims.size(), " and ", b.dims.size(), " differ)");
  }
  std::vector<std::int64_t> merged(a.dims.size());
  for (std::size_t dim = 0; dim < a.dims.size(); ++dim) {
    if (!dims_agree(a.dims[dim], b.dims[dim])) {
      TP_GRAPH_FAIL(context.node, first_role, " ", a, " and ", second_role, " ", b, " must have one shape (dim ", dim,
                    ": ", a.dims[dim], " and ", b.dims[dim], " differ)");
    }
    merged[dim] = merge_dim(a.dims[dim], b.dims[dim]);
  }
  return merged;
}

std::int64_t normalize_axis(const InferenceContext& context, int index, std::string_view role, std::int64_t axis) {
  const TensorType& type = input(context, index);
  const auto rank = static_cast<std::int64_t>(type.dims.size());
  if (axis < -rank || axis >= rank) {
    TP_GRAPH_FAIL(context.node, "axis ", axis, " is out of range for ", role, " ", type, " (valid axes are ", -rank,
                  "..", rank - 1, ")");
  }
  return axis < 0 ? axis + rank : axis;
}

double non_negative_attribute(const Node& node, std::string_view name, double default_value) {
  const double value = attribute_float(node, name, default_value);
  if (!(std::isfinite(value) && value >= 0))
    TP_GRAPH_FAIL(node, "attribute '", name, "' = ", value, " must be finite and >= 0");
  return value;
}

double unit_attribute(const Node& node, std::string_view name, double default_value) {
  const double value = attribute_float(node, name, default_value);
  if (!(value >= 0 && value < 1)) TP_GRAPH_FAIL(node, "attribute '", name, "' = ", value, " must lie in [0, 1)");
  return value;
}

}  // namespace tp::graph::detail
