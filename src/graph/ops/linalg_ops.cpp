// SPDX-License-Identifier: Apache-2.0
// MatMul(a, b) [transpose_a, transpose_b]: out[m, n] = op(a) x op(b).

#include "graph/ops/op_support.hpp"
#include "tensorpool/ops/linalg.hpp"

namespace tp::graph::detail {

namespace {

std::vector<TensorType> infer_matmul(const InferenceContext& context) {
  require_rank(context, 0, "a", 2);
  require_rank(context, 1, "b", 2);
  require_float_or_half(context, 0, "a");
  require_same_dtype(context, 0, "a", 1, "b");
  const bool transpose_a = attribute_bool(context.node, "transpose_a", false);
  const bool transpose_b = attribute_bool(context.node, "transpose_b", false);
  const TensorType& a = input(context, 0);
  const TensorType& b = input(context, 1);
  const std::int64_t m = a.dims[transpose_a ? 1 : 0];
  const std::int64_t k = a.dims[transpose_a ? 0 : 1];
  const std::int64_t k_of_b = b.dims[transpose_b ? 1 : 0];
  const std::int64_t n = b.dims[transpose_b ? 0 : 1];
  if (!dims_agree(k, k_of_b)) {
    TP_GRAPH_FAIL(context.node, "a ", a, transpose_a ? " (transposed)" : "", " and b ", b,
                  transpose_b ? " (transposed)" : "", ": inner dimensions ", k, " and ", k_of_b, " differ");
  }
  return {TensorType{a.dtype, {m, n}}};
}

void matmul_kernel(KernelContext& context) {
  const tp::ops::MatmulOptions options{attribute_bool(context.node, "transpose_a", false),
                                       attribute_bool(context.node, "transpose_b", false)};
  tp::ops::matmul_into(context.inputs[0], context.inputs[1], context.outputs[0], options, op_context(context));
}

Output matmul(GradientContext& context, Output a, Output b, bool transpose_a, bool transpose_b) {
  return context.add("MatMul", {a, b}, {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}});
}

// With y = op(a) op(b) and dy its gradient, the four cases (T = transposed):
//   y = a b:     da = dy bT       db = aT dy
//   y = aT b:    da = b dyT       db = a dy
//   y = a bT:    da = dy b        db = dyT a
//   y = aT bT:   da = bT dyT      db = dyT aT
std::vector<std::optional<Output>> matmul_gradient(GradientContext& context) {
  const bool transpose_a = attribute_bool(context.node, "transpose_a", false);
  const bool transpose_b = attribute_bool(context.node, "transpose_b", false);
  const Output a = context.node.inputs[0];
  const Output b = context.node.inputs[1];
  const Output dy = upstream(context);
  std::vector<std::optional<Output>> result = no_gradients(2);
  if (context.wants(0)) {
    if (!transpose_a && !transpose_b) result[0] = matmul(context, dy, b, false, true);
    if (transpose_a && !transpose_b) result[0] = matmul(context, b, dy, false, true);
    if (!transpose_a && transpose_b) result[0] = matmul(context, dy, b, false, false);
    if (transpose_a && transpose_b) result[0] = matmul(context, b, dy, true, true);
  }
  if (context.wants(1)) {
    if (!transpose_a && !transpose_b) result[1] = matmul(context, a, dy, true, false);
    if (transpose_a && !transpose_b) result[1] = matmul(context, a, dy, false, false);
    if (!transpose_a && transpose_b) result[1] = matmul(context, dy, a, true, false);
    if (transpose_a && transpose_b) result[1] = matmul(context, dy, a, true, true);
  }
  return result;
}

}  // namespace

void register_linalg_ops(OpRegistry& registry) {
  registry.add(OpDef{.name = "MatMul",
                     .num_inputs = 2,
                     .num_outputs = 1,
                     .infer = infer_matmul,
                     .kernels = every_backend(matmul_kernel),
                     .gradient = matmul_gradient});
}

}  // namespace tp::graph::detail
