// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the graph sources share. Errors name a node as "<op> '<name>'" first, then the mismatch, e.g.
//   [graph] MatMul 'dense/MatMul': a float32[32,784] and b float32[512,10]: inner dimensions 784 and 512 differ
// and one function runs an op's inference for a node, so that Graph::add, Graph::validate and infer_types
// agree on what a node's outputs are.

#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/graph.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::graph::detail {

inline constexpr const char* kComponent = "graph";

// "MatMul 'dense/MatMul'".
inline std::string label(const Node& node) { return node.op + " '" + node.name + "'"; }

// "[float32[3], int64[3]]".
std::string describe_types(const std::vector<TensorType>& types);

// definition.infer on (node, input_types), checked to return num_outputs types with dims >= -1.
std::vector<TensorType> infer_outputs(const OpDef& definition, const Node& node, std::vector<TensorType> input_types);

}  // namespace tp::graph::detail

// Throws tp::InvalidArgument "[graph] <op> '<name>': <parts...>" with the caller's file:line (a macro, so
// that TP_THROW records the call site rather than this header).
#define TP_GRAPH_FAIL(node, ...) \
  TP_THROW(::tp::InvalidArgument, ::tp::graph::detail::kComponent, ::tp::graph::detail::label(node), ": ", __VA_ARGS__)
