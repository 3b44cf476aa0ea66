// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small MLP training graph (x -> Dense relu -> Dense -> sparse softmax cross-entropy -> mean, Adam updates)
// and a device manager with two sim devices, for the session tests.

#include <random>
#include <string>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/graph/autodiff.hpp"
#include "tensorpool/graph/builder.hpp"
#include "tensorpool/graph/graph.hpp"

namespace tp::runtime::testing {

inline device::DeviceManagerOptions two_sim_devices(std::size_t memory_bytes = 256 * kMiB) {
  device::DeviceManagerOptions options;
  options.sim_devices = 2;
  options.sim_memory_bytes = memory_bytes;
  options.cpu_memory_bytes = 1 * kGiB;
  return options;
}

inline const memory::GetEnv kNoEnv = [](const char*) -> const char* { return nullptr; };

struct MlpGraph {
  graph::Graph graph;
  std::vector<std::string> updates;  // the ApplyAdam nodes (run as targets)
  std::string loss = "loss";
};

// in -> hidden (relu) -> classes; every node on `device` when given.
inline MlpGraph build_mlp(std::int64_t in, std::int64_t hidden, std::int64_t classes, const std::string& device = {}) {
  MlpGraph mlp;
  graph::Graph& g = mlp.graph;
  auto on = [&](graph::Output output) {
    g.mutable_node(output.node).device = device;
    return output;
  };
  auto variable = [&](const std::string& name, std::vector<std::int64_t> dims, const std::string& initializer,
                      const std::string& kind = "parameter") {
    graph::Output output = on(graph::variable(g, name, DType::f32, std::move(dims)));
    g.mutable_node(output.node).attributes["initializer"] = initializer;
    g.mutable_node(output.node).attributes["seed"] = std::int64_t{7};
    g.mutable_node(output.node).attributes["kind"] = kind;
    return output;
  };
  const graph::Output x = on(graph::placeholder(g, "x", DType::f32, {-1, in}));
  const graph::Output labels = on(graph::placeholder(g, "labels", DType::i32, {-1}));
  const graph::Output w1 = variable("dense/kernel", {in, hidden}, "glorot_uniform");
  const graph::Output b1 = variable("dense/bias", {hidden}, "zeros");
  const graph::Output w2 = variable("dense_1/kernel", {hidden, classes}, "glorot_uniform");
  const graph::Output b2 = variable("dense_1/bias", {classes}, "zeros");
  const graph::Output h = on(
      g.add("Relu", {on(g.add("BiasAdd", {on(g.add("MatMul", {x, w1}, {}, "dense/MatMul")), b1}, {}, "dense/BiasAdd"))},
            {}, "dense/Relu"));
  const graph::Output logits =
      on(g.add("BiasAdd", {on(g.add("MatMul", {h, w2}, {}, "dense_1/MatMul")), b2}, {}, "dense_1/BiasAdd"));
  const graph::NodeId xent = g.add_node("SparseSoftmaxCrossEntropy", {logits, labels}, {}, "xent");
  g.mutable_node(xent).device = device;
  const graph::Output loss = on(g.add("Mean", {{xent, 0}}, {{"axis", std::int64_t{0}}}, "loss"));
  const std::vector<graph::Output> parameters = {w1, b1, w2, b2};
  const auto grads = graph::gradients(g, loss, parameters);
  for (std::size_t index = 0; index < parameters.size(); ++index) {
    const std::string name = g.node(parameters[index].node).name;  // a copy: adding nodes moves them
    const std::vector<std::int64_t> dims = g.type_of(parameters[index]).dims;
    const graph::Output m = variable(name + "/m", dims, "zeros", "optimizer_state");
    const graph::Output v = variable(name + "/v", dims, "zeros", "optimizer_state");
    const graph::NodeId update = g.add_node("ApplyAdam", {parameters[index], *grads[index], m, v},
                                            {{"learning_rate", 0.01}}, name + "/ApplyAdam");
    g.mutable_node(update).device = device;
    mlp.updates.push_back(g.node(update).name);
  }
  return mlp;
}

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> labels;
};

// A learnable problem: the label is the index of the largest of the first `classes` features.
inline Batch make_batch(std::int64_t rows, std::int64_t in, std::int64_t classes, std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  Batch batch;
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int32_t best = 0;
    for (std::int64_t col = 0; col < in; ++col) {
      batch.x.push_back(normal(engine));
      if (col < classes && batch.x.back() > batch.x[static_cast<std::size_t>(row * in + best)]) {
        best = static_cast<std::int32_t>(col);
      }
    }
    batch.labels.push_back(best);
  }
  return batch;
}

struct HostBatch {
  Tensor x;       // float32 [rows, in]
  Tensor labels;  // int32 [rows]
};

// A batch as tensors on cpu:0, ready to feed (Sequential::train_step and friends).
inline HostBatch host_batch(device::DeviceManager& manager, const Batch& batch, std::int64_t in) {
  const auto rows = static_cast<std::int64_t>(batch.labels.size());
  device::Device& cpu = manager.device("cpu:0");
  return {Tensor::from_vector<float>(batch.x, Shape{rows, in}, cpu),
          Tensor::from_vector<std::int32_t>(batch.labels, Shape{rows}, cpu)};
}

}  // namespace tp::runtime::testing
