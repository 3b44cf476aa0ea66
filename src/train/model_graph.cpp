// SPDX-License-Identifier: Apache-2.0
#include "train/model_graph.hpp"

#include <algorithm>
#include <optional>

#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/autodiff.hpp"
#include "train/replica_builder.hpp"

namespace tp::train {

namespace {

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

// What every replica's forward pass shares.
struct ForwardSettings {
  std::int64_t features = 1;  // values per example
  std::vector<std::string> names;
  graph::Output inv_global_batch;
  bool fused_softmax = false;  // sparse cross-entropy on the logits of a softmax output layer
  std::int64_t classes = 0;
};

// One replica's layers from its "x" placeholder: returns the output layer's values before its activation (the
// logits) and sets `predictions` to the values after it.
graph::Output add_layers(const ModelSpec& spec, const ForwardSettings& settings, ReplicaBuilder& builder,
                         graph::Output h, std::vector<graph::Output>& parameters,
                         std::vector<graph::Output>& compute_copies, graph::Output& predictions) {
  std::int64_t fan_in = settings.features;
  graph::Output logits = h;
  for (std::size_t index = 0; index < spec.layers.size(); ++index) {
    const Dense& layer = spec.layers[index];
    const DType compute = layer.policy.value_or(spec.policy).compute_dtype();
    const std::string& name = settings.names[index];
    const std::uint64_t seed = spec.seed * 1000 + index;  // the same for every replica: identical starts
    h = builder.cast(h, compute, name + "/Cast");         // autocast of the layer's input, as Keras
    const graph::Output kernel =
        builder.variable(name + "/kernel", {fan_in, layer.units}, "glorot_uniform", seed, "parameter");
    parameters.push_back(kernel);
    compute_copies.push_back(builder.cast(kernel, compute, name + "/kernel/Cast"));
    h = builder.add("MatMul", {h, compute_copies.back()}, {}, name + "/MatMul");
    if (layer.use_bias) {
      const graph::Output bias = builder.variable(name + "/bias", {layer.units}, "zeros", 0, "parameter");
      parameters.push_back(bias);
      compute_copies.push_back(builder.cast(bias, compute, name + "/bias/Cast"));
      h = builder.add("BiasAdd", {h, compute_copies.back()}, {}, name + "/BiasAdd");
    }
    const bool last = index + 1 == spec.layers.size();
    // The output layer's values go to softmax and the loss in float32.
    if (last) h = builder.cast(h, DType::f32, name + "/Cast_output");
    logits = h;
    if (layer.activation == Activation::relu) h = builder.add("Relu", {h}, {}, name + "/Relu");
    if (layer.activation == Activation::softmax) h = builder.add("Softmax", {h}, {}, name + "/Softmax");
    fan_in = layer.units;
  }
  predictions = h;
  return logits;
}

// One replica's loss (its examples' losses summed, times the fed 1 / global batch) and, for classification,
// its correct count.
graph::Output add_loss(const ModelSpec& spec, const ForwardSettings& settings, ReplicaBuilder& builder,
                       graph::Output logits, graph::Output predictions, graph::Output labels, ReplicaNodes& nodes,
                       ModelGraph& model) {
  graph::Graph& g = builder.graph;
  graph::Output per_example;
  if (spec.loss == Loss::sparse_categorical_crossentropy) {
    const bool probabilities = !settings.fused_softmax && !spec.from_logits;
    const graph::NodeId xent = builder.add_node(
        "SparseSoftmaxCrossEntropy", {settings.fused_softmax || spec.from_logits ? logits : predictions, labels},
        {{"input", std::string(probabilities ? "probabilities" : "logits")}}, "loss/xent");
    per_example = {xent, 0};
    nodes.correct = g.node(builder.add("CorrectCount", {predictions, labels}, {}, "metrics/correct").node).name;
    model.has_accuracy = true;
  } else {
    const graph::Output error = builder.add("Sub", {predictions, labels}, {}, "loss/error");
    const graph::Output squared = builder.add("Mul", {error, error}, {}, "loss/squared");
    per_example = builder.add("Mean", {squared}, {{"axis", std::int64_t{1}}}, "loss/mean_over_outputs");
  }
  const graph::Output sum = builder.add("Sum", {per_example}, {{"axis", std::int64_t{0}}}, "loss/sum");
  return builder.add("Mul", {sum, settings.inv_global_batch}, {}, "loss");
}

}  // namespace

ForwardStage build_forward(const ModelSpec& spec, const std::vector<std::string>& devices, ModelGraph& model) {
  graph::Graph& g = model.graph;
  ForwardSettings settings;
  for (std::int64_t dim : spec.input_shape) settings.features *= dim;
  settings.names = layer_names(spec.layers);
  settings.inv_global_batch = graph::placeholder(g, model.inv_global_batch, DType::f32, {});
  settings.fused_softmax = spec.loss == Loss::sparse_categorical_crossentropy && !spec.from_logits &&
                           spec.layers.back().activation == Activation::softmax;
  settings.classes = spec.layers.back().units;
  // The batch is fed in the first layer's compute dtype (Sequential casts it on the host): under mixed
  // precision the input's copy to the device and its device memory are halved too.
  model.input_dtype = spec.layers.front().policy.value_or(spec.policy).compute_dtype();
  ForwardStage forward;
  forward.parameters.resize(devices.size());
  // Per replica and parameter: the copy the layer computes with (the variable itself, or its Cast to the
  // layer's 16-bit dtype). Gradients are taken with respect to it, so a 16-bit layer's weight gradients stay
  // 16-bit up to the update, which widens them as it reads them.
  forward.compute_copies.resize(devices.size());
  for (std::size_t replica = 0; replica < devices.size(); ++replica) {
    ReplicaBuilder builder = ReplicaBuilder::of(g, devices, replica);
    ReplicaNodes nodes;
    const graph::Output x = builder.placeholder("x", model.input_dtype, {-1, settings.features});
    nodes.x = g.node(x.node).name;
    const graph::Output labels = spec.loss == Loss::sparse_categorical_crossentropy
                                     ? builder.placeholder("labels", DType::i32, {-1})
                                     : builder.placeholder("labels", DType::f32, {-1, settings.classes});
    nodes.labels = g.node(labels.node).name;
    graph::Output predictions = x;
    const graph::Output logits = add_layers(spec, settings, builder, x, forward.parameters[replica],
                                            forward.compute_copies[replica], predictions);
    nodes.predictions = g.node(predictions.node).name;
    const graph::Output loss = add_loss(spec, settings, builder, logits, predictions, labels, nodes, model);
    nodes.loss = g.node(loss.node).name;
    forward.losses.push_back(loss);
    model.replicas.push_back(nodes);
  }
  return forward;
}

GradientStage build_backward(const ModelSpec& spec, const std::vector<std::string>& devices,
                             const ForwardStage& forward, ModelGraph& model) {
  graph::Graph& g = model.graph;
  GradientStage stage;
  // With loss scaling the gradients are those of loss x scale, and stay scaled (in float16, unscaling would
  // flush the small ones the scale rescued) until the update multiplies them by 1 / scale in float32.
  const bool loss_scaling = std::any_of(spec.layers.begin(), spec.layers.end(), [&](const Dense& layer) {
    return layer.policy.value_or(spec.policy).needs_loss_scaling();
  });
  if (loss_scaling) {
    model.loss_scale = "loss_scale";
    stage.loss_scale = graph::placeholder(g, model.loss_scale, DType::f32, {});
  }
  for (std::size_t replica = 0; replica < devices.size(); ++replica) {
    ReplicaBuilder builder = ReplicaBuilder::of(g, devices, replica);
    const graph::Output target =
        loss_scaling ? builder.add("Mul", {forward.losses[replica], *stage.loss_scale}, {}, "loss/scaled")
                     : forward.losses[replica];
    stage.gradients.push_back(graph::gradients(g, target, forward.compute_copies[replica]));
    for (const std::optional<graph::Output>& gradient : stage.gradients.back()) {
      if (gradient) model.replicas[replica].gradients.push_back(g.node(gradient->node).name);
    }
  }
  stage.parameters = forward.parameters;
  model.variables.resize(devices.size());
  for (std::size_t replica = 0; replica < devices.size(); ++replica) {
    for (const graph::Output& parameter : stage.parameters[replica]) {
      model.variables[replica].push_back(g.node(parameter.node).name);
    }
  }
  return stage;
}

ModelGraph build_model_graph(const ModelSpec& spec, const std::vector<std::string>& devices,
                             const DistributionStrategy& strategy) {
  check_spec(spec, devices.size());
  ModelGraph model;
  const ForwardStage forward = build_forward(spec, devices, model);
  const GradientStage gradients = build_backward(spec, devices, forward, model);
  strategy.add_update_stage(spec, devices, gradients, model);
  return model;
}

ModelGraph build_model_graph(const ModelSpec& spec, const std::vector<std::string>& devices) {
  // No device manager here to tell which GPU each device is on: auto plans the in-process ring.
  ModelSpec settled = spec;
  if (settled.all_reduce == AllReduce::automatic) settled.all_reduce = AllReduce::ring;
  return build_model_graph(settled, devices,
                           *make_distribution_strategy(Strategy::mirrored(devices, settled.all_reduce)));
}

}  // namespace tp::train
