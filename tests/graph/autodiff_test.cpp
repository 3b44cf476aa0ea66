// SPDX-License-Identifier: Apache-2.0
// The structure autodiff builds: the seed, names, placement inherited from forward nodes, AddN accumulation,
// pruning to the xs' paths, and the errors (non-scalar y, non-differentiable ops on the path, gradients into
// the cross-entropy's backprop output).

#include <gtest/gtest.h>

#include "graph/support/graph_test_support.hpp"

namespace tp::graph {
namespace {

using testing::expect_invalid;

std::size_t count_ops(const Graph& graph, std::string_view op, NodeId from = 0) {
  std::size_t count = 0;
  for (const Node& node : graph.nodes()) count += node.id >= from && node.op == op ? 1 : 0;
  return count;
}

class Autodiff : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = placeholder(graph_, "x", DType::f64, {-1, 4});
    w_ = variable(graph_, "dense/kernel", DType::f64, {4, 3});
    b_ = variable(graph_, "dense/bias", DType::f64, {3});
    const Output product = graph_.add("MatMul", {x_, w_}, {}, "dense/MatMul");
    logits_ = graph_.add("BiasAdd", {product, b_}, {}, "dense/BiasAdd");
    labels_ = placeholder(graph_, "labels", DType::i64, {-1});
    xent_ = graph_.add_node("SparseSoftmaxCrossEntropy", {logits_, labels_}, {}, "xent");
    loss_ = graph_.add("Mean", {Output{xent_, 0}}, {{"axis", std::int64_t{0}}}, "loss");
  }
  Graph graph_;
  Output x_, w_, b_, logits_, labels_, loss_;
  NodeId xent_ = -1;
};

TEST_F(Autodiff, BuildsNamedGradientNodesWithTheForwardTypes) {
  const NodeId first = static_cast<NodeId>(graph_.size());
  const std::vector<Output> xs = {w_, b_};
  const auto grads = gradients(graph_, loss_, xs);
  ASSERT_EQ(grads.size(), 2U);
  ASSERT_TRUE(grads[0] && grads[1]);
  EXPECT_EQ(graph_.type_of(*grads[0]), graph_.type_of(w_));
  EXPECT_EQ(graph_.type_of(*grads[1]), graph_.type_of(b_));
  EXPECT_EQ(graph_.node(grads[0]->node).name, "gradients/dense/MatMul/MatMul");
  EXPECT_EQ(graph_.node(grads[1]->node).name, "gradients/dense/BiasAdd/BiasAddGrad");
  EXPECT_EQ(graph_.node(first).name, "gradients/loss/Fill");
  EXPECT_EQ(graph_.node(first).outputs[0].to_string(), "float64[]");
  EXPECT_TRUE(graph_.find("gradients/loss/Broadcast").has_value());
  EXPECT_TRUE(graph_.find("gradients/xent/ScaleRows").has_value());
  for (NodeId id = first; id < static_cast<NodeId>(graph_.size()); ++id) {
    EXPECT_EQ(graph_.node(id).name.rfind("gradients/", 0), 0U) << graph_.node(id).name;
  }
  // Only w's gradient is a MatMul: x is a placeholder nobody asked about, so dx is never built.
  EXPECT_EQ(count_ops(graph_, "MatMul", first), 1U);
  EXPECT_NO_THROW(graph_.validate());
}

TEST_F(Autodiff, GradientsInheritDeviceAndColocationGroup) {
  for (const char* name : {"dense/MatMul", "dense/BiasAdd"}) {
    Node& node = graph_.mutable_node(*graph_.find(name));
    node.device = "sim:1";
    node.colocation_group = "dense";
  }
  graph_.mutable_node(loss_.node).device = "cpu:0";
  const std::vector<Output> xs = {w_, b_};
  const auto grads = gradients(graph_, loss_, xs);
  const Node& dw = graph_.node(grads[0]->node);
  EXPECT_EQ(dw.device, "sim:1");
  EXPECT_EQ(dw.colocation_group, "dense");
  EXPECT_EQ(graph_.node(grads[1]->node).device, "sim:1");
  EXPECT_EQ(graph_.node(*graph_.find("gradients/loss/Fill")).device, "cpu:0");
  EXPECT_EQ(graph_.node(*graph_.find("gradients/loss/Broadcast")).device, "cpu:0");
  EXPECT_EQ(graph_.node(*graph_.find("gradients/xent/ScaleRows")).device, "");
  EXPECT_EQ(graph_.node(*graph_.find("gradients/xent/ScaleRows")).colocation_group, "");
}

TEST_F(Autodiff, UnrelatedXsGetNulloptAndYItselfGetsTheSeed) {
  const Output other = variable(graph_, "other", DType::f64, {2});
  const std::vector<Output> xs = {other, loss_, w_};
  const auto grads = gradients(graph_, loss_, xs);
  EXPECT_FALSE(grads[0].has_value());
  ASSERT_TRUE(grads[1].has_value());
  EXPECT_EQ(graph_.node(grads[1]->node).op, "Fill");
  EXPECT_TRUE(grads[2].has_value());

  Graph constant_graph;
  const Output c = fill(constant_graph, "c", DType::f32, {}, 2.0);
  const Output v = variable(constant_graph, "v", DType::f32, {});
  const std::vector<Output> only_v = {v};
  EXPECT_FALSE(gradients(constant_graph, c, only_v)[0].has_value());
  EXPECT_EQ(constant_graph.size(), 2U);  // nothing added when y does not depend on any x
}

TEST_F(Autodiff, MultipleContributionsAreSummedWithAddN) {
  Graph graph;
  const Output x = variable(graph, "x", DType::f64, {3});
  const Output square = graph.add("Mul", {x, x}, {}, "square");
  const Output y = graph.add("Sum", {graph.add("Add", {square, x}, {}, "plus")}, {{"axis", std::int64_t{0}}});
  const std::vector<Output> xs = {x};
  const auto grads = gradients(graph, y, xs);
  EXPECT_EQ(count_ops(graph, "AddN"), 2U);  // two contributions from square, then plus's
  ASSERT_TRUE(grads[0].has_value());
  EXPECT_EQ(graph.node(grads[0]->node).op, "AddN");
  EXPECT_EQ(graph.node(grads[0]->node).name.rfind("gradients/x/AddN", 0), 0U);
  EXPECT_NO_THROW(graph.validate());
}

TEST_F(Autodiff, YMustBeAFloatingScalar) {
  const std::vector<Output> xs = {w_};
  expect_invalid([&] { (void)gradients(graph_, logits_, xs); },
                 {"BiasAdd 'dense/BiasAdd'", "float64[-1,3]", "must be a floating scalar"});
  Graph graph;
  const Output ids = variable(graph, "ids", DType::i64, {});
  expect_invalid([&] { (void)gradients(graph, ids, std::vector<Output>{ids}); }, {"Variable 'ids'", "int64[]"});
  expect_invalid([&] { (void)gradients(graph_, loss_, std::vector<Output>{Output{99, 0}}); }, {"node id 99"});
}

TEST_F(Autodiff, NonDifferentiableOpsOnThePathNameTheNodeAndOp) {
  const Output row_max = graph_.add("Max", {logits_}, {{"axis", std::int64_t{1}}}, "row_max");
  const Output total = graph_.add("Sum", {row_max}, {{"axis", std::int64_t{0}}}, "total");
  const std::vector<Output> xs = {w_};
  expect_invalid([&] { (void)gradients(graph_, total, xs); },
                 {"Max 'row_max'", "op 'Max' is not differentiable", "Sum 'total'"});
  const Output correct = graph_.add("CorrectCount", {logits_, labels_}, {}, "correct");
  expect_invalid([&] { (void)gradients(graph_, correct, xs); }, {"CorrectCount 'correct'", "not differentiable"});
  // An integer detour carries no gradient, so w is simply not reached: nullopt, no error.
  const Output argmax = graph_.add("ArgMax", {logits_}, {{"axis", std::int64_t{1}}});
  const Output as_float = graph_.add("Cast", {argmax}, {{"dtype", DType::f64}});
  const Output sum = graph_.add("Sum", {as_float}, {{"axis", std::int64_t{0}}});
  EXPECT_FALSE(gradients(graph_, sum, xs)[0].has_value());
}

TEST_F(Autodiff, TheBackpropOutputIsNotDifferentiable) {
  const Output backprop_sum = graph_.add("Sum", {Output{xent_, 1}}, {{"axis", std::int64_t{1}}});
  const Output total = graph_.add("Sum", {backprop_sum}, {{"axis", std::int64_t{0}}});
  const std::vector<Output> xs = {w_};
  expect_invalid([&] { (void)gradients(graph_, total, xs); },
                 {"SparseSoftmaxCrossEntropy 'xent'", "output 1 (backprop)"});
}

TEST(AutodiffLabels, LabelsAndIntegerInputsGetNoGradient) {
  Graph graph;
  const Output logits = variable(graph, "logits", DType::f64, {2, 3});
  const Output labels = variable(graph, "labels", DType::i32, {2});
  const NodeId xent = graph.add_node("SparseSoftmaxCrossEntropy", {logits, labels});
  const Output y = graph.add("Sum", {Output{xent, 0}}, {{"axis", std::int64_t{0}}});
  const std::vector<Output> xs = {logits, labels};
  const auto grads = gradients(graph, y, xs);
  EXPECT_TRUE(grads[0].has_value());
  EXPECT_FALSE(grads[1].has_value());
}

}  // namespace
}  // namespace tp::graph
