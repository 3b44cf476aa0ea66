// SPDX-License-Identifier: Apache-2.0
#include "train/update_grouping.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "tensorpool/device/device_id.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/ops/kernel_table.hpp"

namespace tp::train {

namespace {

// What requests must share to form one node: op, device, dtype and hyperparameters (the slice aside).
using GroupKey = std::tuple<std::string, std::string, DType, graph::Attributes>;

// The request's group key, or none when it stays a single node (conditional, or a 16-bit gradient).
std::optional<GroupKey> key_of(const graph::Graph& g, const UpdateRequest& request) {
  if (request.op != "ApplyAdam" && request.op != "ApplySgd") return std::nullopt;
  const DType dtype = g.type_of(request.inputs[0]).dtype;
  if (g.type_of(request.inputs[1]).dtype != dtype) return std::nullopt;
  graph::Attributes hyperparameters = request.attributes;
  hyperparameters.erase("slice");
  return GroupKey{request.op, request.device, dtype, std::move(hyperparameters)};
}

graph::NodeId add_single(graph::Graph& g, const UpdateRequest& request) {
  const graph::NodeId id = g.add_node(request.op, request.inputs, request.attributes, request.name);
  g.mutable_node(id).device = request.device;
  return id;
}

// One multi-tensor node for `members` (indices into requests, >= 2, one key): input lists var..., grad...,
// slots..., and `slices` when any member has a slice (a whole member's is [0, n, 0, 0]).
graph::NodeId add_group(graph::Graph& g, const std::vector<UpdateRequest>& requests,
                        const std::vector<std::size_t>& members) {
  const UpdateRequest& first = requests[members.front()];
  const std::size_t lists = first.inputs.size();
  std::vector<graph::Output> inputs;
  for (std::size_t list = 0; list < lists; ++list) {
    for (std::size_t member : members) inputs.push_back(requests[member].inputs[list]);
  }
  graph::Attributes attributes = first.attributes;
  attributes.erase("slice");
  bool sliced = false;
  std::vector<std::int64_t> slices;
  for (std::size_t member : members) {
    const UpdateRequest& request = requests[member];
    if (request.attributes.contains("slice")) {
      sliced = true;
      const std::vector<std::int64_t> slice = std::get<std::vector<std::int64_t>>(request.attributes.at("slice"));
      slices.insert(slices.end(), slice.begin(), slice.end());
    } else {
      const auto elements = static_cast<std::int64_t>(g.type_of(request.inputs[0]).shape().num_elements());
      slices.insert(slices.end(), {0, elements, 0, 0});
    }
  }
  if (sliced) attributes["slices"] = slices;
  const graph::NodeId id = g.add_node(first.op + "Multi", inputs, attributes, first.prefix + first.op + "Multi");
  g.mutable_node(id).device = first.device;
  return id;
}

}  // namespace

std::vector<std::string> add_updates(graph::Graph& g, const std::vector<UpdateRequest>& requests, bool group) {
  std::map<GroupKey, std::vector<std::size_t>> groups;
  std::vector<std::optional<GroupKey>> keys(requests.size());
  for (std::size_t index = 0; group && index < requests.size(); ++index) {
    keys[index] = key_of(g, requests[index]);
    if (keys[index]) groups[*keys[index]].push_back(index);
  }
  std::vector<std::string> names;
  for (std::size_t index = 0; index < requests.size(); ++index) {
    if (!keys[index] || groups.at(*keys[index]).size() < 2) {
      names.push_back(g.node(add_single(g, requests[index])).name);
    } else if (groups.at(*keys[index]).front() == index) {  // the group's node where its first member was
      names.push_back(g.node(add_group(g, requests, groups.at(*keys[index]))).name);
    }
  }
  return names;
}

bool multi_tensor_updates_supported(const std::vector<std::string>& devices) {
  for (const std::string& name : devices) {
    const ops::kernels::KernelTable* table = ops::kernels::kernels_for(device::parse_device_id(name).kind);
    if (table != nullptr && (table->sgd_multi == nullptr || table->adam_multi == nullptr)) return false;
  }
  return true;
}

}  // namespace tp::train
