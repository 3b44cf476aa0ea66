// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shorthands for the nodes every model graph starts from. Each is one Graph::add of a built-in op.

#include <cstdint>
#include <string_view>
#include <vector>

#include "tensorpool/graph/graph.hpp"

namespace tp::graph {

// A value fed at run time; -1 dims are fixed by the feed (infer_types).
Output placeholder(Graph& graph, std::string_view name, DType dtype, std::vector<std::int64_t> dims);
// A persistent tensor owned by the session (dims fully defined).
Output variable(Graph& graph, std::string_view name, DType dtype, std::vector<std::int64_t> dims);
// A tensor of `dims` (fully defined) filled with `value`.
Output fill(Graph& graph, std::string_view name, DType dtype, std::vector<std::int64_t> dims, double value);

}  // namespace tp::graph
