// SPDX-License-Identifier: Apache-2.0
#include "train/sharded_update.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/collective_ops.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/graph/builder.hpp"
#include "train/replicated_update.hpp"
#include "train/update_grouping.hpp"

namespace tp::train {

namespace {

std::int64_t elements_of(const graph::Graph& graph, graph::Output output) {
  std::int64_t elements = 1;
  for (std::int64_t dim : graph.type_of(output).dims) elements *= dim;
  return elements;
}

graph::Output on(graph::Graph& graph, graph::Output output, const std::string& device) {
  graph.mutable_node(output.node).device = device;
  return output;
}

graph::Output shard_variable(graph::Graph& graph, const std::string& name, std::int64_t elements,
                             const std::string& device) {
  const graph::Output output = graph::variable(graph, name, DType::f32, {elements});
  graph::Node& node = graph.mutable_node(output.node);
  node.device = device;
  node.attributes["initializer"] = std::string("zeros");
  node.attributes["kind"] = std::string("optimizer_state");
  return output;
}

// How the flat parameter space splits: `shards` chunks over every replica of the job, local replica r owning
// chunk first_shard + r (one process: shards = replicas, first_shard = 0; across workers: world x replicas and
// rank x replicas). Collectives run with `algorithm` (the name of spec.all_reduce: "mpi" across workers).
struct ShardLayout {
  std::size_t shards = 0;
  std::size_t first_shard = 0;
  std::string algorithm;

  std::size_t of(std::size_t replica) const { return first_shard + replica; }
  std::string prefix(std::size_t replica) const { return "shard_" + std::to_string(of(replica)) + "/"; }
};

// Per replica: the flag its updates are gated on (1 when every reduced gradient is finite, else 0).
std::vector<graph::Output> finite_flags(graph::Graph& g, const std::vector<std::string>& devices,
                                        const std::vector<graph::Output>& reduced, bool sharded_gradients,
                                        const ShardLayout& layout) {
  const std::size_t replicas = devices.size();
  std::vector<graph::Output> flags;
  if (!sharded_gradients) {  // every replica holds the whole reduced bucket: each decides alone, all alike
    for (std::size_t replica = 0; replica < replicas; ++replica) {
      flags.push_back(on(
          g,
          g.add("AllFinite", {reduced[replica]}, {}, "replica_" + std::to_string(replica) + "/loss_scale/all_finite"),
          devices[replica]));
    }
    return flags;
  }
  // Each replica holds only its chunk's sums (the rest of its bucket is working space): sum the chunks' flags over
  // every replica of the job; all finite iff the sum is K (the shards), and relu(sum - (K - 1)) is then 1, else 0.
  std::vector<graph::Output> chunk_flags;
  for (std::size_t replica = 0; replica < replicas; ++replica) {
    const auto [begin, end] =
        distribute::Communicator::chunk(g.type_of(reduced[replica]).dims.at(0), layout.shards, layout.of(replica));
    chunk_flags.push_back(on(g,
                             g.add("AllFinite", {reduced[replica]}, {{"range", std::vector<std::int64_t>{begin, end}}},
                                   layout.prefix(replica) + "loss_scale/AllFinite"),
                             devices[replica]));
  }
  const graph::NodeId sum = g.add_node(
      "AllReduce", chunk_flags, {{"algorithm", layout.algorithm}, {"replicas", static_cast<std::int64_t>(replicas)}},
      "all_reduce/finite_flags");
  for (std::size_t replica = 0; replica < replicas; ++replica) {
    const std::string prefix = layout.prefix(replica) + "loss_scale/";
    const graph::Output others = on(
        g, graph::fill(g, prefix + "others", DType::f32, {}, static_cast<double>(layout.shards - 1)), devices[replica]);
    const graph::Output excess =
        on(g, g.add("Sub", {graph::Output{sum, static_cast<int>(replica)}, others}, {}, prefix + "excess"),
           devices[replica]);
    flags.push_back(on(g, g.add("Relu", {excess}, {}, prefix + "all_finite"), devices[replica]));
  }
  return flags;
}

// ZeRO with the collectives folded into the update (can_fuse_update): one AllReduceAdam node with sharded
// slots. Each replica reads its chunk of every replica's gradients in place, updates its chunk of its
// parameters and slots, and stores the updated chunk into every other replica's parameters: no bucket, no
// all-gather, bitwise the same variables. The slots are the unfused path's variables, names included.
void add_fused_sharded_updates(const std::vector<std::string>& devices, const std::vector<graph::Output>& gradients,
                               const GradientStage& stage, const Adam& adam, const ShardLayout& layout,
                               std::int64_t shard, ModelGraph& model) {
  graph::Graph& g = model.graph;
  const std::size_t replicas = devices.size();
  std::vector<graph::Output> inputs = gradients;  // parameter-major, then the parameters, then each replica's m, v
  for (std::size_t index = 0; index < stage.parameters[0].size(); ++index) {
    for (std::size_t replica = 0; replica < replicas; ++replica) inputs.push_back(stage.parameters[replica][index]);
  }
  std::vector<graph::Output> m, v;
  for (std::size_t replica = 0; replica < replicas; ++replica) {
    m.push_back(shard_variable(g, layout.prefix(replica) + "adam_m", shard, devices[replica]));
    v.push_back(shard_variable(g, layout.prefix(replica) + "adam_v", shard, devices[replica]));
    model.variables[replica].push_back(g.node(m.back().node).name);
    model.variables[replica].push_back(g.node(v.back().node).name);
  }
  inputs.insert(inputs.end(), m.begin(), m.end());
  inputs.insert(inputs.end(), v.begin(), v.end());
  const std::vector<graph::Output> copies = persistent_compute_copies(stage, model);
  inputs.insert(inputs.end(), copies.begin(), copies.end());
  const graph::NodeId update = g.add_node("AllReduceAdam", inputs,
                                          {{"replicas", static_cast<std::int64_t>(replicas)},
                                           {"sharded_slots", true},
                                           {"compute_copies", !copies.empty()},
                                           {"learning_rate", adam.learning_rate},
                                           {"beta1", adam.beta1},
                                           {"beta2", adam.beta2},
                                           {"epsilon", adam.epsilon}},
                                          "all_reduce_adam");
  model.updates.push_back(g.node(update).name);
}

}  // namespace

void add_sharded_updates(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& stage,
                         ModelGraph& model) {
  distribute::register_collective_ops();  // the ReduceScatter, AllReduce and AllGather nodes below
  const std::vector<std::vector<graph::Output>>& parameters = stage.parameters;
  const std::vector<std::vector<std::optional<graph::Output>>>& gradients = stage.gradients;
  const std::optional<graph::Output>& loss_scale = stage.loss_scale;
  graph::Graph& g = model.graph;
  const std::size_t replicas = devices.size();
  const std::size_t count = parameters[0].size();
  const ShardLayout layout{.shards = replicas * static_cast<std::size_t>(spec.workers),
                           .first_shard = static_cast<std::size_t>(spec.rank) * replicas,
                           .algorithm = std::string(name_of(spec.all_reduce))};
  if (layout.shards < 2) {
    TP_THROW(InvalidArgument, "train",
             "sharding needs two or more replicas (mirrored over >= 2 devices, or >= 2 workers)");
  }
  std::vector<graph::Output> inputs;  // parameter-major: gradient p of replica r is input p * R + r
  std::vector<std::int64_t> offsets;  // of each parameter in the flat space
  std::int64_t total = 0;
  for (std::size_t index = 0; index < count; ++index) {
    offsets.push_back(total);
    total += elements_of(g, parameters[0][index]);
    for (std::size_t replica = 0; replica < replicas; ++replica) {
      if (!gradients[replica][index]) {
        TP_THROW(InvalidArgument, "train", "parameter '", g.node(parameters[replica][index].node).name,
                 "' gets no gradient; sharded training needs one for every parameter");
      }
      inputs.push_back(*gradients[replica][index]);
    }
  }
  const auto shards = static_cast<std::int64_t>(layout.shards);
  const std::int64_t shard = (total + shards - 1) / shards;
  if (can_fuse_update(spec, devices, stage, g)) {
    add_fused_sharded_updates(devices, inputs, stage, std::get<Adam>(spec.optimizer), layout, shard, model);
    return;
  }
  const bool one_dtype = std::all_of(inputs.begin(), inputs.end(), [&](graph::Output input) {
    return g.type_of(input).dtype == g.type_of(inputs[0]).dtype;
  });
  for (std::size_t position = 0; !one_dtype && position < inputs.size(); ++position) {
    if (g.type_of(inputs[position]).dtype == DType::f32) continue;
    const graph::Node& producer = g.node(inputs[position].node);
    inputs[position] =
        on(g, g.add("Cast", {inputs[position]}, {{"dtype", DType::f32}}, producer.name + "/float32"), producer.device);
  }
  const bool sharded_gradients = spec.shard == Shard::gradients;
  const graph::Attributes collective = {{"algorithm", layout.algorithm},
                                        {"replicas", static_cast<std::int64_t>(replicas)},
                                        {"shards", static_cast<std::int64_t>(layout.shards)},
                                        {"first_shard", static_cast<std::int64_t>(layout.first_shard)}};
  // Where replica r reads its chunk's reduced gradient: its reduced bucket, laid out as the flat parameter space.
  std::vector<graph::Output> reduced(replicas);
  if (sharded_gradients) {  // each replica reads only its chunk of its bucket, summed over the job's replicas
    graph::Attributes attributes = collective;
    attributes["unpack"] = false;
    const graph::NodeId scatter = g.add_node("ReduceScatter", inputs, attributes, "reduce_scatter/gradients");
    for (std::size_t replica = 0; replica < replicas; ++replica) {
      reduced[replica] = {scatter, static_cast<int>(replicas + replica)};
    }
  } else {
    // The updates read their chunks from the reduced bucket itself: no unpacked copy of every gradient.
    const graph::NodeId all_reduce = g.add_node(
        "AllReduce", inputs,
        {{"algorithm", layout.algorithm}, {"replicas", static_cast<std::int64_t>(replicas)}, {"unpack", false}},
        "all_reduce/gradients");
    const auto bucket = static_cast<int>(count == 1 ? 0 : count * replicas);
    for (std::size_t replica = 0; replica < replicas; ++replica) {
      reduced[replica] = {all_reduce, bucket + static_cast<int>(replica)};
    }
  }
  std::vector<std::optional<graph::Output>> apply(replicas);
  if (loss_scale) {
    const std::vector<graph::Output> flags = finite_flags(g, devices, reduced, sharded_gradients, layout);
    for (std::size_t replica = 0; replica < replicas; ++replica) {
      model.replicas[replica].all_finite = g.node(flags[replica].node).name;
      apply[replica] =
          on(g, g.add("Div", {flags[replica], *loss_scale}, {}, layout.prefix(replica) + "loss_scale/update_factor"),
             devices[replica]);
    }
  }
  std::vector<UpdateRequest> requests;
  for (std::size_t replica = 0; replica < replicas; ++replica) {
    const std::string prefix = layout.prefix(replica);
    const std::string& device = devices[replica];
    const auto [begin, end] = distribute::Communicator::chunk(total, layout.shards, layout.of(replica));
    std::vector<graph::Output> slots;
    if (std::holds_alternative<Adam>(spec.optimizer)) {
      slots = {shard_variable(g, prefix + "adam_m", shard, device),
               shard_variable(g, prefix + "adam_v", shard, device)};
    } else {
      slots = {shard_variable(g, prefix + "momentum", shard, device)};
    }
    for (const graph::Output& slot : slots) model.variables[replica].push_back(g.node(slot.node).name);
    for (std::size_t index = 0; index < count; ++index) {
      const std::int64_t first = offsets[index];
      const std::int64_t last = first + elements_of(g, parameters[replica][index]);
      const std::int64_t low = std::max(first, begin);
      const std::int64_t high = std::min(last, end);
      if (low >= high) continue;
      graph::Attributes attributes{{"slice", std::vector<std::int64_t>{low - first, high - low, low, low - begin}}};
      std::vector<graph::Output> update_inputs{parameters[replica][index], reduced[replica]};
      update_inputs.insert(update_inputs.end(), slots.begin(), slots.end());
      if (apply[replica]) update_inputs.push_back(*apply[replica]);
      const std::string base = g.node(parameters[replica][index].node)
                                   .name.substr(g.node(parameters[replica][index].node).name.find('/') + 1);
      std::string op;
      if (const Adam* adam = std::get_if<Adam>(&spec.optimizer)) {
        op = "ApplyAdam";
        attributes["learning_rate"] = adam->learning_rate;
        attributes["beta1"] = adam->beta1;
        attributes["beta2"] = adam->beta2;
        attributes["epsilon"] = adam->epsilon;
      } else {
        const Sgd& sgd = std::get<Sgd>(spec.optimizer);
        op = "ApplySgd";
        attributes["learning_rate"] = sgd.learning_rate;
        attributes["momentum"] = sgd.momentum;
        attributes["nesterov"] = sgd.nesterov;
      }
      if (apply[replica]) op += "If";
      std::string name = prefix + base + "/" + op;
      requests.push_back({.op = std::move(op),
                          .inputs = std::move(update_inputs),
                          .attributes = std::move(attributes),
                          .name = std::move(name),
                          .device = device,
                          .prefix = prefix});
    }
  }
  const bool group = spec.multi_tensor_update && multi_tensor_updates_supported(devices);
  for (std::string& name : add_updates(g, requests, group)) model.updates.push_back(std::move(name));
  std::vector<graph::Output> variables;  // parameter-major
  for (std::size_t index = 0; index < count; ++index) {
    for (std::size_t replica = 0; replica < replicas; ++replica) variables.push_back(parameters[replica][index]);
  }
  model.updates.push_back(g.node(g.add_node("AllGather", variables, collective, "all_gather/parameters")).name);
}

}  // namespace tp::train
