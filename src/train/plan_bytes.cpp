#include "tensorpool/train/plan_bytes.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

namespace tp::train {

namespace {

// "dense/MatMul:0" or a copy "dense/MatMul:0@sim:1" -> the graph output it holds.
std::optional<graph::Output> output_of(const graph::Graph& graph, std::string_view name) {
  name = name.substr(0, name.find('@'));
  const std::size_t colon = name.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  int index = 0;
  const std::string_view digits = name.substr(colon + 1);
  if (std::from_chars(digits.data(), digits.data() + digits.size(), index).ec != std::errc{}) return std::nullopt;
  const std::optional<graph::NodeId> node = graph.find(name.substr(0, colon));
  if (!node || index < 0 || static_cast<std::size_t>(index) >= graph.node(*node).outputs.size()) return std::nullopt;
  return graph::Output{*node, index};
}

// Gradient nodes: autodiff's "gradients/..." (possibly under a replica prefix) and the collectives over them
// (an AllReduce's outputs are the reduced gradients, the bucket and the working space; ZeRO-2's ReduceScatter
// its shards).
bool is_gradient(const graph::Node& node) {
  return node.name.starts_with("gradients/") || node.name.find("/gradients/") != std::string::npos ||
         node.op == "AllReduce" || node.op == "ReduceScatter";
}

}  // namespace

StepBytes step_bytes(const runtime::MemoryPlan& plan, const graph::Graph& graph, std::string_view device) {
  StepBytes bytes;
  for (const runtime::PlannedTensor& tensor : plan.tensors) {
    if (tensor.device != device || tensor.in_place || tensor.planned_bytes == 0) continue;
    const std::optional<graph::Output> output = output_of(graph, tensor.name);
    if (!output) {
      bytes.other_bytes += tensor.bytes;
      continue;
    }
    const graph::Node& node = graph.node(output->node);
    const std::vector<std::int64_t>& dims = graph.type_of(*output).dims;
    const bool per_example = std::any_of(dims.begin(), dims.end(), [](std::int64_t dim) { return dim < 0; });
    const bool gradient = is_gradient(node);
    if (per_example) {
      (gradient ? bytes.activation_gradient_bytes : bytes.activation_bytes) += tensor.bytes;
    } else {
      (gradient ? bytes.weight_gradient_bytes : bytes.other_bytes) += tensor.bytes;
    }
  }
  return bytes;
}

}  // namespace tp::train
