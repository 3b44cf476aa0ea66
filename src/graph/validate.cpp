// SPDX-License-Identifier: Apache-2.0
// Graph::validate: the checks add() makes as it builds, made again over a whole graph, plus the ones only a
// graph assembled by hand (mutable_node edits) can fail: cycles, forward references, duplicate names, stale
// output types. Checks run in a fixed order so each message names the first offending node.

#include <map>
#include <string>

#include "graph/graph_internal.hpp"
#include "tensorpool/graph/graph.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::graph {

namespace {

// The producers a node reads: data inputs, then control inputs.
std::vector<NodeId> predecessors(const Node& node) {
  std::vector<NodeId> result;
  for (const Output& input : node.inputs) result.push_back(input.node);
  for (NodeId control : node.control_inputs) result.push_back(control);
  return result;
}

void check_identity_and_names(const std::vector<Node>& nodes) {
  std::map<std::string_view, NodeId> first_with_name;
  for (std::size_t index = 0; index < nodes.size(); ++index) {
    const Node& node = nodes[index];
    if (node.id != static_cast<NodeId>(index)) {
      TP_GRAPH_FAIL(node, "has id ", node.id, " but sits at index ", index, " (ids must be dense, in order)");
    }
    if (node.name.empty()) TP_GRAPH_FAIL(node, "has an empty name");
    const auto [entry, inserted] = first_with_name.emplace(node.name, node.id);
    if (!inserted) {
      TP_GRAPH_FAIL(node, "duplicate name: node ", node.id, " and node ", entry->second, " ('", nodes[entry->second].op,
                    "') are both named '", node.name, "'");
    }
  }
}

void check_ops_and_references(const std::vector<Node>& nodes, const OpRegistry& registry) {
  for (const Node& node : nodes) {
    const OpDef* definition = registry.find(node.op);
    if (definition == nullptr) {
      std::string names;
      for (const std::string& name : registry.names()) names += (names.empty() ? "" : ", ") + name;
      TP_GRAPH_FAIL(node, "unknown op '", node.op, "'; registered ops: ", names);
    }
    if (!definition->collective && !definition->variadic &&
        node.inputs.size() != static_cast<std::size_t>(definition->num_inputs)) {
      TP_GRAPH_FAIL(node, "takes ", definition->num_inputs, " input(s) but has ", node.inputs.size());
    }
    if (!definition->collective && node.outputs.size() != static_cast<std::size_t>(definition->num_outputs)) {
      TP_GRAPH_FAIL(node, "has ", node.outputs.size(), " output type(s) but the op declares ", definition->num_outputs);
    }
    for (std::size_t index = 0; index < node.inputs.size(); ++index) {
      const Output input = node.inputs[index];
      if (input.node < 0 || static_cast<std::size_t>(input.node) >= nodes.size()) {
        TP_GRAPH_FAIL(node, "input ", index, " refers to missing node ", input.node, " (the graph has ", nodes.size(),
                      " nodes)");
      }
      const Node& producer = nodes[static_cast<std::size_t>(input.node)];
      // Declared arity, not the stored types: those are checked below, once the structure is known good.
      const OpDef* producer_definition = registry.find(producer.op);
      const int producer_outputs = producer_definition == nullptr    ? 0
                                   : producer_definition->collective ? static_cast<int>(producer.outputs.size())
                                                                     : producer_definition->num_outputs;
      if (input.index < 0 || input.index >= producer_outputs) {
        TP_GRAPH_FAIL(node, "input ", index, " refers to output ", input.index, " of ", detail::label(producer),
                      ", which has ", producer_outputs, " output(s)");
      }
    }
    for (NodeId control : node.control_inputs) {
      if (control < 0 || static_cast<std::size_t>(control) >= nodes.size()) {
        TP_GRAPH_FAIL(node, "control input refers to missing node ", control, " (the graph has ", nodes.size(),
                      " nodes)");
      }
    }
  }
}

// Depth-first search over "reads" edges with the usual three colours; a grey node met again closes a cycle,
// which the message spells out.
void check_acyclic(const std::vector<Node>& nodes) {
  enum class Colour : unsigned char { white, grey, black };
  std::vector<Colour> colour(nodes.size(), Colour::white);
  struct Frame {
    NodeId id;
    std::vector<NodeId> next;
    std::size_t position = 0;
  };
  for (const Node& start : nodes) {
    if (colour[static_cast<std::size_t>(start.id)] != Colour::white) continue;
    std::vector<Frame> stack{{start.id, predecessors(start)}};
    colour[static_cast<std::size_t>(start.id)] = Colour::grey;
    while (!stack.empty()) {
      Frame& frame = stack.back();
      if (frame.position == frame.next.size()) {
        colour[static_cast<std::size_t>(frame.id)] = Colour::black;
        stack.pop_back();
        continue;
      }
      const NodeId next = frame.next[frame.position++];
      if (colour[static_cast<std::size_t>(next)] == Colour::grey) {
        std::string path;
        bool on_cycle = false;
        for (const Frame& entry : stack) {
          on_cycle = on_cycle || entry.id == next;
          if (on_cycle) path += "'" + nodes[static_cast<std::size_t>(entry.id)].name + "' -> ";
        }
        path += "'" + nodes[static_cast<std::size_t>(next)].name + "'";
        TP_GRAPH_FAIL(nodes[static_cast<std::size_t>(next)], "is on a cycle: ", path,
                      " (each arrow points from a node to one of its inputs)");
      }
      if (colour[static_cast<std::size_t>(next)] == Colour::white) {
        colour[static_cast<std::size_t>(next)] = Colour::grey;
        stack.push_back({next, predecessors(nodes[static_cast<std::size_t>(next)])});
      }
    }
  }
}

void check_order(const std::vector<Node>& nodes) {
  for (const Node& node : nodes) {
    for (NodeId producer : predecessors(node)) {
      if (producer >= node.id) {
        TP_GRAPH_FAIL(node, "reads ", detail::label(nodes[static_cast<std::size_t>(producer)]), " (node ", producer,
                      "), which comes later; inputs must be earlier nodes");
      }
    }
  }
}

void check_types(const std::vector<Node>& nodes, const OpRegistry& registry) {
  for (const Node& node : nodes) {
    std::vector<TensorType> input_types;
    for (const Output& input : node.inputs) {
      input_types.push_back(nodes[static_cast<std::size_t>(input.node)].outputs[static_cast<std::size_t>(input.index)]);
    }
    const std::vector<TensorType> inferred = detail::infer_outputs(registry.get(node.op), node, std::move(input_types));
    if (inferred != node.outputs) {
      TP_GRAPH_FAIL(node, "stored output types ", detail::describe_types(node.outputs), " differ from the inferred ",
                    detail::describe_types(inferred));
    }
  }
}

}  // namespace

void Graph::validate() const {
  const OpRegistry& registry = OpRegistry::global();
  check_identity_and_names(nodes_);
  check_ops_and_references(nodes_, registry);
  check_acyclic(nodes_);
  check_order(nodes_);
  check_types(nodes_, registry);
}

}  // namespace tp::graph
