// SPDX-License-Identifier: Apache-2.0
// Type inference of every built-in op at build time (with -1 batch dims) and specialisation with feeds
// (infer_types): good feeds fix every dim; bad feeds (dtype, rank, known dims, missing, non-placeholder) and
// shapes that only clash once known raise naming the node.

#include <gtest/gtest.h>

#include "graph/support/graph_test_support.hpp"

namespace tp::graph {
namespace {

using testing::expect_invalid;

std::vector<std::int64_t> ints(std::initializer_list<std::int64_t> values) { return values; }

std::string type_string(const Graph& graph, Output output) { return graph.type_of(output).to_string(); }

TEST(TypeInference, NeuralNetworkOpsKeepUnknownBatch) {
  Graph graph;
  const Output x = placeholder(graph, "x", DType::f32, {-1, 6});
  const Output w = variable(graph, "w", DType::f32, {6, 5});
  const Output b = variable(graph, "b", DType::f32, {5});
  const Output h = graph.add("MatMul", {x, w});
  EXPECT_EQ(type_string(graph, h), "float32[-1,5]");
  EXPECT_EQ(type_string(graph, graph.add("MatMul", {w, x}, {{"transpose_a", true}, {"transpose_b", true}})),
            "float32[5,-1]");
  EXPECT_EQ(type_string(graph, graph.add("MatMul", {x, x}, {{"transpose_a", true}})), "float32[6,6]");
  const Output biased = graph.add("BiasAdd", {h, b});
  EXPECT_EQ(type_string(graph, biased), "float32[-1,5]");
  EXPECT_EQ(type_string(graph, graph.add("BiasAddGrad", {biased})), "float32[5]");
  const Output relu = graph.add("Relu", {biased});
  EXPECT_EQ(type_string(graph, graph.add("ReluGrad", {relu, biased})), "float32[-1,5]");
  EXPECT_EQ(type_string(graph, graph.add("Softmax", {relu})), "float32[-1,5]");
  EXPECT_EQ(type_string(graph, graph.add("LogSoftmax", {relu})), "float32[-1,5]");
  const Output labels = placeholder(graph, "labels", DType::i32, {8});
  const NodeId xent = graph.add_node("SparseSoftmaxCrossEntropy", {relu, labels});
  EXPECT_EQ(type_string(graph, {xent, 0}), "float32[8]");  // the labels fix the batch
  EXPECT_EQ(type_string(graph, {xent, 1}), "float32[8,5]");
  EXPECT_EQ(type_string(graph, graph.add("CorrectCount", {relu, labels})), "float32[]");
  EXPECT_EQ(type_string(graph, graph.add("ScaleRows", {relu, Output{xent, 0}})), "float32[8,5]");
}

TEST(TypeInference, ReductionsElementwiseAndArrayOps) {
  Graph graph;
  const Output x = placeholder(graph, "x", DType::f64, {-1, 3, 4});
  EXPECT_EQ(type_string(graph, graph.add("Sum", {x}, {{"axis", std::int64_t{0}}})), "float64[3,4]");
  EXPECT_EQ(type_string(graph, graph.add("Mean", {x}, {{"axis", std::int64_t{-1}}})), "float64[-1,3]");
  EXPECT_EQ(type_string(graph, graph.add("Max", {x}, {{"axis", std::int64_t{1}}})), "float64[-1,4]");
  const Output arg = graph.add("ArgMax", {x}, {{"axis", std::int64_t{2}}});
  EXPECT_EQ(type_string(graph, arg), "int64[-1,3]");
  const Output row = variable(graph, "row", DType::f64, {4});
  const Output scalar = variable(graph, "scalar", DType::f64, {});
  const Output same = placeholder(graph, "same", DType::f64, {5, 3, -1});
  EXPECT_EQ(type_string(graph, graph.add("Add", {x, row})), "float64[-1,3,4]");
  EXPECT_EQ(type_string(graph, graph.add("Div", {x, scalar})), "float64[-1,3,4]");
  EXPECT_EQ(type_string(graph, graph.add("Mul", {x, same})), "float64[5,3,4]");  // merged
  EXPECT_EQ(type_string(graph, graph.add("AddN", {x, same})), "float64[5,3,4]");
  EXPECT_EQ(type_string(graph, graph.add("Scale", {x}, {{"alpha", 2.0}})), "float64[-1,3,4]");
  EXPECT_EQ(type_string(graph, graph.add("Cast", {x}, {{"dtype", DType::f32}})), "float32[-1,3,4]");
  EXPECT_EQ(type_string(graph, graph.add("Cast", {arg}, {{"dtype", DType::f64}})), "float64[-1,3]");
  EXPECT_EQ(type_string(graph, graph.add("Reshape", {x}, {{"shape", ints({-1, 12})}})), "float64[-1,12]");
  EXPECT_EQ(type_string(graph, graph.add("Reshape", {same}, {{"shape", ints({15, -1})}})), "float64[15,-1]");
  const Output full = variable(graph, "full", DType::f64, {2, 6});
  EXPECT_EQ(type_string(graph, graph.add("Reshape", {full}, {{"shape", ints({3, -1})}})), "float64[3,4]");
  const Output reduced = graph.add("Sum", {x}, {{"axis", std::int64_t{1}}});
  EXPECT_EQ(type_string(graph, graph.add("Broadcast", {reduced, x}, {{"axis", std::int64_t{1}}, {"mean", true}})),
            "float64[-1,3,4]");
  EXPECT_EQ(type_string(graph, fill(graph, "ones", DType::f64, {2, 2}, 1.0)), "float64[2,2]");
  expect_invalid(
      [&] {
        graph.add("Broadcast", {reduced, x}, {{"axis", std::int64_t{2}}}, "bcast");
      },
      {"Broadcast 'bcast'", "dy float64[-1,4] does not match like float64[-1,3,4] without axis 2"});
  expect_invalid(
      [&] {
        graph.add("Mul", {x, variable(graph, "col", DType::f64, {3})}, {}, "mul");
      },
      {"Mul 'mul'", "do not broadcast"});
}

TEST(TypeInference, OptimizerOpsCheckSlotsAndHyperparameters) {
  Graph graph;
  const Output var = variable(graph, "var", DType::f32, {3, 2});
  const Output grad = placeholder(graph, "grad", DType::f32, {-1, 2});
  const NodeId sgd = graph.add_node("ApplySgd", {var, grad, var}, {{"momentum", 0.9}});
  EXPECT_TRUE(graph.node(sgd).outputs.empty());
  graph.add_node("ApplyAdam", {var, grad, var, var});
  const Output wrong = variable(graph, "wrong", DType::f32, {2, 3});
  expect_invalid(
      [&] {
        graph.add_node("ApplyAdam", {var, wrong, var, var}, {}, "adam");
      },
      {"ApplyAdam 'adam'", "var float32[3,2] and grad float32[2,3]"});
  expect_invalid(
      [&] {
        graph.add_node("ApplyAdam", {var, grad, var, var}, {{"beta1", 1.0}}, "adam");
      },
      {"ApplyAdam 'adam'", "'beta1' = 1", "[0, 1)"});
  expect_invalid(
      [&] {
        graph.add_node("ApplySgd", {var, grad, var}, {{"learning_rate", -0.1}}, "sgd");
      },
      {"ApplySgd 'sgd'", "'learning_rate' = -0.1"});
}

// The MLP of the Keras example, built with an unknown batch and specialised for batch 32.
class Specialisation : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = placeholder(graph_, "x", DType::f32, {-1, 784});
    labels_ = placeholder(graph_, "labels", DType::i64, {-1});
    const Output w = variable(graph_, "w", DType::f32, {784, 10});
    logits_ = graph_.add("MatMul", {x_, w}, {}, "dense/MatMul");
    loss_ = graph_.add_node("SparseSoftmaxCrossEntropy", {logits_, labels_}, {}, "xent");
    mean_ = graph_.add("Mean", {Output{loss_, 0}}, {{"axis", std::int64_t{0}}}, "loss");
  }
  std::map<NodeId, TensorType> feeds(std::vector<std::int64_t> x_dims, std::int64_t labels = 32) {
    return {{x_.node, TensorType{DType::f32, std::move(x_dims)}}, {labels_.node, TensorType{DType::i64, {labels}}}};
  }
  Graph graph_;
  Output x_, labels_, logits_, mean_;
  NodeId loss_ = -1;
};

TEST_F(Specialisation, GoodFeedsFixEveryDim) {
  const auto types = infer_types(graph_, feeds({32, 784}));
  ASSERT_EQ(types.size(), graph_.size());
  EXPECT_EQ(types[static_cast<std::size_t>(logits_.node)][0].to_string(), "float32[32,10]");
  EXPECT_EQ(types[static_cast<std::size_t>(loss_)][1].to_string(), "float32[32,10]");
  EXPECT_EQ(types[static_cast<std::size_t>(mean_.node)][0].to_string(), "float32[]");
  for (const auto& outputs : types) {
    for (const TensorType& type : outputs) EXPECT_TRUE(type.fully_defined()) << type;
  }
  EXPECT_EQ(graph_.type_of(logits_).to_string(), "float32[-1,10]");  // the graph itself is unchanged
}

TEST_F(Specialisation, BadFeedsNameThePlaceholderAndBothTypes) {
  expect_invalid(
      [&] {
        (void)infer_types(graph_, feeds({32, 785}));
      },
      {"Placeholder 'x'", "declared float32[-1,784] but fed float32[32,785]", "dim 1 is 784 but 785"});
  expect_invalid([&] { (void)infer_types(graph_, feeds({32, 784, 1})); }, {"Placeholder 'x'", "rank 3 is not 2"});
  expect_invalid([&] { (void)infer_types(graph_, feeds({-1, 784})); }, {"Placeholder 'x'", "dim 0 is unknown"});
  auto wrong_dtype = feeds({32, 784});
  wrong_dtype[x_.node].dtype = DType::f64;
  expect_invalid([&] { (void)infer_types(graph_, wrong_dtype); },
                 {"Placeholder 'x'", "fed float64[32,784]", "dtype float64 is not float32"});
  expect_invalid(
      [&] {
        (void)infer_types(graph_, {{x_.node, TensorType{DType::f32, {32, 784}}}});
      },
      {"Placeholder 'labels'", "missing feed", "int64[-1]"});
  auto not_placeholder = feeds({32, 784});
  not_placeholder[logits_.node] = TensorType{DType::f32, {32, 10}};
  expect_invalid([&] { (void)infer_types(graph_, not_placeholder); },
                 {"MatMul 'dense/MatMul'", "only Placeholder nodes take feeds"});
}

TEST_F(Specialisation, ShapesThatClashOnlyOnceKnown) {
  // Batch 32 of inputs with 64 labels: fine at build time (-1 vs -1), an error once fed.
  expect_invalid(
      [&] {
        (void)infer_types(graph_, feeds({32, 784}, 64));
      },
      {"SparseSoftmaxCrossEntropy 'xent'", "input float32[32,10] and labels int64[64]", "32 rows but 64"});
}

TEST_F(Specialisation, OnlyNeededNodesMustBeFed) {
  const std::vector<bool> needed = ancestors(graph_, std::vector<NodeId>{logits_.node});
  EXPECT_FALSE(needed[static_cast<std::size_t>(labels_.node)]);
  const auto types = infer_types(graph_, {{x_.node, TensorType{DType::f32, {16, 784}}}}, needed);
  EXPECT_EQ(types[static_cast<std::size_t>(logits_.node)][0].to_string(), "float32[16,10]");
  EXPECT_EQ(types[static_cast<std::size_t>(loss_)][0].to_string(), "float32[-1]");  // not needed: build-time type
  expect_invalid([&] { (void)infer_types(graph_, {}, needed); }, {"Placeholder 'x'", "missing feed"});
  expect_invalid([&] { (void)infer_types(graph_, {}, std::vector<bool>(2, true)); }, {"2 needed-flags", "6 nodes"});
}

TEST(TypeInference, ReshapeResolvesOnceFedAndFeedsMustBeNodes) {
  Graph graph;
  const Output x = placeholder(graph, "x", DType::f32, {-1, 4});
  const Output reshaped = graph.add("Reshape", {x}, {{"shape", ints({-1, 2})}});
  graph.add("Sum", {reshaped}, {{"axis", std::int64_t{1}}}, "rows");
  const auto types = infer_types(graph, {{x.node, TensorType{DType::f32, {3, 4}}}});
  EXPECT_EQ(types[static_cast<std::size_t>(reshaped.node)][0].to_string(), "float32[6,2]");
  expect_invalid(
      [&] {
        (void)infer_types(graph, {{x.node, TensorType{DType::f32, {3, 4}}}, {x.node + 5, TensorType{}}});
      },
      {"node id 5"});
}

}  // namespace
}  // namespace tp::graph
