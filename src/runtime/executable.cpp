// SPDX-License-Identifier: Apache-2.0
#include "runtime/executable.hpp"

#include <algorithm>
#include <charconv>

#include "runtime/step_dependencies.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/op_registry.hpp"
#include "tensorpool/graph/type_inference.hpp"

namespace tp::runtime {

graph::Output resolve_output(const graph::Graph& graph, std::string_view text) {
  const std::size_t colon = text.rfind(':');
  std::string_view node_name = text;
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view index_text = text.substr(colon + 1);
    const auto [end, error] = std::from_chars(index_text.data(), index_text.data() + index_text.size(), index);
    if (error == std::errc() && end == index_text.data() + index_text.size())
      node_name = text.substr(0, colon);
    else
      index = 0;
  }
  const std::optional<graph::NodeId> node = graph.find(node_name);
  if (!node) TP_THROW(InvalidArgument, "session", "fetch '", text, "' names no node of the graph");
  const graph::Node& found = graph.node(*node);
  if (index < 0 || index >= static_cast<int>(found.outputs.size())) {
    TP_THROW(InvalidArgument, "session", "fetch '", text, "': node '", found.name, "' (", found.op, ") has ",
             found.outputs.size(), " outputs");
  }
  return {*node, index};
}

namespace {

// Node order is a topological order (a node refers only to earlier nodes). A collective over computed values
// (a gradient bucket's AllReduce) moves up to just after the last of its inputs, so that it is launched as
// soon as they exist and the rest of the backward pass can overlap it, instead of after every node built
// before it. Collectives that read variables stay put: where they sit relative to the variables' updates is
// what orders them (the ZeRO AllGather reads the updated parameters). Relative order among the hoisted
// collectives is kept, the same on every worker, and none moves above a stateful op (an update).
void hoist_collectives(const graph::Graph& graph, std::vector<graph::NodeId>& schedule) {
  const graph::OpRegistry& registry = graph::OpRegistry::global();
  for (std::size_t position = 0; position < schedule.size(); ++position) {
    const graph::Node& node = graph.node(schedule[position]);
    if (!registry.find(node.op)->collective) continue;
    const bool reads_variable = std::any_of(node.inputs.begin(), node.inputs.end(), [&](graph::Output input) {
      return graph.node(input.node).op == "Variable";
    });
    if (reads_variable) continue;
    std::size_t target = 0;  // just after its last input and any earlier collective or stateful op
    for (std::size_t earlier = 0; earlier < position; ++earlier) {
      const graph::NodeId id = schedule[earlier];
      const bool input =
          std::any_of(node.inputs.begin(), node.inputs.end(), [&](graph::Output in) { return in.node == id; }) ||
          std::find(node.control_inputs.begin(), node.control_inputs.end(), id) != node.control_inputs.end() ||
          registry.find(graph.node(id).op)->collective || registry.find(graph.node(id).op)->stateful;
      if (input) target = earlier + 1;
    }
    std::rotate(schedule.begin() + static_cast<std::ptrdiff_t>(target),
                schedule.begin() + static_cast<std::ptrdiff_t>(position),
                schedule.begin() + static_cast<std::ptrdiff_t>(position) + 1);
  }
}

// The kernel `node` runs on `device`: bound to the node when the op binds its kernels (OpDef::bind_kernel).
// The placer put the node on a device whose kind has one; a collective runs on its first input's device.
std::function<void(graph::KernelContext&)> kernel_of(const graph::OpDef& op, const graph::Node& node,
                                                     const device::Device& device) {
  const auto found = op.kernels.find(device.kind());
  if (found == op.kernels.end()) {
    TP_THROW(DeviceError, "session", op.name, " '", node.name, "' runs on ", device.name(), ", but ", op.name,
             " has no kernel for ", device::to_string(device.kind()), " devices");
  }
  if (op.bind_kernel) return op.bind_kernel(node, device.kind());
  return found->second;
}

// Whether `device` allocates fetched results from its shared memory: it has one, and its MemoryConfig lists
// AllocationKind::fetched among shared_kinds (the default). A host device's memory is host memory already.
bool fetches_into_shared_memory(const device::Device& device) {
  if (device.shared_memory() == nullptr) return false;
  const std::vector<memory::AllocationKind>& kinds = device.memory().config().shared_kinds;
  return std::find(kinds.begin(), kinds.end(), memory::AllocationKind::fetched) != kinds.end();
}

std::string value_name(const graph::Graph& graph, graph::Output output) {
  return graph.node(output.node).name + ":" + std::to_string(output.index);
}

class Builder {
 public:
  Builder(const graph::Graph& graph, Executable& executable, const std::vector<std::vector<graph::TensorType>>& types)
      : graph_(graph), executable_(executable), types_(types) {}

  // The value holding `output` on `device`, adding a copy step (reading the producer's value) when needed.
  std::size_t value_on(graph::Output output, device::Device* device) {
    const auto found = where_.find({output, device});
    if (found != where_.end()) return found->second;
    const std::size_t source = where_.at({output, home_.at(output)});
    const std::size_t copy = add_value(output, device, "@" + device->name());
    Step step{.kind = Step::Kind::copy, .node = output.node, .inputs = {source}, .outputs = {copy}, .device = device};
    add_step(std::move(step));
    return copy;
  }

  std::size_t add_value(graph::Output output, device::Device* device, const std::string& suffix = {}) {
    const graph::Node& node = graph_.node(output.node);
    const graph::TensorType& type =
        types_[static_cast<std::size_t>(output.node)][static_cast<std::size_t>(output.index)];
    Value value;
    value.name = value_name(graph_, output) + suffix;
    value.op = node.op;
    value.output = output;
    value.device = device;
    value.shape = type.shape();
    value.dtype = type.dtype;
    value.variable = node.op == "Variable" && suffix.empty();
    value.first_step = executable_.steps.size();
    value.last_step = value.first_step;
    executable_.values.push_back(std::move(value));
    const std::size_t index = executable_.values.size() - 1;
    where_[{output, device}] = index;
    if (suffix.empty()) home_[output] = device;
    return index;
  }

  device::Device* home(graph::Output output) const { return home_.at(output); }

  void add_step(Step step) {
    for (std::size_t input : step.inputs) {
      Value& value = executable_.values[input];
      value.last_step = executable_.steps.size();
      if (value.readers.empty() || value.readers.back() != value.last_step) value.readers.push_back(value.last_step);
    }
    executable_.steps.push_back(std::move(step));
  }

 private:
  const graph::Graph& graph_;
  Executable& executable_;
  const std::vector<std::vector<graph::TensorType>>& types_;
  std::map<std::pair<graph::Output, device::Device*>, std::size_t> where_;
  std::map<graph::Output, device::Device*> home_;  // where each output is produced
};

void plan_layouts(Executable& executable) {
  std::map<device::Device*, std::size_t> layout_of;
  for (std::size_t index = 0; index < executable.values.size(); ++index) {
    const Value& value = executable.values[index];
    if (value.variable || value.shared || value.fed_in_place) continue;
    auto [it, inserted] = layout_of.emplace(value.device, executable.layouts.size());
    if (inserted) executable.layouts.push_back({value.device, {}, {}, nullptr});
    executable.layouts[it->second].values.push_back(index);
  }
  for (DeviceLayout& layout : executable.layouts) {
    std::map<std::size_t, std::size_t> request_of;  // value index -> request index
    std::vector<compile::BufferRequest> requests;
    for (std::size_t value_index : layout.values) {
      const Value& value = executable.values[value_index];
      compile::BufferRequest request{value.name, value.bytes(), value.first_step, value.last_step, -1};
      if (value.share_with >= 0 && request_of.contains(static_cast<std::size_t>(value.share_with))) {
        request.share_with = static_cast<std::int64_t>(request_of.at(static_cast<std::size_t>(value.share_with)));
      }
      request_of[value_index] = requests.size();
      requests.push_back(std::move(request));
    }
    layout.plan = compile::plan_static(requests);
    for (std::size_t request = 0; request < layout.values.size(); ++request) {
      Value& value = executable.values[layout.values[request]];
      value.offset = layout.plan.buffers[request].offset;
      value.in_place = layout.plan.buffers[request].shared;
    }
  }
}

}  // namespace

std::unique_ptr<Executable> prepare(const graph::Graph& graph,
                                    const std::map<std::string, graph::TensorType, std::less<>>& feeds,
                                    const std::map<std::string, std::string, std::less<>>& fed_on,
                                    const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                                    const compile::PlacementOptions& placement_options) {
  auto executable = std::make_unique<Executable>();
  std::vector<graph::Output> fetch_outputs;
  std::vector<graph::NodeId> roots;
  for (const std::string& fetch : fetches) {
    fetch_outputs.push_back(resolve_output(graph, fetch));
    roots.push_back(fetch_outputs.back().node);
  }
  for (const std::string& target : targets) {
    const std::optional<graph::NodeId> node = graph.find(target);
    if (!node) TP_THROW(InvalidArgument, "session", "target '", target, "' names no node of the graph");
    roots.push_back(*node);
  }
  if (roots.empty()) TP_THROW(InvalidArgument, "session", "run() needs at least one fetch or target");
  const std::vector<bool> needed = graph::ancestors(graph, roots);

  std::map<graph::NodeId, graph::TensorType> placeholder_types;
  for (const auto& [name, type] : feeds) {
    const std::optional<graph::NodeId> node = graph.find(name);
    if (!node || graph.node(*node).op != "Placeholder") {
      TP_THROW(InvalidArgument, "session", "feed '", name, "' names no Placeholder of the graph");
    }
    if (needed[static_cast<std::size_t>(*node)]) placeholder_types[*node] = type;
  }
  const auto types = graph::infer_types(graph, placeholder_types, needed);

  std::vector<graph::NodeId> schedule;
  for (graph::NodeId id = 0; id < static_cast<graph::NodeId>(graph.size()); ++id) {
    if (needed[static_cast<std::size_t>(id)]) schedule.push_back(id);
  }
  hoist_collectives(graph, schedule);
  const compile::Placement placement = compile::place(graph, schedule, placement_options);
  executable->placement_log = placement.log;
  Builder builder(graph, *executable, types);
  const graph::OpRegistry& registry = graph::OpRegistry::global();

  // Feeds first (they are copied in at the start of the step), variables bound, then the kernels in order.
  for (graph::NodeId id : schedule) {
    const graph::Node& node = graph.node(id);
    device::Device* device = placement.device_of[static_cast<std::size_t>(id)];
    if (node.op == "Placeholder") {
      const std::size_t value = builder.add_value({id, 0}, device);
      const auto on = fed_on.find(node.name);
      // On a host device the feed stays a copy into its slot, as planned there before.
      executable->values[value].fed_in_place =
          on != fed_on.end() && on->second == device->name() && !device->host_accessible();
      executable->feeds[node.name] = value;
      builder.add_step({.kind = Step::Kind::feed, .node = id, .outputs = {value}, .device = device});
    } else if (node.op == "Variable") {
      builder.add_value({id, 0}, device);
    }
  }
  for (graph::NodeId id : schedule) {
    const graph::Node& node = graph.node(id);
    if (node.op == "Placeholder" || node.op == "Variable") continue;
    const graph::OpDef& op = registry.get(node.op);
    if (op.collective) {  // inputs stay on their devices; output j on the device of input j % inputs
      Step step{.kind = Step::Kind::kernel, .node = id};
      for (const graph::Output& input : node.inputs) {
        step.inputs.push_back(builder.value_on(input, placement.device_of[static_cast<std::size_t>(input.node)]));
      }
      for (std::size_t output = 0; output < node.outputs.size(); ++output) {
        device::Device* device = executable->values[step.inputs[output % step.inputs.size()]].device;
        step.outputs.push_back(builder.add_value({id, static_cast<int>(output)}, device));
      }
      step.device = executable->values[step.inputs[0]].device;
      step.kernel = kernel_of(op, node, *step.device);
      builder.add_step(std::move(step));
      continue;
    }
    device::Device* device = placement.device_of[static_cast<std::size_t>(id)];
    Step step{.kind = Step::Kind::kernel, .node = id, .device = device, .kernel = kernel_of(op, node, *device)};
    for (const graph::Output& input : node.inputs) step.inputs.push_back(builder.value_on(input, device));
    for (int output = 0; output < static_cast<int>(node.outputs.size()); ++output) {
      step.outputs.push_back(builder.add_value({id, output}, device));
    }
    if (op.may_reuse_input && !step.inputs.empty() && !step.outputs.empty()) {
      const Value& input = executable->values[step.inputs[0]];
      const Value& output = executable->values[step.outputs[0]];
      if (!input.variable && input.device == output.device && input.dtype == output.dtype) {
        executable->values[step.outputs[0]].share_with = static_cast<std::int64_t>(step.inputs[0]);
      }
    }
    builder.add_step(std::move(step));
  }
  for (const graph::Output& output : fetch_outputs) {
    const std::size_t value = builder.value_on(output, builder.home(output));
    Value& fetched = executable->values[value];
    fetched.fetched = true;
    // A fetched feed bound in place is read from the fed tensor itself.
    fetched.shared = !fetched.variable && !fetched.fed_in_place && fetches_into_shared_memory(*fetched.device);
    fetched.last_step = executable->steps.size();
    executable->fetches.push_back(value);
  }
  plan_layouts(*executable);
  add_dependencies(graph, *executable);
  return executable;
}

}  // namespace tp::runtime
