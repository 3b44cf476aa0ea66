// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reverse-mode automatic differentiation on the graph IR: adds the nodes that compute dy/dx for each x.
//
// The walk: dy/dy = Fill(1) of y's dtype ("gradients/<y's node>/Fill"); then, in reverse node order, every
// node on a path from some x to y (its data depends on an x and y depends on it) that received a gradient
// passes it to its inputs through its op's gradient function. Several contributions to one output are summed
// with AddN ("gradients/<producer>/AddN"). Every gradient node is named "gradients/<forward node>/<op>" and
// inherits the forward node's `device` and `colocation_group`. Control inputs carry no gradient.

#include <optional>
#include <span>
#include <vector>

#include "tensorpool/graph/graph.hpp"

namespace tp::graph {

// One entry per x: the Output holding dy/dx (x's type), or nullopt when y does not depend on x.
// Throws tp::InvalidArgument naming the node when y is not a floating scalar (shape []), when y or an x is not
// an output of the graph, or when a node on a path from an x to y has a non-differentiable op (naming the node
// and the op). The graph keeps whatever nodes were added before an error.
[[nodiscard]] std::vector<std::optional<Output>> gradients(Graph& graph, Output y, std::span<const Output> xs);

}  // namespace tp::graph
