// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/compile/placer.hpp"

#include <map>
#include <numeric>

#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/op_registry.hpp"
#include "tensorpool/ops/kernel_table.hpp"

namespace tp::compile {

namespace {

// Union-find over node ids.
class Groups {
 public:
  explicit Groups(std::size_t size) : parent_(size) { std::iota(parent_.begin(), parent_.end(), 0); }
  std::size_t find(std::size_t node) {
    while (parent_[node] != node) node = parent_[node] = parent_[parent_[node]];
    return node;
  }
  void join(std::size_t first, std::size_t second) { parent_[find(first)] = find(second); }

 private:
  std::vector<std::size_t> parent_;
};

std::string device_names(const std::vector<device::Device*>& devices) {
  std::string names;
  for (const device::Device* device : devices) names += (names.empty() ? "" : ", ") + device->name();
  return names.empty() ? "none" : names;
}

device::Device* resolve(const graph::Node& node, const PlacementOptions& options) {
  for (device::Device* device : options.devices) {
    if (device->name() == node.device) return device;
  }
  TP_THROW(InvalidArgument, "placer", "node '", node.name, "' (", node.op, ") requests device '", node.device,
           "', which this session cannot use; its devices are: ", device_names(options.devices));
}

// The op has a kernel for the device's kind, and that kind's backend registered the tensor kernels that the
// graph kernels call (tensorpool/ops/kernel_table.hpp).
bool has_kernel(const graph::OpDef& op, const device::Device& device) {
  return op.kernels.contains(device.kind()) && ops::kernels::kernels_for(device.kind()) != nullptr;
}

bool is_bound(const graph::Node& node) { return node.op == "Placeholder" || node.op == "Variable"; }

}  // namespace

Placement place(const graph::Graph& graph, std::span<const graph::NodeId> nodes, const PlacementOptions& options) {
  if (options.default_device == nullptr) TP_THROW(InvalidArgument, "placer", "no default device");
  const graph::OpRegistry& registry = graph::OpRegistry::global();
  Groups groups(graph.size());
  std::map<std::string, std::size_t, std::less<>> by_group_name;
  for (graph::NodeId id : nodes) {
    const graph::Node& node = graph.node(id);
    if (!node.colocation_group.empty()) {
      const auto [it, inserted] = by_group_name.emplace(node.colocation_group, static_cast<std::size_t>(id));
      if (!inserted) groups.join(static_cast<std::size_t>(id), it->second);
    }
    const graph::OpDef& op = registry.get(node.op);
    if (op.stateful && !op.collective && node.op != "Variable") {  // a collective's variables span devices
      for (const graph::Output& input : node.inputs) {
        if (graph.node(input.node).op == "Variable")
          groups.join(static_cast<std::size_t>(id), static_cast<std::size_t>(input.node));
      }
    }
  }
  // The device each group requests, and the node that requested it (for conflict messages).
  std::map<std::size_t, graph::NodeId> requested_by;
  for (graph::NodeId id : nodes) {
    const graph::Node& node = graph.node(id);
    if (node.device.empty()) continue;
    const std::size_t group = groups.find(static_cast<std::size_t>(id));
    const auto [it, inserted] = requested_by.emplace(group, id);
    const graph::Node& first = graph.node(it->second);
    if (!inserted && first.device != node.device) {
      TP_THROW(InvalidArgument, "placer", "node '", node.name, "' requests ", node.device, " but node '", first.name,
               "', colocated with it, requests ", first.device, "; colocated nodes must share a device");
    }
  }
  device::Device* cpu = nullptr;
  for (device::Device* device : options.devices) {
    if (device->kind() == device::DeviceKind::cpu && cpu == nullptr) cpu = device;
  }
  Placement placement;
  placement.device_of.assign(graph.size(), nullptr);
  for (graph::NodeId id : nodes) {
    const graph::Node& node = graph.node(id);
    const auto request = requested_by.find(groups.find(static_cast<std::size_t>(id)));
    device::Device* device =
        request != requested_by.end() ? resolve(graph.node(request->second), options) : options.default_device;
    const graph::OpDef& op = registry.get(node.op);
    if (!is_bound(node) && !has_kernel(op, *device)) {
      if (!options.soft_placement || cpu == nullptr || !has_kernel(op, *cpu)) {
        TP_THROW(InvalidArgument, "placer", "node '", node.name, "' (", node.op, ") cannot run on ", device->name(),
                 ": the op has no ", device::to_string(device->kind()), " kernel",
                 options.soft_placement ? " and no cpu kernel either" : "; turn soft placement on to run it on cpu:0");
      }
      placement.log.push_back("[placer] node '" + node.name + "' (" + node.op + ") has no kernel on " + device->name() +
                              "; placed on " + cpu->name());
      device = cpu;
    }
    placement.device_of[static_cast<std::size_t>(id)] = device;
  }
  return placement;
}

}  // namespace tp::compile
