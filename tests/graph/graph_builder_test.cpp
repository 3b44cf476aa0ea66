// SPDX-License-Identifier: Apache-2.0
// Building graphs: names, inference at add(), attribute getters, and every validation error naming the node
// and the mismatch (unknown op, arity, bad references, later nodes, cycles, duplicate names, type mismatches).

#include <gtest/gtest.h>

#include "graph/support/graph_test_support.hpp"
#include "tensorpool/graph/attributes.hpp"

namespace tp::graph {
namespace {

using testing::expect_invalid;

std::vector<std::int64_t> ints(std::initializer_list<std::int64_t> values) { return values; }

TEST(GraphBuilder, AddsNodesWithInferredTypesAndUniqueNames) {
  Graph graph;
  const Output x = placeholder(graph, "x", DType::f32, {-1, 784});
  const Output w = variable(graph, "w", DType::f32, {784, 10});
  const Output y = graph.add("MatMul", {x, w}, {}, "dense/MatMul");
  const Output y2 = graph.add("MatMul", {x, w}, {}, "dense/MatMul");
  const Output r = graph.add("Relu", {y});
  EXPECT_EQ(graph.size(), 5U);
  EXPECT_EQ(graph.node(y2.node).name, "dense/MatMul_1");
  EXPECT_EQ(graph.node(r.node).name, "Relu");
  EXPECT_EQ(graph.type_of(y).to_string(), "float32[-1,10]");
  EXPECT_FALSE(graph.type_of(y).fully_defined());
  EXPECT_EQ(graph.find("dense/MatMul_1"), y2.node);
  EXPECT_FALSE(graph.find("nope").has_value());
  EXPECT_EQ(graph.node(w.node).op, "Variable");
  EXPECT_NO_THROW(graph.validate());
  expect_invalid([&] { (void)graph.type_of(y).shape(); }, {"float32[-1,10]", "unknown"});
  EXPECT_EQ(graph.type_of(w).shape(), (Shape{784, 10}));
}

TEST(GraphBuilder, MultiOutputAndControlInputs) {
  Graph graph;
  const Output logits = placeholder(graph, "logits", DType::f64, {-1, 3});
  const Output labels = placeholder(graph, "labels", DType::i32, {-1});
  const NodeId loss = graph.add_node("SparseSoftmaxCrossEntropy", {logits, labels}, {}, "xent", {labels.node});
  EXPECT_EQ(graph.type_of({loss, 0}).to_string(), "float64[-1]");
  EXPECT_EQ(graph.type_of({loss, 1}).to_string(), "float64[-1,3]");
  EXPECT_EQ(graph.node(loss).control_inputs, std::vector<NodeId>{labels.node});
  expect_invalid([&] { (void)graph.type_of({loss, 2}); }, {"SparseSoftmaxCrossEntropy 'xent'", "no output 2"});
  expect_invalid([&] { (void)graph.node(17); }, {"node id 17"});
  const std::vector<bool> needed = ancestors(graph, std::vector<NodeId>{loss});
  EXPECT_EQ(needed, (std::vector<bool>{true, true, true}));
}

TEST(GraphBuilder, UnknownOpListsTheRegisteredOnes) {
  Graph graph;
  const Output x = placeholder(graph, "x", DType::f32, {2});
  expect_invalid([&] { graph.add("Frobnicate", {x}, {}, "mystery"); },
                 {"[graph]", "Frobnicate 'mystery'", "unknown op 'Frobnicate'", "MatMul", "Relu", "ApplyAdam"});
  EXPECT_EQ(graph.size(), 1U);  // unchanged
  expect_invalid([] { (void)OpRegistry::global().get("Frobnicate"); }, {"unknown op 'Frobnicate'", "BiasAdd"});
}

TEST(GraphBuilder, WrongArityAndBadReferencesNameTheNode) {
  Graph graph;
  const Output x = placeholder(graph, "x", DType::f32, {2, 2});
  expect_invalid([&] { graph.add("MatMul", {x}, {}, "lonely"); }, {"MatMul 'lonely'", "takes 2 input(s)", "1 were"});
  expect_invalid(
      [&] {
        graph.add("Relu", {Output{5, 0}}, {}, "ahead");
      },
      {"Relu 'ahead'", "input 0 refers to node 5", "earlier"});
  expect_invalid(
      [&] {
        graph.add("Relu", {Output{x.node, 1}}, {}, "second");
      },
      {"Relu 'second'", "output 1 of Placeholder 'x'", "1 output(s)"});
  expect_invalid([&] { graph.add("Relu", {x}, {}, "controlled", {3}); }, {"Relu 'controlled'", "control input 3"});
}

TEST(GraphBuilder, TypeMismatchesNameTheNodeAndBothTypes) {
  Graph graph;
  const Output x = placeholder(graph, "x", DType::f32, {32, 784});
  const Output w = variable(graph, "w", DType::f32, {512, 10});
  expect_invalid(
      [&] {
        graph.add("MatMul", {x, w}, {}, "dense/MatMul");
      },
      {"MatMul 'dense/MatMul': a float32[32,784] and b float32[512,10]: inner dimensions 784 and 512 differ"});
  const Output w64 = variable(graph, "w64", DType::f64, {784, 10});
  expect_invalid(
      [&] {
        graph.add("MatMul", {x, w64}, {}, "mixed");
      },
      {"MatMul 'mixed'", "float32[32,784]", "float64[784,10]", "share a dtype"});
  const Output bias = variable(graph, "bias", DType::f32, {11});
  const Output h = graph.add("MatMul", {x, variable(graph, "w2", DType::f32, {784, 10})});
  expect_invalid(
      [&] {
        graph.add("BiasAdd", {h, bias}, {}, "dense/BiasAdd");
      },
      {"BiasAdd 'dense/BiasAdd'", "bias size 11", "column count 10"});
  expect_invalid([&] { graph.add("Add", {h, bias}, {}, "plus"); }, {"Add 'plus'", "do not broadcast"});
  const Output labels = placeholder(graph, "labels", DType::f32, {32});
  expect_invalid(
      [&] {
        graph.add_node("SparseSoftmaxCrossEntropy", {h, labels}, {}, "loss");
      },
      {"SparseSoftmaxCrossEntropy 'loss'", "labels float32[32]", "int32 or int64"});
  expect_invalid(
      [&] {
        graph.add("Sum", {h}, {{"axis", std::int64_t{2}}}, "total");
      },
      {"Sum 'total'", "axis 2 is out of range", "float32[32,10]"});
  expect_invalid(
      [&] {
        graph.add("Reshape", {h}, {{"shape", ints({3, -1})}}, "bad_reshape");
      },
      {"Reshape 'bad_reshape'", "320 elements", "[3,-1]"});
  const Output ids = placeholder(graph, "ids", DType::i64, {4});
  expect_invalid([&] { graph.add("Relu", {ids}, {}, "int_relu"); },
                 {"Relu 'int_relu'", "int64[4]", "float32 or float64"});
}

TEST(GraphBuilder, AttributeGettersNameTheNodeAttributeAndType) {
  Graph graph;
  const Output x = placeholder(graph, "x", DType::f32, {2, 2});
  expect_invalid(
      [&] {
        graph.add("MatMul", {x, x}, {{"transpose_a", std::int64_t{1}}}, "mm");
      },
      {"MatMul 'mm'", "attribute 'transpose_a' holds int64 1 but bool is expected"});
  expect_invalid([&] { graph.add("Sum", {x}, {}, "no_axis"); }, {"Sum 'no_axis'", "missing required attribute 'axis'"});
  expect_invalid(
      [&] {
        graph.add("Placeholder", {}, {{"dtype", DType::f32}, {"shape", ints({-2})}}, "neg");
      },
      {"Placeholder 'neg'", "dim 0 = -2"});
  expect_invalid(
      [&] {
        graph.add("Variable", {}, {{"dtype", DType::f32}, {"shape", ints({-1, 3})}}, "var");
      },
      {"Variable 'var'", "fully defined"});
  expect_invalid(
      [&] {
        graph.add("Fill", {}, {{"dtype", DType::i32}, {"shape", ints({})}, {"value", 1.0}}, "f");
      },
      {"Fill 'f'", "int32"});
  expect_invalid(
      [&] {
        graph.add_node("SparseSoftmaxCrossEntropy", {x, x}, {{"input", "odds"}}, "xe");
      },
      {"SparseSoftmaxCrossEntropy 'xe'", "'odds'", "'logits' or 'probabilities'"});

  Node node;
  node.name = "n";
  node.op = "Op";
  node.attributes = {{"i", std::int64_t{3}}, {"f", 0.5},           {"b", true},
                     {"s", "text"},          {"v", ints({1, -1})}, {"d", DType::i32}};
  EXPECT_EQ(attribute_int(node, "i"), 3);
  EXPECT_EQ(attribute_int(node, "missing", 7), 7);
  EXPECT_EQ(attribute_float(node, "f"), 0.5);
  EXPECT_EQ(attribute_float(node, "i"), 3.0);  // int64 widens to float
  EXPECT_TRUE(attribute_bool(node, "b"));
  EXPECT_FALSE(attribute_bool(node, "missing", false));
  EXPECT_EQ(attribute_string(node, "s"), "text");
  EXPECT_EQ(attribute_string(node, "missing", "dflt"), "dflt");
  EXPECT_EQ(attribute_ints(node, "v"), ints({1, -1}));
  EXPECT_EQ(attribute_dtype(node, "d"), DType::i32);
  EXPECT_EQ(attribute_dtype(node, "missing", DType::f64), DType::f64);
  expect_invalid([&] { (void)attribute_int(node, "f"); }, {"Op 'n'", "attribute 'f' holds float 0.5 but int64"});
  expect_invalid([&] { (void)attribute_string(node, "v"); }, {"attribute 'v' holds ints [1,-1] but string"});
  expect_invalid([&] { (void)attribute_dtype(node, "s"); }, {"attribute 's' holds string 'text' but dtype"});
  expect_invalid([&] { (void)attribute_ints(node, "d", {}); }, {"attribute 'd' holds dtype int32 but ints"});
}

// Graphs assembled by hand (mutable_node edits) fail validate() with a message naming the node.
class Validation : public ::testing::Test {
 protected:
  void SetUp() override {
    const Output x = placeholder(graph_, "x", DType::f32, {4, 3});
    a_ = graph_.add("Relu", {x}, {}, "a").node;
    b_ = graph_.add("Relu", {Output{a_, 0}}, {}, "b").node;
    c_ = graph_.add("Relu", {Output{b_, 0}}, {}, "c").node;
    graph_.validate();
  }
  Graph graph_;
  NodeId a_ = -1, b_ = -1, c_ = -1;
};

TEST_F(Validation, UnknownOp) {
  graph_.mutable_node(b_).op = "Relux";
  expect_invalid([&] { graph_.validate(); }, {"Relux 'b'", "unknown op 'Relux'", "registered ops:", "Relu"});
}

TEST_F(Validation, WrongArity) {
  graph_.mutable_node(b_).inputs.push_back(Output{a_, 0});
  expect_invalid([&] { graph_.validate(); }, {"Relu 'b'", "takes 1 input(s) but has 2"});
}

TEST_F(Validation, MissingNode) {
  graph_.mutable_node(b_).inputs[0] = Output{42, 0};
  expect_invalid([&] { graph_.validate(); }, {"Relu 'b'", "missing node 42"});
  graph_.mutable_node(b_).inputs[0] = Output{a_, 3};
  expect_invalid([&] { graph_.validate(); }, {"Relu 'b'", "output 3 of Relu 'a'"});
  graph_.mutable_node(b_).inputs[0] = Output{a_, 0};
  graph_.mutable_node(c_).control_inputs = {99};
  expect_invalid([&] { graph_.validate(); }, {"Relu 'c'", "control input refers to missing node 99"});
}

TEST_F(Validation, LaterNode) {
  graph_.mutable_node(a_).control_inputs = {c_};          // no cycle through data, but a forward control edge...
  expect_invalid([&] { graph_.validate(); }, {"cycle"});  // ...which closes one: c reads b reads a waits for c
  graph_.mutable_node(a_).control_inputs.clear();
  const NodeId d = graph_.add("Relu", {Output{a_, 0}}, {}, "d").node;
  graph_.mutable_node(b_).inputs[0] = Output{d, 0};
  expect_invalid([&] { graph_.validate(); }, {"Relu 'b'", "reads Relu 'd'", "comes later"});
}

TEST_F(Validation, Cycle) {
  graph_.mutable_node(a_).inputs[0] = Output{c_, 0};
  expect_invalid([&] { graph_.validate(); }, {"is on a cycle", "'a' -> 'c' -> 'b' -> 'a'"});
  graph_.mutable_node(a_).inputs[0] = Output{a_, 0};
  expect_invalid([&] { graph_.validate(); }, {"Relu 'a'", "is on a cycle: 'a' -> 'a'"});
}

TEST_F(Validation, DuplicateNames) {
  graph_.mutable_node(c_).name = "a";
  expect_invalid([&] { graph_.validate(); }, {"Relu 'a'", "duplicate name", "node 3 and node 1"});
  EXPECT_EQ(graph_.find("a"), a_);
  EXPECT_FALSE(graph_.find("c").has_value());  // find() sees renames
}

TEST_F(Validation, TypeMismatchFromInference) {
  graph_.mutable_node(b_).outputs[0].dims = {4, 5};
  expect_invalid([&] { graph_.validate(); },
                 {"Relu 'b'", "stored output types [float32[4,5]] differ from the inferred [float32[4,3]]"});
  graph_.mutable_node(b_).outputs[0].dims = {4, 3};
  graph_.mutable_node(a_).attributes["unused"] = std::int64_t{1};
  graph_.mutable_node(0).attributes["shape"] = ints({4, 3, 2});
  expect_invalid([&] { graph_.validate(); }, {"Placeholder 'x'", "float32[4,3,2]"});
}

TEST(OpRegistry, RejectsDuplicatesAndDefinitionsWithoutInference) {
  OpRegistry registry;
  registry.add(OpDef{.name = "Mine", .num_inputs = 0, .infer = [](const InferenceContext&) {
                       return std::vector<TensorType>{TensorType{}};
                     }});
  expect_invalid([&] { registry.add(OpDef{.name = "Mine", .infer = OpRegistry::global().get("Relu").infer}); },
                 {"op 'Mine' is already registered"});
  expect_invalid([&] { registry.add(OpDef{.name = "NoInfer"}); }, {"op 'NoInfer' has no type inference"});
  EXPECT_EQ(registry.names(), std::vector<std::string>{"Mine"});
  EXPECT_NE(registry.find("Mine"), nullptr);
  EXPECT_EQ(registry.find("Relu"), nullptr);
  const OpDef& relu = OpRegistry::global().get("Relu");
  EXPECT_TRUE(relu.may_reuse_input);
  EXPECT_TRUE(OpRegistry::global().get("ApplyAdam").stateful);
  EXPECT_TRUE(OpRegistry::global().get("Placeholder").kernels.empty());
  EXPECT_FALSE(OpRegistry::global().get("ArgMax").gradient);
}

}  // namespace
}  // namespace tp::graph
