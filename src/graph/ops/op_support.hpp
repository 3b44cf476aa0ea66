// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the built-in op definitions share: inference checks that name the node and the offending input
// ("MatMul 'dense/MatMul': a float32[3] must have rank 2"), kernels registered for every backend alike (they
// run the tensor ops on the kernel's stream, which dispatch to the device's backend), and small gradient
// helpers.
//
// Unknown dims (-1) agree with anything: a check fails only on two known dims that differ, and a merged dim
// takes the known one. So build-time inference accepts what specialisation (infer_types) may still reject.

#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "graph/graph_internal.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/graph/op_definition.hpp"
#include "tensorpool/graph/op_registry.hpp"
#include "tensorpool/ops/op_context.hpp"

namespace tp::graph::detail {

// Registration of the built-in families, one source file each; OpRegistry::global() calls them once.
void register_io_ops(OpRegistry& registry);      // Placeholder, Variable, Fill
void register_linalg_ops(OpRegistry& registry);  // MatMul
void register_nn_ops(OpRegistry& registry);      // BiasAdd(Grad), Relu(Grad), (Log)Softmax, cross-entropy
void register_math_ops(OpRegistry& registry);    // Add, Sub, Mul, Div, Scale, Cast, AddN
void register_array_ops(OpRegistry& registry);   // Reshape, Broadcast, ScaleRows
void register_reduce_ops(OpRegistry& registry);  // Sum, Mean, Max, ArgMax, CorrectCount
void register_state_ops(OpRegistry& registry);   // ApplySgd, ApplyAdam
// (The collectives, AllReduce, ReduceScatter and AllGather, are distribute's: it registers them itself,
// tensorpool/distribute/collective_ops.hpp.)

// Kernel, Kernels, every_backend and require_float_or_half: tensorpool/graph/op_definition.hpp.
inline tp::ops::OpContext op_context(KernelContext& context) { return tp::ops::OpContext{.stream = &context.stream}; }

// Inference checks on input `index`, called `role` in messages.
const TensorType& input(const InferenceContext& context, int index);
// The tensor kernels take float32 and float64 only.
void require_float(const InferenceContext& context, int index, std::string_view role);
// The MLP path (MatMul, BiasAdd(Grad), Relu(Grad)) also takes float16 and bfloat16 (mixed precision):
// require_float_or_half (op_definition.hpp).
void require_rank(const InferenceContext& context, int index, std::string_view role, std::size_t rank);
void require_same_dtype(const InferenceContext& context, int first, std::string_view first_role, int second,
                        std::string_view second_role);
void require_label_dtype(const InferenceContext& context, int index, std::string_view role);

// True when a and b may be the same size (either unknown, or equal); merge_dim picks the known one.
inline bool dims_agree(std::int64_t a, std::int64_t b) { return a < 0 || b < 0 || a == b; }
inline std::int64_t merge_dim(std::int64_t a, std::int64_t b) { return a < 0 ? b : a; }
// Inputs `first` and `second` must have one shape (up to unknown dims); returns the merged dims.
std::vector<std::int64_t> merge_shapes(const InferenceContext& context, int first, std::string_view first_role,
                                       int second, std::string_view second_role);
// `axis` in [-rank, rank) of input `index`, made non-negative.
std::int64_t normalize_axis(const InferenceContext& context, int index, std::string_view role, std::int64_t axis);
// Reads a float attribute that must be finite and >= 0 (learning rate, momentum, epsilon) or in [0, 1) (betas).
double non_negative_attribute(const Node& node, std::string_view name, double default_value);
double unit_attribute(const Node& node, std::string_view name, double default_value);

// Gradient helpers. A list of `count` nullopts; the node's output `index` as an Output.
inline std::vector<std::optional<Output>> no_gradients(std::size_t count) {
  return std::vector<std::optional<Output>>(count);
}
inline Output output_of(const GradientContext& context, int index) { return Output{context.node.id, index}; }
// The upstream gradient of output 0, which autodiff guarantees for single-output ops.
inline Output upstream(const GradientContext& context) { return *context.output_gradients.at(0); }

}  // namespace tp::graph::detail
