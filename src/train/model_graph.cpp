// SPDX-License-Identifier: Apache-2.0
#include "train/model_graph.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/autodiff.hpp"
#include "tensorpool/graph/builder.hpp"
#include "train/sharded_update.hpp"

namespace tp::train {

namespace {

struct Builder {
  graph::Graph& graph;
  std::string device;
  std::string prefix;  // "replica_1/" or "" for one replica

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

std::vector<std::string> layer_names(const std::vector<Dense>& layers) {
  std::vector<std::string> names;
  int unnamed = 0;
  for (const Dense& layer : layers) {
    if (!layer.name.empty()) {
      names.push_back(layer.name);
    } else {
      names.push_back(unnamed == 0 ? "dense" : "dense_" + std::to_string(unnamed));
      ++unnamed;
    }
  }
  return names;
}

void check_spec(const ModelSpec& spec, std::size_t replicas) {
  if (replicas == 0) TP_THROW(InvalidArgument, "train", "a model needs at least one device");
  if (spec.layers.empty()) TP_THROW(InvalidArgument, "train", "the model has no layers; add a Dense layer");
  if (spec.input_shape.empty()) TP_THROW(InvalidArgument, "train", "the model's input shape is empty");
  for (std::int64_t dim : spec.input_shape) {
    if (dim <= 0) TP_THROW(InvalidArgument, "train", "input dimension ", dim, " must be positive");
  }
  for (std::size_t index = 0; index < spec.layers.size(); ++index) {
    if (spec.layers[index].units <= 0) {
      TP_THROW(InvalidArgument, "train", "layer ", index, " has ", spec.layers[index].units, " units; it needs >= 1");
    }
  }
}

}  // namespace

ModelGraph build_model_graph(const ModelSpec& spec, const std::vector<std::string>& devices) {
  check_spec(spec, devices.size());
  ModelGraph model;
  graph::Graph& g = model.graph;
  std::int64_t features = 1;
  for (std::int64_t dim : spec.input_shape) features *= dim;
  const std::vector<std::string> names = layer_names(spec.layers);
  const graph::Output inv_global_batch = graph::placeholder(g, model.inv_global_batch, DType::f32, {});
  const bool fused_softmax = spec.loss == Loss::sparse_categorical_crossentropy && !spec.from_logits &&
                             spec.layers.back().activation == Activation::softmax;
  const std::int64_t classes = spec.layers.back().units;
  // The batch is fed in the first layer's compute dtype (Sequential casts it on the host): under mixed
  // precision the input's copy to the device and its device memory are halved too.
  model.input_dtype = spec.layers.front().policy.value_or(spec.policy).compute_dtype();
  std::vector<std::vector<graph::Output>> parameters(devices.size());
  // Per replica and parameter: the copy the layer computes with (the variable itself, or its Cast to the
  // layer's 16-bit dtype). Gradients are taken with respect to it, so a 16-bit layer's weight gradients stay
  // 16-bit up to the update, which widens them as it reads them.
  std::vector<std::vector<graph::Output>> compute_copies(devices.size());
  std::vector<graph::Output> losses;
  for (std::size_t replica = 0; replica < devices.size(); ++replica) {
    Builder builder{g, devices[replica], devices.size() > 1 ? "replica_" + std::to_string(replica) + "/" : ""};
    ReplicaNodes nodes;
    graph::Output h = builder.placeholder("x", model.input_dtype, {-1, features});
    nodes.x = g.node(h.node).name;
    const graph::Output labels = spec.loss == Loss::sparse_categorical_crossentropy
                                     ? builder.placeholder("labels", DType::i32, {-1})
                                     : builder.placeholder("labels", DType::f32, {-1, classes});
    nodes.labels = g.node(labels.node).name;
    std::int64_t fan_in = features;
    graph::Output logits = h;
    for (std::size_t index = 0; index < spec.layers.size(); ++index) {
      const Dense& layer = spec.layers[index];
      const DType compute = layer.policy.value_or(spec.policy).compute_dtype();
      const std::string& name = names[index];
      const std::uint64_t seed = spec.seed * 1000 + index;  // the same for every replica: identical starts
      h = builder.cast(h, compute, name + "/Cast");         // autocast of the layer's input, as Keras
      const graph::Output kernel =
          builder.variable(name + "/kernel", {fan_in, layer.units}, "glorot_uniform", seed, "parameter");
      parameters[replica].push_back(kernel);
      compute_copies[replica].push_back(builder.cast(kernel, compute, name + "/kernel/Cast"));
      h = builder.add("MatMul", {h, compute_copies[replica].back()}, {}, name + "/MatMul");
      if (layer.use_bias) {
        const graph::Output bias = builder.variable(name + "/bias", {layer.units}, "zeros", 0, "parameter");
        parameters[replica].push_back(bias);
        compute_copies[replica].push_back(builder.cast(bias, compute, name + "/bias/Cast"));
        h = builder.add("BiasAdd", {h, compute_copies[replica].back()}, {}, name + "/BiasAdd");
      }
      const bool last = index + 1 == spec.layers.size();
      // The output layer's values go to softmax and the loss in float32.
      if (last) h = builder.cast(h, DType::f32, name + "/Cast_output");
      logits = h;
      if (layer.activation == Activation::relu) h = builder.add("Relu", {h}, {}, name + "/Relu");
      if (layer.activation == Activation::softmax) h = builder.add("Softmax", {h}, {}, name + "/Softmax");
      fan_in = layer.units;
    }
    nodes.predictions = g.node(h.node).name;
    graph::Output per_example;
    if (spec.loss == Loss::sparse_categorical_crossentropy) {
      const bool probabilities = !fused_softmax && !spec.from_logits;
      const graph::NodeId xent =
          builder.add_node("SparseSoftmaxCrossEntropy", {fused_softmax || spec.from_logits ? logits : h, labels},
                           {{"input", std::string(probabilities ? "probabilities" : "logits")}}, "loss/xent");
      per_example = {xent, 0};
      nodes.correct = g.node(builder.add("CorrectCount", {h, labels}, {}, "metrics/correct").node).name;
      model.has_accuracy = true;
    } else {
      const graph::Output error = builder.add("Sub", {h, labels}, {}, "loss/error");
      const graph::Output squared = builder.add("Mul", {error, error}, {}, "loss/squared");
      per_example = builder.add("Mean", {squared}, {{"axis", std::int64_t{1}}}, "loss/mean_over_outputs");
    }
    const graph::Output sum = builder.add("Sum", {per_example}, {{"axis", std::int64_t{0}}}, "loss/sum");
    const graph::Output loss = builder.add("Mul", {sum, inv_global_batch}, {}, "loss");
    nodes.loss = g.node(loss.node).name;
    losses.push_back(loss);
    model.replicas.push_back(nodes);
  }
  // Gradients per replica, then (mirrored) all-reduced, then the same update on every replica. With loss
  // scaling they are the gradients of loss x scale, and stay scaled (in float16, unscaling would flush the
  // small ones the scale rescued) until the update multiplies them by 1 / scale in float32.
  const bool loss_scaling = std::any_of(spec.layers.begin(), spec.layers.end(), [&](const Dense& layer) {
    return layer.policy.value_or(spec.policy).needs_loss_scaling();
  });
  std::optional<graph::Output> loss_scale;
  if (loss_scaling) {
    model.loss_scale = "loss_scale";
    loss_scale = graph::placeholder(g, model.loss_scale, DType::f32, {});
  }
  std::vector<std::vector<std::optional<graph::Output>>> gradients;
  for (std::size_t replica = 0; replica < devices.size(); ++replica) {
    Builder builder{g, devices[replica], devices.size() > 1 ? "replica_" + std::to_string(replica) + "/" : ""};
    const graph::Output target =
        loss_scaling ? builder.add("Mul", {losses[replica], *loss_scale}, {}, "loss/scaled") : losses[replica];
    gradients.push_back(graph::gradients(g, target, compute_copies[replica]));
    for (const std::optional<graph::Output>& gradient : gradients.back()) {
      if (gradient) model.replicas[replica].gradients.push_back(g.node(gradient->node).name);
    }
  }
  model.variables.resize(devices.size());
  for (std::size_t replica = 0; replica < devices.size(); ++replica) {
    for (const graph::Output& parameter : parameters[replica])
      model.variables[replica].push_back(g.node(parameter.node).name);
  }
  if (spec.shard != Shard::none) {  // ZeRO: sharded optimizer state (and gradients)
    add_sharded_updates(spec, devices, parameters, gradients, loss_scale, model);
    return model;
  }
  // The AllReduces: per gradient dtype, buckets of at most bucket_bytes filled from the last parameter back
  // (the order the backward pass produces the gradients), one collective per bucket.
  const std::size_t replicas = devices.size();
  // Per parameter and replica: the tensor its update reads the reduced gradient from (the gradient itself on one
  // device), at which element. A bucket of several gradients is not unpacked: the updates read their ranges of
  // it (`slice`), so the step holds one copy of the reduced gradients, not two.
  struct Reduced {
    graph::Output tensor;
    std::int64_t offset = 0;
    bool whole = true;  // the tensor is this parameter's gradient alone
  };
  std::vector<std::vector<Reduced>> reduced(parameters[0].size());   // [parameter][replica]
  if (replicas > 1 || spec.all_reduce == "mpi") {                    // across workers even with one local replica
    std::map<DType, std::vector<std::vector<std::size_t>>> buckets;  // parameter indices per bucket, per dtype
    std::map<DType, std::int64_t> filled;                            // bytes of each dtype's last bucket
    for (std::size_t index = parameters[0].size(); index-- > 0;) {
      const graph::TensorType type = g.type_of(*gradients[0][index]);
      const auto bytes = static_cast<std::int64_t>(byte_size(type.shape(), type.dtype));
      std::vector<std::vector<std::size_t>>& list = buckets[type.dtype];
      if (list.empty() || filled[type.dtype] + bytes > spec.bucket_bytes) {
        list.emplace_back();
        filled[type.dtype] = 0;
      }
      list.back().push_back(index);
      filled[type.dtype] += bytes;
    }
    for (const auto& [dtype, list] : buckets) {
      for (std::size_t bucket = 0; bucket < list.size(); ++bucket) {
        const std::vector<std::size_t>& indices = list[bucket];
        std::vector<graph::Output> inputs;  // parameter-major: gradient p of replica r is input p * R + r
        for (std::size_t index : indices) {
          for (std::size_t replica = 0; replica < replicas; ++replica) inputs.push_back(*gradients[replica][index]);
        }
        std::string name =
            buckets.size() == 1 ? "all_reduce/gradients" : "all_reduce/gradients_" + std::string(name_of(dtype));
        if (list.size() > 1) name += "_bucket_" + std::to_string(bucket);
        const bool packed = indices.size() > 1;
        const graph::NodeId all_reduce = g.add_node(
            "AllReduce", inputs,
            {{"algorithm", spec.all_reduce}, {"replicas", static_cast<std::int64_t>(replicas)}, {"unpack", !packed}},
            name);
        std::int64_t offset = 0;
        for (std::size_t position = 0; position < indices.size(); ++position) {
          for (std::size_t replica = 0; replica < replicas; ++replica) {
            const auto output = static_cast<int>(packed ? indices.size() * replicas + replica : replica);
            reduced[indices[position]].push_back({{all_reduce, output}, offset, !packed});
          }
          const graph::TensorType type = g.type_of(*gradients[0][indices[position]]);
          offset += static_cast<std::int64_t>(type.shape().num_elements());
        }
      }
    }
  } else {
    for (std::size_t index = 0; index < parameters[0].size(); ++index) reduced[index] = {{*gradients[0][index]}};
  }
  // Loss scaling: per replica, the product of AllFinite over its reduced gradients (so every replica takes
  // the same decision) divided by the scale: 0 skips the updates, else it unscales the gradients.
  std::vector<std::optional<graph::Output>> apply(replicas);
  for (std::size_t replica = 0; loss_scaling && replica < replicas; ++replica) {
    Builder builder{g, devices[replica], replicas > 1 ? "replica_" + std::to_string(replica) + "/" : ""};
    std::optional<graph::Output> finite;
    std::set<graph::Output> checked;  // each reduced bucket once
    for (std::size_t index = 0; index < parameters[0].size(); ++index) {
      if (!checked.insert(reduced[index][replica].tensor).second) continue;
      const graph::Output flag = builder.add("AllFinite", {reduced[index][replica].tensor}, {}, "loss_scale/AllFinite");
      finite = finite ? builder.add("Mul", {*finite, flag}, {}, "loss_scale/all_finite") : flag;
    }
    model.replicas[replica].all_finite = g.node(finite->node).name;
    apply[replica] = builder.add("Div", {*finite, *loss_scale}, {}, "loss_scale/update_factor");
  }
  for (std::size_t index = 0; index < parameters[0].size(); ++index) {
    for (std::size_t replica = 0; replica < devices.size(); ++replica) {
      Builder builder{g, devices[replica], devices.size() > 1 ? "replica_" + std::to_string(replica) + "/" : ""};
      const graph::Output parameter = parameters[replica][index];
      const std::string base = g.node(parameter.node).name.substr(builder.prefix.size());
      const std::vector<std::int64_t> dims = g.type_of(parameter).dims;
      const Reduced& gradient = reduced[index][replica];
      graph::Attributes slice;  // where the update reads its gradient in a bucket
      if (!gradient.whole) {
        slice["slice"] = std::vector<std::int64_t>{0, g.type_of(parameter).shape().num_elements(), gradient.offset, 0};
      }
      graph::NodeId update = -1;
      if (const Adam* adam = std::get_if<Adam>(&spec.optimizer)) {
        const graph::Output m = builder.variable(base + "/adam_m", dims, "zeros", 0, "optimizer_state");
        const graph::Output v = builder.variable(base + "/adam_v", dims, "zeros", 0, "optimizer_state");
        model.variables[replica].push_back(g.node(m.node).name);
        model.variables[replica].push_back(g.node(v.node).name);
        std::vector<graph::Output> inputs{parameter, gradient.tensor, m, v};
        if (apply[replica]) inputs.push_back(*apply[replica]);
        graph::Attributes attributes = slice;
        attributes.insert({{"learning_rate", adam->learning_rate},
                           {"beta1", adam->beta1},
                           {"beta2", adam->beta2},
                           {"epsilon", adam->epsilon}});
        update =
            builder.add_node(apply[replica] ? "ApplyAdamIf" : "ApplyAdam", inputs, attributes, base + "/ApplyAdam");
      } else {
        const Sgd& sgd = std::get<Sgd>(spec.optimizer);
        const graph::Output velocity = builder.variable(base + "/momentum", dims, "zeros", 0, "optimizer_state");
        model.variables[replica].push_back(g.node(velocity.node).name);
        std::vector<graph::Output> inputs{parameter, gradient.tensor, velocity};
        if (apply[replica]) inputs.push_back(*apply[replica]);
        graph::Attributes attributes = slice;
        attributes.insert(
            {{"learning_rate", sgd.learning_rate}, {"momentum", sgd.momentum}, {"nesterov", sgd.nesterov}});
        update = builder.add_node(apply[replica] ? "ApplySgdIf" : "ApplySgd", inputs, attributes, base + "/ApplySgd");
      }
      model.updates.push_back(g.node(update).name);
    }
  }
  return model;
}

}  // namespace tp::train
