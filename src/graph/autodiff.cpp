// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/graph/autodiff.hpp"

#include <map>
#include <set>
#include <string>

#include "graph/graph_internal.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::graph {

namespace {

// Gives every node added since `first` the forward node's placement (also those a gradient function added
// with Graph::add directly rather than through GradientContext::add).
void place_like(Graph& graph, NodeId first, const Node& forward) {
  for (auto id = static_cast<std::size_t>(first); id < graph.size(); ++id) {
    graph.set_placement(static_cast<NodeId>(id), forward.device, forward.colocation_group);
  }
}

std::string describe(const Graph& graph, Output output) {
  const Node& node = graph.node(output.node);
  return detail::label(node) + ":" + std::to_string(output.index) + " (" + graph.type_of(output).to_string() + ")";
}

// The summed gradients so far, per forward output; a second contribution is added with AddN.
class Accumulator {
 public:
  explicit Accumulator(Graph& graph) : graph_(graph) {}

  void add(Output forward, Output gradient) {
    const auto [entry, inserted] = sums_.emplace(forward, gradient);
    if (inserted) return;
    const Node producer = graph_.node(forward.node);
    GradientContext context{graph_, producer, {}};
    const NodeId first = static_cast<NodeId>(graph_.size());
    entry->second = context.add("AddN", {entry->second, gradient});
    place_like(graph_, first, producer);
  }
  std::optional<Output> find(Output forward) const {
    const auto entry = sums_.find(forward);
    return entry == sums_.end() ? std::nullopt : std::optional<Output>(entry->second);
  }

 private:
  Graph& graph_;
  std::map<Output, Output> sums_;
};

}  // namespace

Output GradientContext::add(std::string_view op, std::vector<Output> inputs, Attributes attributes) {
  const std::string name = "gradients/" + node.name + "/" + std::string(op);
  const NodeId id = graph.add_node(op, std::move(inputs), std::move(attributes), name);
  graph.set_placement(id, node.device, node.colocation_group);
  return Output{id, 0};
}

std::vector<std::optional<Output>> gradients(Graph& graph, Output y, std::span<const Output> xs) {
  const TensorType y_type = graph.type_of(y);
  if (!y_type.dims.empty() || !is_floating(y_type.dtype)) {
    TP_GRAPH_FAIL(graph.node(y.node), "gradients: y = ", describe(graph, y),
                  " must be a floating scalar (shape []); reduce it first (Sum, Mean)");
  }
  const std::set<Output> x_set(xs.begin(), xs.end());
  for (const Output& x : xs) (void)graph.type_of(x);  // throws naming the node for a bad output

  // depends[id]: some input of node id carries data computed from an x. Inputs precede consumers.
  const std::size_t count = graph.size();
  std::vector<bool> depends(count, false);
  const auto carries_x = [&](Output output) {
    return x_set.count(output) > 0 || depends[static_cast<std::size_t>(output.node)];
  };
  for (const Node& node : graph.nodes()) {
    for (const Output& input : node.inputs) {
      if (carries_x(input)) depends[static_cast<std::size_t>(node.id)] = true;
    }
  }
  // needed[id]: y's value depends on node id through data inputs.
  std::vector<bool> needed(count, false);
  needed[static_cast<std::size_t>(y.node)] = true;
  for (auto id = static_cast<std::size_t>(y.node) + 1; id-- > 0;) {
    if (!needed[id]) continue;
    for (const Output& input : graph.nodes()[id].inputs) needed[static_cast<std::size_t>(input.node)] = true;
  }

  Accumulator sums(graph);
  if (carries_x(y)) {
    const Node y_node = graph.node(y.node);
    GradientContext seed_context{graph, y_node, {}};
    sums.add(y, seed_context.add("Fill", {},
                                 {{"dtype", y_type.dtype}, {"shape", std::vector<std::int64_t>{}}, {"value", 1.0}}));
  }
  const OpRegistry& registry = OpRegistry::global();
  for (auto id = static_cast<std::size_t>(y.node) + 1; id-- > 0;) {
    if (!needed[id] || !depends[id]) continue;
    const Node node = graph.nodes()[id];  // a copy: gradient functions add nodes, which may move storage
    std::vector<std::optional<Output>> output_gradients;
    bool any = false;
    for (std::size_t index = 0; index < node.outputs.size(); ++index) {
      output_gradients.push_back(sums.find(Output{node.id, static_cast<int>(index)}));
      any = any || output_gradients.back().has_value();
    }
    if (!any) continue;
    const OpDef& definition = registry.get(node.op);
    if (!definition.gradient) {
      TP_GRAPH_FAIL(node, "op '", node.op, "' is not differentiable, but it lies on a path from the requested xs to ",
                    describe(graph, y));
    }
    std::vector<bool> wanted;
    for (const Output& input : node.inputs) wanted.push_back(carries_x(input));
    GradientContext context{graph, node, std::move(output_gradients), wanted};
    const NodeId first = static_cast<NodeId>(graph.size());
    const std::vector<std::optional<Output>> input_gradients = definition.gradient(context);
    place_like(graph, first, node);
    if (input_gradients.size() != node.inputs.size()) {
      TP_GRAPH_FAIL(node, "the gradient function returned ", input_gradients.size(), " gradients for ",
                    node.inputs.size(), " inputs (a bug in the op's definition)");
    }
    for (std::size_t index = 0; index < node.inputs.size(); ++index) {
      if (wanted[index] && input_gradients[index].has_value()) sums.add(node.inputs[index], *input_gradients[index]);
    }
  }

  std::vector<std::optional<Output>> result;
  for (const Output& x : xs) result.push_back(sums.find(x));
  return result;
}

}  // namespace tp::graph
