// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/plan_bytes.hpp"

#include <algorithm>
#include <charconv>
#include <map>
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

// Per-example values have the build-time graph's unknown batch dim; fixed-size gradients are the variables'.
StepTensorKind kind_of(const runtime::PlannedTensor& tensor, const graph::Graph& graph) {
  const std::optional<graph::Output> output = output_of(graph, tensor.name);
  if (!output) return StepTensorKind::other;
  const std::vector<std::int64_t>& dims = graph.type_of(*output).dims;
  const bool per_example = std::any_of(dims.begin(), dims.end(), [](std::int64_t dim) { return dim < 0; });
  const bool gradient = is_gradient(graph.node(output->node));
  if (per_example) return gradient ? StepTensorKind::activation_gradient : StepTensorKind::activation;
  return gradient ? StepTensorKind::weight_gradient : StepTensorKind::other;
}

std::size_t& sum_of(StepBytes& bytes, StepTensorKind kind) {
  switch (kind) {
    case StepTensorKind::activation: return bytes.activation_bytes;
    case StepTensorKind::activation_gradient: return bytes.activation_gradient_bytes;
    case StepTensorKind::weight_gradient: return bytes.weight_gradient_bytes;
    case StepTensorKind::other: break;
  }
  return bytes.other_bytes;
}

std::size_t& live_of(StepBytes& bytes, StepTensorKind kind) {
  switch (kind) {
    case StepTensorKind::activation: return bytes.live_activation_bytes;
    case StepTensorKind::activation_gradient: return bytes.live_activation_gradient_bytes;
    case StepTensorKind::weight_gradient: return bytes.live_weight_gradient_bytes;
    case StepTensorKind::other: break;
  }
  return bytes.live_other_bytes;
}

}  // namespace

std::string_view to_string(StepTensorKind kind) noexcept {
  switch (kind) {
    case StepTensorKind::activation: return "activation";
    case StepTensorKind::activation_gradient: return "activation_gradient";
    case StepTensorKind::weight_gradient: return "weight_gradient";
    case StepTensorKind::other: break;
  }
  return "other";
}

StepBytes step_bytes(const runtime::MemoryPlan& plan, const graph::Graph& graph, std::string_view device) {
  StepBytes bytes;
  bytes.kinds.reserve(plan.tensors.size());
  for (const runtime::PlannedTensor& tensor : plan.tensors) bytes.kinds.push_back(kind_of(tensor, graph));

  // The arena's occupants: tensors with memory of their own, each live from its first step to the last use
  // of it or of any result computed in place in it. In step order, the occupant of an offset when an
  // in-place result starts is the last owner placed there.
  std::vector<std::size_t> order(plan.tensors.size());
  for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
  std::stable_sort(order.begin(), order.end(), [&plan](std::size_t a, std::size_t b) {
    const runtime::PlannedTensor &first = plan.tensors[a], &second = plan.tensors[b];
    return first.first_step != second.first_step ? first.first_step < second.first_step
                                                 : !first.in_place && second.in_place;
  });
  std::vector<std::size_t> owners;
  std::vector<std::size_t> end_step(plan.tensors.size(), 0);
  std::map<std::size_t, std::size_t> owner_at;  // offset -> index of its latest owner
  for (const std::size_t index : order) {
    const runtime::PlannedTensor& tensor = plan.tensors[index];
    if (tensor.device != device) continue;
    if (tensor.in_place || tensor.planned_bytes == 0) {
      const auto owner = owner_at.find(tensor.offset);
      if (tensor.in_place && owner != owner_at.end()) {
        end_step[owner->second] = std::max(end_step[owner->second], tensor.last_step);
      }
      continue;
    }
    sum_of(bytes, bytes.kinds[index]) += tensor.bytes;
    owners.push_back(index);
    end_step[index] = tensor.last_step;
    owner_at[tensor.offset] = index;
  }
  std::size_t best = 0;
  for (std::size_t step = 0; step < std::max<std::size_t>(plan.steps, 1); ++step) {
    std::size_t live = 0;
    for (std::size_t index : owners) {
      if (plan.tensors[index].first_step <= step && step <= end_step[index]) live += plan.tensors[index].planned_bytes;
    }
    if (live > best) {
      best = live;
      bytes.peak_step = step;
    }
  }
  for (std::size_t index : owners) {
    const runtime::PlannedTensor& tensor = plan.tensors[index];
    if (tensor.first_step <= bytes.peak_step && bytes.peak_step <= end_step[index]) {
      live_of(bytes, bytes.kinds[index]) += tensor.planned_bytes;
    }
  }
  return bytes;
}

}  // namespace tp::train
