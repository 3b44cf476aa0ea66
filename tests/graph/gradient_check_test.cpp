// SPDX-License-Identifier: Apache-2.0
// Every differentiable op, checked alone against central finite differences in float64 on random inputs:
// each case builds the op from bound variables, reduces its output to a scalar with fixed random weights
// (Mul, then Sum and Mean over the axes: those ops are checked in every case too), and compares autodiff's
// gradient for each input with (f(x + h) - f(x - h)) / 2h within a relative 1e-6.

#include <gtest/gtest.h>

#include <functional>

#include "graph/support/graph_test_support.hpp"

namespace tp::graph {
namespace {

using testing::HostValue;
using testing::random_value;

using Values = std::map<NodeId, HostValue>;

struct GradientCase {
  std::string name;
  // Builds the op's output from variables bound in `values` and lists the xs to check.
  std::function<Output(Graph&, Values&, std::vector<Output>& xs, std::mt19937&)> build;
  double rel = 1e-6;
  double h = 1e-6;
};

std::ostream& operator<<(std::ostream& stream, const GradientCase& test_case) { return stream << test_case.name; }

// A case for op(inputs...) with attributes; `checked` marks the inputs that are xs.
GradientCase op_case(std::string name, std::string op, std::vector<HostValue (*)(std::mt19937&)> inputs,
                     Attributes attributes = {}, std::vector<bool> checked = {}) {
  GradientCase test_case;
  test_case.name = std::move(name);
  test_case.build = [op, inputs, attributes, checked](Graph& graph, Values& values, std::vector<Output>& xs,
                                                      std::mt19937& rng) {
    std::vector<Output> sources;
    for (std::size_t index = 0; index < inputs.size(); ++index) {
      sources.push_back(testing::bind_variable(graph, values, "input" + std::to_string(index), inputs[index](rng)));
      if (checked.empty() || checked[index]) xs.push_back(sources.back());
    }
    return graph.add(op, sources, attributes, op);
  };
  return test_case;
}

template <std::int64_t... Dims>
HostValue uniform(std::mt19937& rng) {
  return random_value(rng, {Dims...});
}
template <std::int64_t... Dims>
HostValue away_from_zero(std::mt19937& rng) {  // keeps relu off its kink and divisors off zero
  return random_value(rng, {Dims...}, -2.0, 2.0, 0.25);
}
template <std::int64_t... Dims>
HostValue positive(std::mt19937& rng) {
  return random_value(rng, {Dims...}, 0.05, 0.95);
}

std::vector<GradientCase> all_cases() {
  std::vector<GradientCase> cases = {
      op_case("MatMul", "MatMul", {uniform<3, 4>, uniform<4, 2>}),
      op_case("MatMulTransposeA", "MatMul", {uniform<4, 3>, uniform<4, 2>}, {{"transpose_a", true}}),
      op_case("MatMulTransposeB", "MatMul", {uniform<3, 4>, uniform<2, 4>}, {{"transpose_b", true}}),
      op_case("MatMulTransposeBoth", "MatMul", {uniform<4, 3>, uniform<2, 4>},
              {{"transpose_a", true}, {"transpose_b", true}}),
      op_case("BiasAdd", "BiasAdd", {uniform<3, 4>, uniform<4>}),
      op_case("BiasAddGrad", "BiasAddGrad", {uniform<3, 4>}),
      op_case("Relu", "Relu", {away_from_zero<3, 4>}),
      op_case("ReluGrad", "ReluGrad", {uniform<3, 4>, away_from_zero<3, 4>}, {}, {true, false}),
      op_case("Softmax", "Softmax", {uniform<3, 4>}),
      op_case("LogSoftmax", "LogSoftmax", {uniform<3, 4>}),
      op_case("SumAxis0", "Sum", {uniform<3, 4>}, {{"axis", std::int64_t{0}}}),
      op_case("SumLastAxisRank3", "Sum", {uniform<2, 3, 4>}, {{"axis", std::int64_t{-1}}}),
      op_case("MeanAxis1Rank3", "Mean", {uniform<2, 3, 4>}, {{"axis", std::int64_t{1}}}),
      op_case("MeanAxis0", "Mean", {uniform<5>}, {{"axis", std::int64_t{0}}}),
      op_case("BroadcastCopy", "Broadcast", {uniform<2, 4>, uniform<2, 3, 4>}, {{"axis", std::int64_t{1}}},
              {true, false}),
      op_case("BroadcastMean", "Broadcast", {uniform<4>, uniform<3, 4>}, {{"axis", std::int64_t{0}}, {"mean", true}},
              {true, false}),
      op_case("AddSame", "Add", {uniform<3, 4>, uniform<3, 4>}),
      op_case("AddRow", "Add", {uniform<3, 4>, uniform<4>}),
      op_case("AddRowRank3", "Add", {uniform<2, 3, 4>, uniform<4>}),
      op_case("AddScalar", "Add", {uniform<3, 4>, uniform<>}),
      op_case("SubSame", "Sub", {uniform<3, 4>, uniform<3, 4>}),
      op_case("SubRow", "Sub", {uniform<3, 4>, uniform<4>}),
      op_case("SubScalar", "Sub", {uniform<3, 4>, uniform<>}),
      op_case("MulSame", "Mul", {uniform<3, 4>, uniform<3, 4>}),
      op_case("MulRow", "Mul", {uniform<3, 4>, uniform<4>}),
      op_case("MulScalarRank3", "Mul", {uniform<2, 3, 4>, uniform<>}),
      op_case("DivSame", "Div", {uniform<3, 4>, away_from_zero<3, 4>}),
      op_case("DivRow", "Div", {uniform<3, 4>, away_from_zero<4>}),
      op_case("DivScalar", "Div", {uniform<3, 4>, away_from_zero<>}),
      op_case("Scale", "Scale", {uniform<3, 4>}, {{"alpha", -1.75}}),
      op_case("AddN", "AddN", {uniform<3, 4>, uniform<3, 4>}),
      op_case("Reshape", "Reshape", {uniform<2, 6>}, {{"shape", std::vector<std::int64_t>{3, -1}}}),
      op_case("ScaleRows", "ScaleRows", {uniform<3, 4>, uniform<3>}),
      op_case("CastToFloat64", "Cast", {uniform<3, 4>}, {{"dtype", DType::f64}}),
  };
  GradientCase logits;
  logits.name = "SparseSoftmaxCrossEntropyFromLogits";
  logits.build = [](Graph& graph, Values& values, std::vector<Output>& xs, std::mt19937& rng) {
    xs.push_back(testing::bind_variable(graph, values, "logits", random_value(rng, {4, 3}, -2, 2)));
    const Output labels = testing::bind_variable(graph, values, "labels", testing::labels_value(rng, 4, 3));
    return Output{graph.add_node("SparseSoftmaxCrossEntropy", {xs[0], labels}), 0};
  };
  GradientCase probabilities;
  probabilities.name = "SparseSoftmaxCrossEntropyFromProbabilities";
  probabilities.build = [](Graph& graph, Values& values, std::vector<Output>& xs, std::mt19937& rng) {
    // Unnormalised probabilities inside the clip range: loss = log(sum) - log(p[label]) is smooth there.
    xs.push_back(testing::bind_variable(graph, values, "probabilities", positive<4, 3>(rng)));
    const Output labels = testing::bind_variable(graph, values, "labels", testing::labels_value(rng, 4, 3, DType::i32));
    return Output{graph.add_node("SparseSoftmaxCrossEntropy", {xs[0], labels}, {{"input", "probabilities"}}), 0};
  };
  GradientCase round_trip;  // float64 -> float32 -> float64: checked coarsely (float32 rounding in f)
  round_trip.name = "CastThroughFloat32";
  round_trip.rel = 1e-4;
  round_trip.h = 1e-2;
  round_trip.build = [](Graph& graph, Values& values, std::vector<Output>& xs, std::mt19937& rng) {
    xs.push_back(testing::bind_variable(graph, values, "x", random_value(rng, {3, 4})));
    const Output narrow = graph.add("Cast", {xs[0]}, {{"dtype", DType::f32}});
    return graph.add("Cast", {graph.add("Relu", {narrow})}, {{"dtype", DType::f64}});
  };
  GradientCase shared;  // one x read twice: contributions summed with AddN
  shared.name = "SharedInput";
  shared.build = [](Graph& graph, Values& values, std::vector<Output>& xs, std::mt19937& rng) {
    xs.push_back(testing::bind_variable(graph, values, "x", random_value(rng, {3, 4})));
    const Output square = graph.add("Mul", {xs[0], xs[0]});
    return graph.add("MatMul", {square, xs[0]}, {{"transpose_b", true}});
  };
  cases.insert(cases.end(), {logits, probabilities, round_trip, shared});
  return cases;
}

class GradientCheck : public ::testing::TestWithParam<GradientCase> {};

TEST_P(GradientCheck, MatchesCentralFiniteDifferences) {
  const GradientCase& test_case = GetParam();
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  Graph graph;
  Values values;
  std::vector<Output> xs;
  const Output out = test_case.build(graph, values, xs, rng);
  const Output y = testing::weighted_scalar(graph, values, out, rng);
  testing::expect_gradients_match(graph, y, xs, values, test_case.rel, 1e-9, test_case.h);
}

INSTANTIATE_TEST_SUITE_P(EveryDifferentiableOp, GradientCheck, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<GradientCase>& param) { return param.param.name; });

// Each differentiable op of the registry appears in some case above.
TEST(GradientCheckCoverage, EveryDifferentiableOpHasACase) {
  std::set<std::string> covered;
  for (const GradientCase& test_case : all_cases()) {
    Graph graph;
    Values values;
    std::vector<Output> xs;
    std::mt19937 rng(1);
    test_case.build(graph, values, xs, rng);
    for (const Node& node : graph.nodes()) covered.insert(node.op);
  }
  for (const std::string& name : OpRegistry::global().names()) {
    const OpDef& definition = OpRegistry::global().get(name);
    if (definition.gradient && definition.num_inputs > 0) {
      EXPECT_EQ(covered.count(name), 1U) << name;
    }
  }
}

}  // namespace
}  // namespace tp::graph
