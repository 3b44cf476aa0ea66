// SPDX-License-Identifier: Apache-2.0
#include "train/replicated_update.hpp"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>

#include "tensorpool/device/device_id.hpp"
#include "tensorpool/distribute/collective_ops.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "train/replica_builder.hpp"
#include "train/update_grouping.hpp"

namespace tp::train {

namespace {

// Where a parameter's update on one replica reads its reduced gradient (the gradient itself on one device), at
// which element.
struct Reduced {
  graph::Output tensor;
  std::int64_t offset = 0;
  bool whole = true;  // the tensor is this parameter's gradient alone
};

using ReducedGradients = std::vector<std::vector<Reduced>>;  // [parameter][replica]

// Per gradient dtype: lists of parameter indices, buckets of at most bucket_bytes filled from the last back.
std::map<DType, std::vector<std::vector<std::size_t>>> fill_buckets(const ModelSpec& spec, const graph::Graph& g,
                                                                    const GradientStage& stage) {
  std::map<DType, std::vector<std::vector<std::size_t>>> buckets;
  std::map<DType, std::int64_t> filled;  // bytes of each dtype's last bucket
  for (std::size_t index = stage.parameters[0].size(); index-- > 0;) {
    const graph::TensorType& type = g.type_of(*stage.gradients[0][index]);
    const auto bytes = static_cast<std::int64_t>(byte_size(type.shape(), type.dtype));
    std::vector<std::vector<std::size_t>>& list = buckets[type.dtype];
    if (list.empty() || filled[type.dtype] + bytes > spec.bucket_bytes) {
      list.emplace_back();
      filled[type.dtype] = 0;
    }
    list.back().push_back(index);
    filled[type.dtype] += bytes;
  }
  return buckets;
}

// One AllReduce per bucket.
ReducedGradients all_reduce_buckets(const ModelSpec& spec, graph::Graph& g, std::size_t replicas,
                                    const GradientStage& stage) {
  ReducedGradients reduced(stage.parameters[0].size());
  const std::map<DType, std::vector<std::vector<std::size_t>>> buckets = fill_buckets(spec, g, stage);
  for (const auto& [dtype, list] : buckets) {
    for (std::size_t bucket = 0; bucket < list.size(); ++bucket) {
      const std::vector<std::size_t>& indices = list[bucket];
      std::vector<graph::Output> inputs;  // parameter-major: gradient p of replica r is input p * R + r
      for (std::size_t index : indices) {
        for (std::size_t replica = 0; replica < replicas; ++replica) inputs.push_back(*stage.gradients[replica][index]);
      }
      std::string name =
          buckets.size() == 1 ? "all_reduce/gradients" : "all_reduce/gradients_" + std::string(name_of(dtype));
      if (list.size() > 1) name += "_bucket_" + std::to_string(bucket);
      const bool packed = indices.size() > 1;
      const graph::NodeId all_reduce = g.add_node("AllReduce", inputs,
                                                  {{"algorithm", std::string(name_of(spec.all_reduce))},
                                                   {"replicas", static_cast<std::int64_t>(replicas)},
                                                   {"unpack", !packed}},
                                                  name);
      std::int64_t offset = 0;
      for (std::size_t position = 0; position < indices.size(); ++position) {
        for (std::size_t replica = 0; replica < replicas; ++replica) {
          const auto output = static_cast<int>(packed ? indices.size() * replicas + replica : replica);
          reduced[indices[position]].push_back({{all_reduce, output}, offset, !packed});
        }
        const graph::TensorType& type = g.type_of(*stage.gradients[0][indices[position]]);
        offset += static_cast<std::int64_t>(type.shape().num_elements());
      }
    }
  }
  return reduced;
}

// Loss scaling: per replica, the product of AllFinite over its reduced gradients (so every replica takes the
// same decision) divided by the scale: 0 skips the updates, else it unscales the gradients. None without it.
std::vector<std::optional<graph::Output>> update_factors(const std::vector<std::string>& devices,
                                                         const GradientStage& stage, const ReducedGradients& reduced,
                                                         ModelGraph& model) {
  std::vector<std::optional<graph::Output>> apply(devices.size());
  for (std::size_t replica = 0; stage.loss_scale && replica < devices.size(); ++replica) {
    ReplicaBuilder builder = ReplicaBuilder::of(model.graph, devices, replica);
    std::optional<graph::Output> finite;
    std::set<graph::Output> checked;  // each reduced bucket once
    for (const auto& gradient : reduced) {
      if (!checked.insert(gradient[replica].tensor).second) continue;
      const graph::Output flag = builder.add("AllFinite", {gradient[replica].tensor}, {}, "loss_scale/AllFinite");
      finite = finite ? builder.add("Mul", {*finite, flag}, {}, "loss_scale/all_finite") : flag;
    }
    model.replicas[replica].all_finite = model.graph.node(finite->node).name;
    apply[replica] = builder.add("Div", {*finite, *stage.loss_scale}, {}, "loss_scale/update_factor");
  }
  return apply;
}

// The optimizer's update of one parameter on one replica, with its optimizer-state variables (added now).
UpdateRequest update_request(const ModelSpec& spec, ReplicaBuilder& builder, graph::Output parameter,
                             const Reduced& gradient, std::optional<graph::Output> apply,
                             std::vector<std::string>& variables) {
  graph::Graph& g = builder.graph;
  const std::string base = g.node(parameter.node).name.substr(builder.prefix.size());
  const std::vector<std::int64_t> dims = g.type_of(parameter).dims;
  graph::Attributes attributes;  // where the update reads its gradient in a bucket
  if (!gradient.whole) {
    attributes["slice"] = std::vector<std::int64_t>{0, g.type_of(parameter).shape().num_elements(), gradient.offset, 0};
  }
  UpdateRequest request{.device = builder.device, .prefix = builder.prefix};
  if (const Adam* adam = std::get_if<Adam>(&spec.optimizer)) {
    const graph::Output m = builder.variable(base + "/adam_m", dims, "zeros", 0, "optimizer_state");
    const graph::Output v = builder.variable(base + "/adam_v", dims, "zeros", 0, "optimizer_state");
    variables.push_back(g.node(m.node).name);
    variables.push_back(g.node(v.node).name);
    std::vector<graph::Output> inputs{parameter, gradient.tensor, m, v};
    if (apply) inputs.push_back(*apply);
    attributes.insert({{"learning_rate", adam->learning_rate},
                       {"beta1", adam->beta1},
                       {"beta2", adam->beta2},
                       {"epsilon", adam->epsilon}});
    request.op = apply ? "ApplyAdamIf" : "ApplyAdam";
    request.inputs = std::move(inputs);
    request.name = builder.prefix + base + "/ApplyAdam";
  } else {
    const Sgd& sgd = std::get<Sgd>(spec.optimizer);
    const graph::Output velocity = builder.variable(base + "/momentum", dims, "zeros", 0, "optimizer_state");
    variables.push_back(g.node(velocity.node).name);
    std::vector<graph::Output> inputs{parameter, gradient.tensor, velocity};
    if (apply) inputs.push_back(*apply);
    attributes.insert({{"learning_rate", sgd.learning_rate}, {"momentum", sgd.momentum}, {"nesterov", sgd.nesterov}});
    request.op = apply ? "ApplySgdIf" : "ApplySgd";
    request.inputs = std::move(inputs);
    request.name = builder.prefix + base + "/ApplySgd";
  }
  request.attributes = std::move(attributes);
  return request;
}

// The Cast node of `parameter` to `dtype`, if the graph has one.
std::optional<graph::NodeId> cast_of(const graph::Graph& g, graph::Output parameter, DType dtype) {
  for (const graph::Node& node : g.nodes()) {
    if (node.op == "Cast" && node.inputs.size() == 1 && node.inputs[0] == parameter &&
        graph::attribute_dtype(node, "dtype") == dtype) {
      return node.id;
    }
  }
  return std::nullopt;
}

// Per parameter and replica (parameter-major), the Cast of a float32 parameter to its 16-bit gradient's dtype
// (the layer's compute copy); empty unless every parameter has one.
std::vector<graph::NodeId> compute_copy_casts(const GradientStage& stage, const graph::Graph& g) {
  std::vector<graph::NodeId> casts;
  for (std::size_t index = 0; index < stage.parameters[0].size(); ++index) {
    for (std::size_t replica = 0; replica < stage.parameters.size(); ++replica) {
      const graph::Output parameter = stage.parameters[replica][index];
      const std::optional<graph::Output>& gradient = stage.gradients[replica][index];
      if (!gradient || g.type_of(parameter).dtype != DType::f32) return {};
      const DType dtype = g.type_of(*gradient).dtype;
      if (dtype != DType::f16 && dtype != DType::bf16) return {};
      const std::optional<graph::NodeId> cast = cast_of(g, parameter, dtype);
      if (!cast) return {};
      casts.push_back(*cast);
    }
  }
  return casts;
}

// One replica computing in 16 bits, with Adam and no loss scaling, on a device of the CPU kernels (cpu, sim), its
// update not across workers: AllReduceAdam over the one replica (nothing to sum: the plain ApplyAdam's bits)
// keeps persistent compute copies, where ApplyAdam would leave the layers to cast every variable each step.
bool keeps_compute_copies_alone(const ModelSpec& spec, const std::vector<std::string>& devices,
                                const GradientStage& stage, const graph::Graph& g) {
  if (!spec.fuse_update || !std::holds_alternative<Adam>(spec.optimizer) || stage.loss_scale) return false;
  if (devices.size() != 1 || spec.workers != 1 || spec.all_reduce == AllReduce::mpi) return false;
  const device::DeviceKind kind = device::parse_device_id(devices[0]).kind;
  if (kind != device::DeviceKind::cpu && kind != device::DeviceKind::sim) return false;
  return !compute_copy_casts(stage, g).empty();
}

// One AllReduceAdam node for every parameter of every replica; the slots are the variables add_update makes,
// in the same order and with the same names (a checkpoint of either path restores into the other). The compute
// copies are no checkpoint's: they are derived from the parameters.
void add_fused_updates(const std::vector<std::string>& devices, const GradientStage& stage, const Adam& adam,
                       ModelGraph& model) {
  const std::size_t replicas = devices.size();
  const std::size_t parameters = stage.parameters[0].size();
  std::vector<graph::Output> gradients, variables, m, v;  // each parameter-major: p * R + r
  for (std::size_t index = 0; index < parameters; ++index) {
    for (std::size_t replica = 0; replica < replicas; ++replica) {
      ReplicaBuilder builder = ReplicaBuilder::of(model.graph, devices, replica);
      const graph::Output parameter = stage.parameters[replica][index];
      const std::string base = model.graph.node(parameter.node).name.substr(builder.prefix.size());
      const std::vector<std::int64_t> dims = model.graph.type_of(parameter).dims;
      gradients.push_back(*stage.gradients[replica][index]);
      variables.push_back(parameter);
      m.push_back(builder.variable(base + "/adam_m", dims, "zeros", 0, "optimizer_state"));
      v.push_back(builder.variable(base + "/adam_v", dims, "zeros", 0, "optimizer_state"));
      model.variables[replica].push_back(model.graph.node(m.back().node).name);
      model.variables[replica].push_back(model.graph.node(v.back().node).name);
    }
  }
  std::vector<graph::Output> copies = persistent_compute_copies(stage, model);
  std::vector<graph::Output> inputs = gradients;
  for (const std::vector<graph::Output>* group : {&variables, &m, &v, &copies})
    inputs.insert(inputs.end(), group->begin(), group->end());
  const graph::NodeId update = model.graph.add_node("AllReduceAdam", inputs,
                                                    {{"replicas", static_cast<std::int64_t>(replicas)},
                                                     {"compute_copies", !copies.empty()},
                                                     {"learning_rate", adam.learning_rate},
                                                     {"beta1", adam.beta1},
                                                     {"beta2", adam.beta2},
                                                     {"epsilon", adam.epsilon}},
                                                    "all_reduce_adam");
  model.updates.push_back(model.graph.node(update).name);
}

}  // namespace

bool can_fuse_update(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& stage,
                     const graph::Graph& g) {
  if (!spec.fuse_update || !std::holds_alternative<Adam>(spec.optimizer) || stage.loss_scale) return false;
  if (devices.size() < 2 || spec.all_reduce != AllReduce::ring) return false;
  std::set<std::string> distinct;
  for (const std::string& name : devices) {
    if (device::parse_device_id(name).kind != device::DeviceKind::sim) return false;
    distinct.insert(device::parse_device_id(name).str());
  }
  if (distinct.size() != devices.size()) return false;  // two replicas on one device: no peer access between them
  for (std::size_t replica = 0; replica < devices.size(); ++replica) {
    for (std::size_t index = 0; index < stage.parameters[replica].size(); ++index) {
      const std::optional<graph::Output>& gradient = stage.gradients[replica][index];
      if (!gradient) return false;
      // The parameter's dtype, or a 16-bit one for a float32 parameter (mixed_bfloat16: AllReduceAdam sums the
      // 16-bit gradients as AllReduce does); loss-scaled (float16) gradients were refused above.
      const DType gradient_dtype = g.type_of(*gradient).dtype;
      const DType parameter_dtype = g.type_of(stage.parameters[replica][index]).dtype;
      const bool half =
          (gradient_dtype == DType::f16 || gradient_dtype == DType::bf16) && parameter_dtype == DType::f32;
      if (gradient_dtype != parameter_dtype && !half) return false;
    }
  }
  return true;
}

std::vector<graph::Output> persistent_compute_copies(const GradientStage& stage, ModelGraph& model) {
  graph::Graph& g = model.graph;
  const std::vector<graph::NodeId> casts = compute_copy_casts(stage, g);
  std::vector<graph::Output> copies;
  for (std::size_t position = 0; position < casts.size(); ++position) {
    const std::size_t replicas = stage.parameters.size();
    const graph::Output parameter = stage.parameters[position % replicas][position / replicas];
    const std::string& source = g.node(parameter.node).name;
    graph::Node& node = g.mutable_node(casts[position]);
    const DType dtype = graph::attribute_dtype(node, "dtype");
    node.op = "Variable";
    node.inputs.clear();
    node.name = source + "/" + std::string(name_of(dtype));
    node.attributes = {{"dtype", dtype},
                       {"shape", g.type_of(parameter).dims},
                       {"initializer", std::string("cast")},
                       {"source", source},
                       {"kind", std::string("parameter")}};
    model.compute_copies.emplace_back(node.name, source);
    copies.push_back({casts[position], 0});
  }
  return copies;
}

void add_replicated_updates(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& stage,
                            ModelGraph& model) {
  distribute::register_collective_ops();  // the AllReduce nodes of all_reduce_buckets
  const std::size_t replicas = devices.size();
  const std::size_t parameters = stage.parameters[0].size();
  if (can_fuse_update(spec, devices, stage, model.graph) ||
      keeps_compute_copies_alone(spec, devices, stage, model.graph)) {
    add_fused_updates(devices, stage, std::get<Adam>(spec.optimizer), model);
    return;
  }
  ReducedGradients reduced(parameters);
  // Across workers even with one local replica.
  if (replicas > 1 || spec.all_reduce == AllReduce::mpi || (spec.all_reduce == AllReduce::nccl && spec.workers > 1)) {
    reduced = all_reduce_buckets(spec, model.graph, replicas, stage);
  } else {
    for (std::size_t index = 0; index < parameters; ++index) reduced[index] = {{*stage.gradients[0][index]}};
  }
  const std::vector<std::optional<graph::Output>> apply = update_factors(devices, stage, reduced, model);
  std::vector<UpdateRequest> requests;
  for (std::size_t index = 0; index < parameters; ++index) {
    for (std::size_t replica = 0; replica < replicas; ++replica) {
      ReplicaBuilder builder = ReplicaBuilder::of(model.graph, devices, replica);
      requests.push_back(update_request(spec, builder, stage.parameters[replica][index], reduced[index][replica],
                                        apply[replica], model.variables[replica]));
    }
  }
  const bool group = spec.multi_tensor_update && multi_tensor_updates_supported(devices);
  for (std::string& name : add_updates(model.graph, requests, group)) model.updates.push_back(std::move(name));
}

}  // namespace tp::train
