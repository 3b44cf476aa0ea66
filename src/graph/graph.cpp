// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/graph/graph.hpp"

#include <string>

#include "graph/graph_internal.hpp"
#include "tensorpool/graph/builder.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::graph {

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

Output Graph::add(std::string_view op, std::vector<Output> inputs, Attributes attributes, std::string_view name,
                  std::vector<NodeId> control_inputs) {
  return Output{add_node(op, std::move(inputs), std::move(attributes), name, std::move(control_inputs)), 0};
}

NodeId Graph::add_node(std::string_view op, std::vector<Output> inputs, Attributes attributes, std::string_view name,
                       std::vector<NodeId> control_inputs) {
  Node node;
  node.id = static_cast<NodeId>(nodes_.size());
  node.op = std::string(op);
  node.name = std::string(name.empty() ? op : name);
  if (find(node.name).has_value()) {
    // The first free "<name>_<k>"; names are unique, so at most size() + 1 candidates are tried.
    for (std::size_t suffix = 1;; ++suffix) {
      std::string candidate = node.name + "_" + std::to_string(suffix);
      if (!find(candidate).has_value()) {
        node.name = std::move(candidate);
        break;
      }
    }
  }
  node.inputs = std::move(inputs);
  node.control_inputs = std::move(control_inputs);
  node.attributes = std::move(attributes);

  const OpRegistry& registry = OpRegistry::global();
  const OpDef* definition = registry.find(op);
  if (definition == nullptr) {
    TP_GRAPH_FAIL(node, "unknown op '", op, "'; registered ops: ", join(registry.names()));
  }
  const bool variadic = definition->collective || definition->variadic;
  if (variadic ? node.inputs.empty() : node.inputs.size() != static_cast<std::size_t>(definition->num_inputs)) {
    TP_GRAPH_FAIL(node, "takes ", variadic ? "one or more" : std::to_string(definition->num_inputs), " input(s) but ",
                  node.inputs.size(), " were given");
  }
  std::vector<TensorType> input_types;
  for (std::size_t index = 0; index < node.inputs.size(); ++index) {
    const Output input = node.inputs[index];
    if (input.node < 0 || input.node >= node.id) {
      TP_GRAPH_FAIL(node, "input ", index, " refers to node ", input.node,
                    ", but inputs must be earlier nodes (ids 0..", node.id - 1, ")");
    }
    const Node& producer = nodes_[static_cast<std::size_t>(input.node)];
    if (input.index < 0 || static_cast<std::size_t>(input.index) >= producer.outputs.size()) {
      TP_GRAPH_FAIL(node, "input ", index, " refers to output ", input.index, " of ", detail::label(producer),
                    ", which has ", producer.outputs.size(), " output(s)");
    }
    input_types.push_back(producer.outputs[static_cast<std::size_t>(input.index)]);
  }
  for (NodeId control : node.control_inputs) {
    if (control < 0 || control >= node.id) {
      TP_GRAPH_FAIL(node, "control input ", control, " is not an earlier node (ids 0..", node.id - 1, ")");
    }
  }
  node.outputs = detail::infer_outputs(*definition, node, std::move(input_types));

  by_name_[node.name] = node.id;
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

const Node& Graph::node(NodeId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= nodes_.size()) {
    TP_THROW(InvalidArgument, detail::kComponent, "node id ", id, " is out of range (the graph has ", nodes_.size(),
             " nodes)");
  }
  return nodes_[static_cast<std::size_t>(id)];
}

Node& Graph::mutable_node(NodeId id) {
  Node& node = const_cast<Node&>(static_cast<const Graph&>(*this).node(id));
  edited_ = true;
  return node;
}

void Graph::set_placement(NodeId id, std::string device, std::string colocation_group) {
  Node& target = nodes_[static_cast<std::size_t>(node(id).id)];
  target.device = std::move(device);
  target.colocation_group = std::move(colocation_group);
}

std::optional<NodeId> Graph::find(std::string_view name) const {
  const auto entry = by_name_.find(name);
  if (entry != by_name_.end() && static_cast<std::size_t>(entry->second) < nodes_.size() &&
      nodes_[static_cast<std::size_t>(entry->second)].name == name) {
    return entry->second;
  }
  if (!edited_) return std::nullopt;
  // The map misses names edited through mutable_node; those are rare (tests, passes), so scan.
  for (const Node& node : nodes_) {
    if (node.name == name) return node.id;
  }
  return std::nullopt;
}

const TensorType& Graph::type_of(Output output) const {
  const Node& producer = node(output.node);
  if (output.index < 0 || static_cast<std::size_t>(output.index) >= producer.outputs.size()) {
    TP_GRAPH_FAIL(producer, "has no output ", output.index, " (it has ", producer.outputs.size(), ")");
  }
  return producer.outputs[static_cast<std::size_t>(output.index)];
}

std::vector<bool> ancestors(const Graph& graph, std::span<const NodeId> roots) {
  std::vector<bool> needed(graph.size(), false);
  for (NodeId root : roots) needed[static_cast<std::size_t>(graph.node(root).id)] = true;
  // Inputs come before their consumers, so one backward sweep reaches every ancestor.
  for (std::size_t id = graph.size(); id-- > 0;) {
    if (!needed[id]) continue;
    const Node& node = graph.nodes()[id];
    for (const Output& input : node.inputs) needed[static_cast<std::size_t>(graph.node(input.node).id)] = true;
    for (NodeId control : node.control_inputs) needed[static_cast<std::size_t>(graph.node(control).id)] = true;
  }
  return needed;
}

// ---- builder.hpp: one Graph::add of a built-in op each
Output placeholder(Graph& graph, std::string_view name, DType dtype, std::vector<std::int64_t> dims) {
  return graph.add("Placeholder", {}, {{"dtype", dtype}, {"shape", std::move(dims)}}, name);
}

Output variable(Graph& graph, std::string_view name, DType dtype, std::vector<std::int64_t> dims) {
  return graph.add("Variable", {}, {{"dtype", dtype}, {"shape", std::move(dims)}}, name);
}

Output fill(Graph& graph, std::string_view name, DType dtype, std::vector<std::int64_t> dims, double value) {
  return graph.add("Fill", {}, {{"dtype", dtype}, {"shape", std::move(dims)}, {"value", value}}, name);
}

}  // namespace tp::graph
