// SPDX-License-Identifier: Apache-2.0
#pragma once
// Specialising a graph for concrete feeds. At build time a placeholder may leave dims unknown (-1, usually the
// batch); a Session knows the fed shapes before it plans memory, and re-runs every op's inference with them.

#include <map>
#include <vector>

#include "tensorpool/graph/graph.hpp"

namespace tp::graph {

// The output types of every node (indexed by NodeId, then output index) with each Placeholder's type taken
// from `placeholder_types`. Inference runs in node order. Throws tp::InvalidArgument naming the node when:
//  - a key is not a Placeholder node of the graph;
//  - a Placeholder is not fed ("missing feed");
//  - a fed type's dtype differs from the declared one, its rank differs, a dim disagrees with a known declared
//    dim, or it is not fully defined (the message names the placeholder, the declared and the fed type);
//  - an op's inference rejects the concrete types (e.g. a batch of 32 meets one of 64);
//  - an output is still not fully defined afterwards.
[[nodiscard]] std::vector<std::vector<TensorType>> infer_types(const Graph& graph,
                                                               const std::map<NodeId, TensorType>& placeholder_types);

// The same for the nodes flagged in `needed` (graph.size() flags, e.g. from ancestors() of a step's fetches
// and targets): only those are inferred, must be fed (placeholders) and must come out fully defined; the
// others keep their build-time types. The flagged set must be closed under inputs (ancestors() is).
[[nodiscard]] std::vector<std::vector<TensorType>> infer_types(const Graph& graph,
                                                               const std::map<NodeId, TensorType>& placeholder_types,
                                                               const std::vector<bool>& needed);

}  // namespace tp::graph
