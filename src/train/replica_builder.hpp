// SPDX-License-Identifier: Apache-2.0
#pragma once
// ReplicaBuilder: adds a replica's nodes to the training graph, each named with the replica's prefix
// ("replica_<r>/", or none for a single replica) and placed on its device. The model graph's stages share it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/graph/builder.hpp"
#include "tensorpool/graph/graph.hpp"

namespace tp::train {

struct ReplicaBuilder {
  graph::Graph& graph;
  std::string device;
  std::string prefix;  // "replica_1/" or "" for one replica

  // Replica `replica` of `replicas`, on `device`.
  static ReplicaBuilder of(graph::Graph& graph, const std::vector<std::string>& devices, std::size_t replica) {
    return {graph, devices[replica], devices.size() > 1 ? "replica_" + std::to_string(replica) + "/" : ""};
  }

  graph::Output add(std::string_view op, std::vector<graph::Output> inputs, graph::Attributes attributes,
                    const std::string& name) {
    const graph::Output output = graph.add(op, std::move(inputs), std::move(attributes), prefix + name);
    graph.mutable_node(output.node).device = device;
    return output;
  }
  graph::NodeId add_node(std::string_view op, std::vector<graph::Output> inputs, graph::Attributes attributes,
                         const std::string& name) {
    const graph::NodeId id = graph.add_node(op, std::move(inputs), std::move(attributes), prefix + name);
    graph.mutable_node(id).device = device;
    return id;
  }
  graph::Output variable(const std::string& name, std::vector<std::int64_t> dims, const std::string& initializer,
                         std::uint64_t seed, const std::string& kind) {
    const graph::Output output = graph::variable(graph, prefix + name, DType::f32, std::move(dims));
    graph::Node& node = graph.mutable_node(output.node);
    node.device = device;
    node.attributes["initializer"] = initializer;
    node.attributes["seed"] = static_cast<std::int64_t>(seed);
    node.attributes["kind"] = kind;
    return output;
  }
  // `value` in `dtype`: itself when it already is, else a Cast node named `name`.
  graph::Output cast(graph::Output value, DType dtype, const std::string& name) {
    if (graph.type_of(value).dtype == dtype) return value;
    return add("Cast", {value}, {{"dtype", dtype}}, name);
  }
  graph::Output placeholder(const std::string& name, DType dtype, std::vector<std::int64_t> dims) {
    const graph::Output output = graph::placeholder(graph, prefix + name, dtype, std::move(dims));
    graph.mutable_node(output.node).device = device;
    return output;
  }
};

}  // namespace tp::train
