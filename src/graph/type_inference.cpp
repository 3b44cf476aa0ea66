// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/graph/type_inference.hpp"

#include "graph/graph_internal.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::graph {

namespace {

constexpr std::string_view kPlaceholder = "Placeholder";

// The fed type must be the declared one with its unknown dims filled in.
void check_feed(const Node& node, const TensorType& declared, const TensorType& fed) {
  const auto mismatch = [&](const auto&... parts) {
    TP_GRAPH_FAIL(node, "declared ", declared, " but fed ", fed, ": ", parts...);
  };
  if (fed.dtype != declared.dtype) mismatch("dtype ", name_of(fed.dtype), " is not ", name_of(declared.dtype));
  if (fed.dims.size() != declared.dims.size()) mismatch("rank ", fed.dims.size(), " is not ", declared.dims.size());
  for (std::size_t index = 0; index < fed.dims.size(); ++index) {
    if (fed.dims[index] < 0) mismatch("dim ", index, " is unknown; a feed must be fully defined");
    if (declared.dims[index] >= 0 && declared.dims[index] != fed.dims[index]) {
      mismatch("dim ", index, " is ", declared.dims[index], " but ", fed.dims[index], " was fed");
    }
  }
}

}  // namespace

std::vector<std::vector<TensorType>> infer_types(const Graph& graph,
                                                 const std::map<NodeId, TensorType>& placeholder_types) {
  return infer_types(graph, placeholder_types, std::vector<bool>(graph.size(), true));
}

std::vector<std::vector<TensorType>> infer_types(const Graph& graph,
                                                 const std::map<NodeId, TensorType>& placeholder_types,
                                                 const std::vector<bool>& needed) {
  if (needed.size() != graph.size()) {
    TP_THROW(InvalidArgument, detail::kComponent, "infer_types: ", needed.size(), " needed-flags for a graph of ",
             graph.size(), " nodes");
  }
  for (const auto& [id, type] : placeholder_types) {
    const Node& node = graph.node(id);
    if (node.op != kPlaceholder) {
      TP_GRAPH_FAIL(node, "is fed (", type, ") but only Placeholder nodes take feeds");
    }
  }
  const OpRegistry& registry = OpRegistry::global();
  std::vector<std::vector<TensorType>> types(graph.size());
  for (const Node& node : graph.nodes()) {
    const auto id = static_cast<std::size_t>(node.id);
    if (!needed[id]) {
      types[id] = node.outputs;
      continue;
    }
    if (node.op == kPlaceholder) {
      const auto feed = placeholder_types.find(node.id);
      if (feed == placeholder_types.end()) {
        TP_GRAPH_FAIL(node, "missing feed: the placeholder (", node.outputs.at(0), ") has no value for this run");
      }
      check_feed(node, node.outputs.at(0), feed->second);
      types[id] = {feed->second};
      continue;
    }
    std::vector<TensorType> input_types;
    for (const Output& input : node.inputs) {
      input_types.push_back(types[static_cast<std::size_t>(input.node)].at(static_cast<std::size_t>(input.index)));
    }
    types[id] = detail::infer_outputs(registry.get(node.op), node, std::move(input_types));
    for (std::size_t index = 0; index < types[id].size(); ++index) {
      if (!types[id][index].fully_defined()) {
        TP_GRAPH_FAIL(node, "output ", index, " is ", types[id][index],
                      " after specialisation; every dim must be known once the placeholders are fed");
      }
    }
  }
  return types;
}

}  // namespace tp::graph
