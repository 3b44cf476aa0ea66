// SPDX-License-Identifier: Apache-2.0
// The MLP loss of the Keras example in miniature: x[4,6] -> MatMul W1[6,5] -> BiasAdd b1 -> Relu -> MatMul
// W2[5,3] -> BiasAdd b2 -> SparseSoftmaxCrossEntropy(logits, labels) -> Mean. Gradients with respect to W1,
// b1, W2 and b2 match central finite differences in float64 (relative 1e-6), from logits and from
// probabilities (Softmax, then input = "probabilities"); and a training loop built from the gradients and
// ApplyAdam runs identically on cpu and sim, within float tolerance on opencl, and lowers the loss.

#include <gtest/gtest.h>

#include <cmath>

#include "graph/support/graph_test_support.hpp"

namespace tp::graph {
namespace {

using testing::HostValue;
using testing::random_value;

struct Mlp {
  Graph graph;
  std::map<NodeId, HostValue> values;
  Output x, labels, w1, b1, w2, b2, loss;
};

// `from_probabilities`: the loss reads Softmax(logits) with input = "probabilities".
Mlp build_mlp(std::mt19937& rng, DType dtype, bool from_probabilities) {
  Mlp mlp;
  Graph& graph = mlp.graph;
  mlp.x = placeholder(graph, "x", dtype, {-1, 6});
  mlp.labels = placeholder(graph, "labels", DType::i64, {-1});
  mlp.values[mlp.x.node] = random_value(rng, {4, 6}, -1, 1, 0, dtype);
  mlp.values[mlp.labels.node] = testing::labels_value(rng, 4, 3);
  mlp.w1 = testing::bind_variable(graph, mlp.values, "dense/kernel", random_value(rng, {6, 5}, -1, 1, 0, dtype));
  mlp.b1 = testing::bind_variable(graph, mlp.values, "dense/bias", random_value(rng, {5}, -0.1, 0.1, 0, dtype));
  mlp.w2 = testing::bind_variable(graph, mlp.values, "dense_1/kernel", random_value(rng, {5, 3}, -1, 1, 0, dtype));
  mlp.b2 = testing::bind_variable(graph, mlp.values, "dense_1/bias", random_value(rng, {3}, -0.1, 0.1, 0, dtype));
  const Output h = graph.add("MatMul", {mlp.x, mlp.w1}, {}, "dense/MatMul");
  const Output hidden = graph.add("Relu", {graph.add("BiasAdd", {h, mlp.b1}, {}, "dense/BiasAdd")}, {}, "dense/Relu");
  const Output z = graph.add("MatMul", {hidden, mlp.w2}, {}, "dense_1/MatMul");
  Output logits = graph.add("BiasAdd", {z, mlp.b2}, {}, "dense_1/BiasAdd");
  Attributes kind;
  if (from_probabilities) {
    logits = graph.add("Softmax", {logits}, {}, "dense_1/Softmax");
    kind = {{"input", "probabilities"}};
  }
  const NodeId xent = graph.add_node("SparseSoftmaxCrossEntropy", {logits, mlp.labels}, kind, "loss/xent");
  mlp.loss = graph.add("Mean", {Output{xent, 0}}, {{"axis", std::int64_t{0}}}, "loss/Mean");
  graph.validate();
  return mlp;
}

class MlpGradients : public ::testing::TestWithParam<bool> {};

TEST_P(MlpGradients, MatchFiniteDifferencesForEveryParameter) {
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  Mlp mlp = build_mlp(rng, DType::f64, GetParam());
  testing::expect_gradients_match(mlp.graph, mlp.loss, {mlp.w1, mlp.b1, mlp.w2, mlp.b2}, mlp.values, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Loss, MlpGradients, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "FromProbabilities" : "FromLogits";
                         });

// The gradient of the mean loss over a batch with an unknown (-1) size: the Mean's gradient takes the batch
// from the run, so one graph serves every batch size.
TEST(MlpGradientsBatch, OneGraphServesEveryBatchSize) {
  std::mt19937 rng(tp_test::test_seed());
  Mlp mlp = build_mlp(rng, DType::f64, false);
  const std::vector<Output> xs = {mlp.b2};
  const Output db2 = *gradients(mlp.graph, mlp.loss, xs)[0];
  auto device = testing::make_device(testing::Backend::cpu);
  for (std::int64_t batch : {1, 4, 7}) {
    auto values = mlp.values;
    values[mlp.x.node] = random_value(rng, {batch, 6});
    values[mlp.labels.node] = testing::labels_value(rng, batch, 3);
    const auto run = testing::run_graph(mlp.graph, *device, testing::to_tensors(values, *device));
    // d mean / d b2 sums softmax - one_hot over rows / batch: its entries sum to 0.
    const std::vector<double> gradient = testing::fetch(run, db2);
    EXPECT_NEAR(gradient[0] + gradient[1] + gradient[2], 0.0, 1e-12) << "batch " << batch;
  }
}

// Gradients feed ApplyAdam for each parameter (the training step the session will run); 25 steps, with
// KernelContext::step counting from 1, on both backends.
TEST(MlpTraining, AdamStepsLowerTheLossIdenticallyOnCpuAndSim) {
  std::mt19937 rng(tp_test::test_seed());
  Mlp mlp = build_mlp(rng, DType::f32, false);
  const std::vector<Output> parameters = {mlp.w1, mlp.b1, mlp.w2, mlp.b2};
  const auto grads = gradients(mlp.graph, mlp.loss, parameters);
  for (std::size_t index = 0; index < parameters.size(); ++index) {
    const TensorType type = mlp.graph.type_of(parameters[index]);
    const HostValue zeros{std::vector<double>(static_cast<std::size_t>(testing::element_count(type.dims)), 0.0),
                          type.dtype, type.dims};
    const Output m = testing::bind_variable(mlp.graph, mlp.values, "adam/m", zeros);
    const Output v = testing::bind_variable(mlp.graph, mlp.values, "adam/v", zeros);
    mlp.graph.add_node("ApplyAdam", {parameters[index], *grads[index], m, v}, {{"learning_rate", 0.05}});
  }
  mlp.graph.validate();
  std::vector<std::vector<double>> losses(2);
  for (testing::Backend backend : {testing::Backend::cpu, testing::Backend::sim}) {
    auto device = testing::make_device(backend);
    const auto bindings = testing::to_tensors(mlp.values, *device);  // variables persist across steps
    for (std::int64_t step = 1; step <= 25; ++step) {
      const auto run = testing::run_graph(mlp.graph, *device, bindings, step);
      losses[backend == testing::Backend::cpu ? 0 : 1].push_back(testing::fetch(run, mlp.loss)[0]);
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_LT(losses[0].back(), 0.5 * losses[0].front())
      << "first " << losses[0].front() << ", last " << losses[0].back();
  // Other backends (opencl) round differently: the same training within float tolerance of the cpu's.
  for (const testing::Backend backend : device::testing::present_backends()) {
    if (backend == testing::Backend::cpu || backend == testing::Backend::sim) continue;
    SCOPED_TRACE(device::testing::backend_label(backend));
    auto device = testing::make_device(backend);
    const auto bindings = testing::to_tensors(mlp.values, *device);
    for (std::int64_t step = 1; step <= 25; ++step) {
      const auto run = testing::run_graph(mlp.graph, *device, bindings, step);
      const double expected = losses[0][static_cast<std::size_t>(step - 1)];
      EXPECT_NEAR(testing::fetch(run, mlp.loss)[0], expected, 1e-3 * std::abs(expected)) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace tp::graph
