// SPDX-License-Identifier: Apache-2.0
#pragma once
// The placer: which device runs each node. Rules, in order:
//   1. Colocation: nodes that share a colocation_group, and a stateful op with the Variables it updates,
//      form one group and land on one device.
//   2. Constraints: a group takes the device its members request (`Node::device`); two different requests in
//      one group are an error naming both nodes and devices. A group without requests takes the default
//      device.
//   3. Kernels: a node whose op has no kernel for its device's kind goes to cpu:0 with one log line when soft
//      placement is on, or fails naming the node, the device and the reason when it is off. Placeholders and
//      Variables have no kernels (the executor binds them) and stay where their group is.
// Every error is a tp::InvalidArgument naming the node.

#include <span>
#include <string>
#include <vector>

#include "tensorpool/device/device.hpp"
#include "tensorpool/graph/graph.hpp"

namespace tp::compile {

struct PlacementOptions {
  std::vector<device::Device*> devices;  // the devices the session may use (cpu:0 among them for soft placement)
  device::Device* default_device = nullptr;
  bool soft_placement = true;
};

struct Placement {
  std::vector<device::Device*> device_of;  // indexed by NodeId; null for nodes not asked about
  std::vector<std::string> log;            // one line per soft placement
};

[[nodiscard]] Placement place(const graph::Graph& graph, std::span<const graph::NodeId> nodes,
                              const PlacementOptions& options);

}  // namespace tp::compile
