// SPDX-License-Identifier: Apache-2.0
// Every op with kernels, run through the direct executor (tests/graph/support) on cpu and on sim: both
// backends must agree exactly (they run the same CPU kernels), and several ops are compared against host
// float64 references.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "graph/support/graph_test_support.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::graph {
namespace {

using testing::Backend;
using testing::HostValue;
using testing::make_device;
using testing::random_value;
using testing::run_graph;

// The ops whose kernels this file runs; must equal the registry's ops that have kernels.
const std::set<std::string> kKernelOps = {
    "Fill", "MatMul", "BiasAdd", "BiasAddGrad", "Relu", "ReluGrad", "Softmax", "LogSoftmax", "Sum", "Mean", "Max",
    "ArgMax", "Add", "Sub", "Mul", "Div", "Scale", "Cast", "AddN", "Reshape", "Broadcast", "ScaleRows", "CorrectCount",
    "ApplySgd", "ApplyAdam", "ApplySgdMulti", "ApplyAdamMulti",
    "SparseSoftmaxCrossEntropy",                // (the collectives are distribute's: they are not
                                                // in the graph layer's registry, see below)
    "AllFinite", "ApplySgdIf", "ApplyAdamIf"};  // covered by mixed_precision_graph_test

TEST(GraphKernels, EveryOpWithKernelsIsCoveredOnCpuAndSim) {
  std::set<std::string> with_kernels;
  for (const std::string& name : OpRegistry::global().names()) {
    const OpDef& definition = OpRegistry::global().get(name);
    if (definition.kernels.empty()) continue;
    with_kernels.insert(name);
    EXPECT_EQ(definition.kernels.count(device::DeviceKind::cpu), 1U) << name;
    EXPECT_EQ(definition.kernels.count(device::DeviceKind::sim), 1U) << name;
  }
  EXPECT_EQ(with_kernels, kKernelOps);
  EXPECT_TRUE(OpRegistry::global().get("Variable").kernels.empty());
  // The collectives (AllReduce, ReduceScatter, AllGather) are distribute's: it registers them itself
  // (tests/distribute/sharding_ops_test.cpp), so the graph layer alone does not know them.
  EXPECT_EQ(OpRegistry::global().find("AllReduce"), nullptr);
}

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t index = 0; index < actual.size(); ++index) {
    EXPECT_NEAR(actual[index], expected[index], tolerance * (1 + std::fabs(expected[index]))) << "at " << index;
  }
}

class GraphKernelTest : public testing::GraphValuesTest<> {};

TEST_F(GraphKernelTest, MatMulBiasAddReluAgainstReferences) {
  const Output a = bind("a", random_value(rng_, {3, 4}, -1, 1, 0, DType::f32));
  const Output b = bind("b", random_value(rng_, {5, 4}, -1, 1, 0, DType::f32));
  const Output bias = bind("bias", random_value(rng_, {5}, -1, 1, 0, DType::f32));
  const Output product = graph_.add("MatMul", {a, b}, {{"transpose_b", true}});
  const Output biased = graph_.add("BiasAdd", {product, bias});
  const Output relu = graph_.add("Relu", {biased});
  const Output relu_grad = graph_.add("ReluGrad", {product, biased});
  const Output bias_grad = graph_.add("BiasAddGrad", {biased});
  const auto got = testing::run_on_cpu_and_sim(graph_, values_, {product, biased, relu, relu_grad, bias_grad});
  std::vector<double> expected_product(15), expected_biased(15), expected_relu(15), expected_relu_grad(15);
  std::vector<double> expected_bias_grad(5, 0.0);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) {
      double sum = 0;
      for (int k = 0; k < 4; ++k) sum += host(a)[r * 4 + k] * host(b)[c * 4 + k];
      const auto index = static_cast<std::size_t>(r * 5 + c);
      expected_product[index] = sum;
      expected_biased[index] = sum + host(bias)[c];
      expected_relu[index] = std::max(0.0, expected_biased[index]);
      expected_relu_grad[index] = expected_biased[index] > 0 ? sum : 0.0;
      expected_bias_grad[c] += expected_biased[index];
    }
  }
  expect_close(got[0], expected_product, 1e-5);
  expect_close(got[1], expected_biased, 1e-5);
  expect_close(got[2], expected_relu, 1e-5);
  expect_close(got[3], expected_relu_grad, 1e-5);
  expect_close(got[4], expected_bias_grad, 1e-5);
}

TEST_F(GraphKernelTest, SoftmaxFamilyAndCrossEntropy) {
  const Output x = bind("x", random_value(rng_, {4, 3}, -2, 2));
  const Output labels = bind("labels", testing::labels_value(rng_, 4, 3, DType::i32));
  const Output softmax = graph_.add("Softmax", {x});
  const Output log_softmax = graph_.add("LogSoftmax", {x});
  const NodeId xent = graph_.add_node("SparseSoftmaxCrossEntropy", {x, labels});
  const NodeId from_probs =
      graph_.add_node("SparseSoftmaxCrossEntropy", {softmax, labels}, {{"input", "probabilities"}});
  const auto got =
      testing::run_on_cpu_and_sim(graph_, values_, {softmax, log_softmax, {xent, 0}, {xent, 1}, {from_probs, 0}});
  std::vector<double> expected_softmax, expected_log, expected_loss, expected_backprop;
  for (int r = 0; r < 4; ++r) {
    double total = 0;
    for (int c = 0; c < 3; ++c) total += std::exp(host(x)[r * 3 + c]);
    const auto label = static_cast<int>(host(labels)[r]);
    expected_loss.push_back(std::log(total) - host(x)[r * 3 + label]);
    for (int c = 0; c < 3; ++c) {
      expected_softmax.push_back(std::exp(host(x)[r * 3 + c]) / total);
      expected_log.push_back(host(x)[r * 3 + c] - std::log(total));
      expected_backprop.push_back(expected_softmax.back() - (c == label ? 1.0 : 0.0));
    }
  }
  expect_close(got[0], expected_softmax, 1e-12);
  expect_close(got[1], expected_log, 1e-12);
  expect_close(got[2], expected_loss, 1e-12);
  expect_close(got[3], expected_backprop, 1e-12);
  expect_close(got[4], expected_loss, 1e-12);  // the same loss from the probabilities
}

TEST_F(GraphKernelTest, ReductionsArgMaxAndCorrectCount) {
  const Output x = bind("x", random_value(rng_, {4, 5}, -3, 3));
  const Output labels = bind("labels", testing::labels_value(rng_, 4, 5));
  const Output sum = graph_.add("Sum", {x}, {{"axis", std::int64_t{1}}});
  const Output mean = graph_.add("Mean", {x}, {{"axis", std::int64_t{0}}});
  const Output max = graph_.add("Max", {x}, {{"axis", std::int64_t{-1}}});
  const Output argmax = graph_.add("ArgMax", {x}, {{"axis", std::int64_t{1}}});
  const Output correct = graph_.add("CorrectCount", {x, labels});
  const auto got = testing::run_on_cpu_and_sim(graph_, values_, {sum, mean, max, argmax, correct});
  std::vector<double> expected_sum(4, 0.0), expected_mean(5, 0.0), expected_max(4, -1e300), expected_argmax(4, 0);
  double expected_correct = 0;
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) {
      const double value = host(x)[r * 5 + c];
      expected_sum[r] += value;
      expected_mean[c] += value / 4;
      if (value > expected_max[r]) {
        expected_max[r] = value;
        expected_argmax[r] = c;
      }
    }
    expected_correct += expected_argmax[r] == host(labels)[r] ? 1 : 0;
  }
  expect_close(got[0], expected_sum, 1e-12);
  expect_close(got[1], expected_mean, 1e-12);
  EXPECT_EQ(got[2], expected_max);
  EXPECT_EQ(got[3], expected_argmax);
  EXPECT_EQ(got[4], std::vector<double>{expected_correct});
}

TEST_F(GraphKernelTest, ElementwiseWithBroadcasts) {
  const Output x = bind("x", random_value(rng_, {2, 3}, 0.5, 2));
  const Output row = bind("row", random_value(rng_, {3}, 0.5, 2));
  const Output scalar = bind("scalar", random_value(rng_, {}, 0.5, 2));
  const Output add = graph_.add("Add", {x, row});
  const Output sub = graph_.add("Sub", {x, x});
  const Output mul = graph_.add("Mul", {x, scalar});
  const Output div = graph_.add("Div", {x, row});
  const Output scale = graph_.add("Scale", {x}, {{"alpha", -2.5}});
  const Output add_n = graph_.add("AddN", {x, scale});
  const auto got = testing::run_on_cpu_and_sim(graph_, values_, {add, sub, mul, div, scale, add_n});
  for (std::size_t index = 0; index < 6; ++index) {
    const double value = host(x)[index];
    const double y = host(row)[index % 3];
    EXPECT_NEAR(got[0][index], value + y, 1e-15);
    EXPECT_EQ(got[1][index], 0.0);
    EXPECT_NEAR(got[2][index], value * host(scalar)[0], 1e-15);
    EXPECT_NEAR(got[3][index], value / y, 1e-15);
    EXPECT_NEAR(got[4][index], -2.5 * value, 1e-15);
    EXPECT_NEAR(got[5][index], -1.5 * value, 1e-15);
  }
}

TEST_F(GraphKernelTest, ArrayOpsFillAndCast) {
  const Output x = bind("x", random_value(rng_, {2, 3}, -1, 1, 0, DType::f32));
  const Output s = bind("s", random_value(rng_, {2}, -1, 1, 0, DType::f32));
  const Output reshaped = graph_.add("Reshape", {x}, {{"shape", std::vector<std::int64_t>{3, -1}}});
  const Output broadcast = graph_.add("Broadcast", {s, x}, {{"axis", std::int64_t{1}}, {"mean", true}});
  const Output scaled = graph_.add("ScaleRows", {x, s});
  const Output filled = fill(graph_, "sevens", DType::f32, {2, 2}, 7.0);
  const Output widened = graph_.add("Cast", {x}, {{"dtype", DType::f64}});
  const Output truncated = graph_.add("Cast", {x}, {{"dtype", DType::i32}});
  const auto got =
      testing::run_on_cpu_and_sim(graph_, values_, {reshaped, broadcast, scaled, filled, widened, truncated});
  std::vector<double> x_as_float;  // x holds float32 values
  for (double value : host(x)) x_as_float.push_back(static_cast<float>(value));
  EXPECT_EQ(got[0], x_as_float);
  EXPECT_EQ(got[3], std::vector<double>(4, 7.0));
  for (std::size_t index = 0; index < 6; ++index) {
    const double factor = host(s)[index / 3];
    EXPECT_NEAR(got[1][index], factor / 3, 1e-7);
    EXPECT_NEAR(got[2][index], host(x)[index] * factor, 1e-7);
    EXPECT_EQ(got[4][index], x_as_float[index]);
    EXPECT_EQ(got[5][index], 0.0);  // |x| < 1 truncates to 0
  }
}

// The optimizer ops update their inputs in place exactly as tp::ops does, on both backends.
TEST_F(GraphKernelTest, ApplySgdAndApplyAdamMatchTheTensorOps) {
  const HostValue initial = random_value(rng_, {3, 2});
  const HostValue gradient = random_value(rng_, {3, 2});
  const HostValue zeros{std::vector<double>(6, 0.0), DType::f64, {3, 2}};
  const Output var = bind("var", initial);
  const Output grad = bind("grad", gradient);
  const Output velocity = bind("velocity", zeros);
  const Output var2 = bind("var2", initial);
  const Output m = bind("m", zeros);
  const Output v = bind("v", zeros);
  graph_.add_node("ApplySgd", {var, grad, velocity}, {{"learning_rate", 0.1}, {"momentum", 0.9}, {"nesterov", true}});
  graph_.add_node("ApplyAdam", {var2, grad, m, v}, {{"learning_rate", 0.01}});
  for (const Backend backend : device::testing::present_backends()) {
    SCOPED_TRACE(device::testing::backend_label(backend));
    auto device = make_device(backend);
    const auto bindings = testing::to_tensors(values_, *device);
    for (std::int64_t step = 1; step <= 3; ++step) run_graph(graph_, *device, bindings, step);
    const Tensor expected_var = testing::to_tensor(initial, *device);
    const Tensor expected_velocity = testing::to_tensor(zeros, *device);
    const Tensor expected_var2 = testing::to_tensor(initial, *device);
    const Tensor expected_m = testing::to_tensor(zeros, *device);
    const Tensor expected_v = testing::to_tensor(zeros, *device);
    const Tensor g = testing::to_tensor(gradient, *device);
    for (std::int64_t step = 1; step <= 3; ++step) {
      tp::ops::sgd_update(expected_var, g, expected_velocity,
                          {.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
      tp::ops::adam_update(expected_var2, g, expected_m, expected_v, step, {.learning_rate = 0.01});
    }
    EXPECT_EQ(bindings.at(var.node).to_vector<double>(), expected_var.to_vector<double>());
    EXPECT_EQ(bindings.at(velocity.node).to_vector<double>(), expected_velocity.to_vector<double>());
    EXPECT_EQ(bindings.at(var2.node).to_vector<double>(), expected_var2.to_vector<double>());
    EXPECT_EQ(bindings.at(m.node).to_vector<double>(), expected_m.to_vector<double>());
    EXPECT_EQ(bindings.at(v.node).to_vector<double>(), expected_v.to_vector<double>());
    EXPECT_NE(bindings.at(var.node).to_vector<double>(), initial.values);
    tp_test::expect_invalid([&] { run_graph(graph_, *device, bindings, 0); }, {"ApplyAdam 'ApplyAdam'", "step 0"});
  }
}

// The multi-tensor optimizer ops update every entry bitwise as one single-update node per entry would, a
// sliced entry included (a range of a flat gradient, as a bucket's), on both backends.
TEST_F(GraphKernelTest, ApplySgdMultiAndApplyAdamMultiMatchTheSingleUpdates) {
  const HostValue first = random_value(rng_, {3, 2});
  const HostValue second = random_value(rng_, {4});
  const HostValue bucket = random_value(rng_, {11});  // entry 1's gradient is bucket[5, 9)
  const HostValue gradient = random_value(rng_, {3, 2});
  auto zeros = [](std::vector<std::int64_t> dims, std::size_t n) {
    return HostValue{std::vector<double>(n, 0.0), DType::f64, std::move(dims)};
  };
  std::map<std::string, Output> multi, single;
  for (const char* name : {"sgd_a", "sgd_b", "adam_a", "adam_b"}) {
    const bool a = std::string(name).ends_with("_a");
    for (auto* outputs : {&multi, &single}) {
      const std::string prefix = outputs == &multi ? "multi_" : "single_";
      (*outputs)[name] = bind(prefix + name, a ? first : second);
      for (const char* slot : {"_s0", "_s1"}) {
        (*outputs)[std::string(name) + slot] = bind(prefix + name + slot, a ? zeros({3, 2}, 6) : zeros({4}, 4));
      }
    }
  }
  const Output grad = bind("grad", gradient);
  const Output flat = bind("bucket", bucket);
  const std::vector<std::int64_t> slices{0, 6, 0, 0, 0, 4, 5, 0};
  const Attributes sgd{{"learning_rate", 0.1}, {"momentum", 0.9}, {"nesterov", true}};
  Attributes sgd_multi = sgd, adam_multi{{"learning_rate", 0.01}};
  sgd_multi["slices"] = slices;
  adam_multi["slices"] = slices;
  graph_.add_node("ApplySgdMulti", {multi["sgd_a"], multi["sgd_b"], grad, flat, multi["sgd_a_s0"], multi["sgd_b_s0"]},
                  sgd_multi);
  graph_.add_node("ApplyAdamMulti",
                  {multi["adam_a"], multi["adam_b"], grad, flat, multi["adam_a_s0"], multi["adam_b_s0"],
                   multi["adam_a_s1"], multi["adam_b_s1"]},
                  adam_multi);
  Attributes sliced_sgd = sgd, sliced_adam{{"learning_rate", 0.01}};
  sliced_sgd["slice"] = std::vector<std::int64_t>{0, 4, 5, 0};
  sliced_adam["slice"] = std::vector<std::int64_t>{0, 4, 5, 0};
  graph_.add_node("ApplySgd", {single["sgd_a"], grad, single["sgd_a_s0"]}, sgd);
  graph_.add_node("ApplySgd", {single["sgd_b"], flat, single["sgd_b_s0"]}, sliced_sgd);
  graph_.add_node("ApplyAdam", {single["adam_a"], grad, single["adam_a_s0"], single["adam_a_s1"]},
                  {{"learning_rate", 0.01}});
  graph_.add_node("ApplyAdam", {single["adam_b"], flat, single["adam_b_s0"], single["adam_b_s1"]}, sliced_adam);
  for (const Backend backend : device::testing::present_backends()) {
    SCOPED_TRACE(device::testing::backend_label(backend));
    auto device = make_device(backend);
    const auto bindings = testing::to_tensors(values_, *device);
    for (std::int64_t step = 1; step <= 3; ++step) run_graph(graph_, *device, bindings, step);
    for (const auto& [name, output] : multi) {
      EXPECT_EQ(bindings.at(output.node).to_vector<double>(), bindings.at(single.at(name).node).to_vector<double>())
          << name;
    }
    EXPECT_NE(bindings.at(multi["adam_b"].node).to_vector<double>(), second.values) << "it did update";
  }
  Graph bad;
  const Output var = variable(bad, "var", DType::f64, {2});
  const Output other = variable(bad, "other", DType::f64, {3});
  tp_test::expect_invalid([&] { bad.add_node("ApplyAdamMulti", {var, var, var}); }, {"3 inputs", "4 lists"});
  tp_test::expect_invalid([&] { bad.add_node("ApplySgdMulti", {var, other, var}); }, {"grad", "float64[3]"});
}

}  // namespace
}  // namespace tp::graph
