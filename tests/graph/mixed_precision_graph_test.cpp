// SPDX-License-Identifier: Apache-2.0
// The graph side of mixed precision: a float16 / bfloat16 dense layer built with Cast nodes around float32
// variables, forward and backward (autodiff through the casts) against float64 references; AllFinite; the
// conditional optimizer updates ApplySgdIf / ApplyAdamIf; and inference errors for dtypes an op refuses.
// Every run happens on cpu and on sim, which must agree bitwise.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "graph/support/graph_test_support.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/elementwise.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::graph {
namespace {

using testing::Backend;
using testing::HostValue;
using testing::make_device;
using testing::random_value;
using testing::run_graph;

// The value a float32 takes once rounded to `dtype` (float16 / bfloat16).
double rounded(double value, DType dtype) {
  const auto single = static_cast<float>(value);
  return dtype == DType::f16 ? static_cast<float>(Half::from_float(single))
                             : static_cast<float>(BFloat16::from_float(single));
}

class MixedPrecisionGraph : public testing::GraphValuesTest<::testing::TestWithParam<DType>> {};

// y = sum(w * Cast32(Relu(BiasAdd(MatMul(Cast(x), Cast(W)), Cast(b))))): the forward values and the float32
// gradients of W and b (through the casts' gradients: Cast back to float32) match float64 within a few
// roundings to the half type (unit roundoff u), relative to the magnitude of the terms.
TEST_P(MixedPrecisionGraph, DenseLayerForwardAndBackwardThroughCasts) {
  const DType half = GetParam();
  const double u = half == DType::f16 ? 0x1p-11 : 0x1p-8;
  TP_TRACE_SEED(tp_test::test_seed());
  constexpr int kRows = 5, kIn = 7, kOut = 6;
  const Output x = bind("x", random_value(rng_, {kRows, kIn}, -1, 1, 0, DType::f32));
  const Output w = bind("W", random_value(rng_, {kIn, kOut}, -1, 1, 0, DType::f32));
  const Output b = bind("b", random_value(rng_, {kOut}, -1, 1, 0, DType::f32));
  const Output weights = bind("weights", random_value(rng_, {kRows, kOut}, 0.5, 1.5, 0, DType::f32));
  const auto cast = [&](Output value, DType dtype) { return graph_.add("Cast", {value}, {{"dtype", dtype}}); };
  const Output product = graph_.add("MatMul", {cast(x, half), cast(w, half)});
  const Output biased = graph_.add("BiasAdd", {product, cast(b, half)});
  const Output activation = cast(graph_.add("Relu", {biased}), DType::f32);
  EXPECT_EQ(graph_.type_of(product).dtype, half);
  const Output y =
      graph_.add("Sum", {graph_.add("Sum", {graph_.add("Mul", {activation, weights})}, {{"axis", std::int64_t{0}}})},
                 {{"axis", std::int64_t{0}}});
  const std::vector<Output> xs{w, b};
  const auto grads = gradients(graph_, y, xs);
  ASSERT_TRUE(grads[0] && grads[1]);
  EXPECT_EQ(graph_.type_of(*grads[0]).dtype, DType::f32) << "master weights get float32 gradients";
  const auto got = testing::run_on_cpu_and_sim(graph_, values_, std::vector<Output>{activation, *grads[0], *grads[1]});
  std::vector<double> hx, hw, hb;
  for (double v : host(x)) hx.push_back(rounded(v, half));
  for (double v : host(w)) hw.push_back(rounded(v, half));
  for (double v : host(b)) hb.push_back(rounded(v, half));
  std::vector<double> pre(kRows * kOut), magnitude(kRows * kOut);
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kOut; ++c) {
      double sum = 0, size = 0;
      for (int k = 0; k < kIn; ++k) {
        sum += hx[r * kIn + k] * hw[k * kOut + c];
        size += std::fabs(hx[r * kIn + k] * hw[k * kOut + c]);
      }
      pre[r * kOut + c] = sum + hb[c];
      magnitude[r * kOut + c] = size + std::fabs(hb[c]);
    }
  }
  for (int i = 0; i < kRows * kOut; ++i) {
    const double expected = std::max(0.0, pre[i]);
    EXPECT_NEAR(got[0][i], expected, 3 * u * magnitude[i] + 1e-6) << "activation " << i;
  }
  // dW[k,c] = sum_r x[r,k] * dy[r,c] with dy = weights (rounded to half) where pre > 0; db[c] = sum_r dy[r,c].
  for (int c = 0; c < kOut; ++c) {
    double db = 0, db_size = 0;
    for (int r = 0; r < kRows; ++r) {
      if (got[0][r * kOut + c] <= 0) continue;  // the mask the kernel saw (ties at 0 are measure-zero)
      const double dy = rounded(host(weights)[r * kOut + c], half);
      db += dy;
      db_size += std::fabs(dy);
    }
    EXPECT_NEAR(got[2][c], db, 3 * u * db_size + 1e-6) << "db " << c;
    for (int k = 0; k < kIn; ++k) {
      double dw = 0, size = 0;
      for (int r = 0; r < kRows; ++r) {
        if (got[0][r * kOut + c] <= 0) continue;
        const double term = hx[r * kIn + k] * rounded(host(weights)[r * kOut + c], half);
        dw += term;
        size += std::fabs(term);
      }
      EXPECT_NEAR(got[1][k * kOut + c], dw, 3 * u * size + 1e-6) << "dW " << k << "," << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, MixedPrecisionGraph, ::testing::Values(DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(name_of(param.param));
                         });

TEST(MixedPrecisionOps, AllFiniteFlagsInfAndNaN) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const double large = dtype == DType::f16 ? 65504 : 3e30;  // the largest finite float16
    for (const auto& [values, expected] : std::vector<std::pair<std::vector<double>, double>>{
             {{1, -2, large, 0}, 1.0}, {{1, inf, 3}, 0.0}, {{-inf}, 0.0}, {{nan, 1}, 0.0}, {{}, 1.0}}) {
      Graph graph;
      std::map<NodeId, HostValue> bound;
      const Output x = testing::bind_variable(graph, bound, "x",
                                              HostValue{values, dtype, {static_cast<std::int64_t>(values.size())}});
      const Output finite = graph.add("AllFinite", {x});
      EXPECT_EQ(graph.type_of(finite).to_string(), "float32[]");
      EXPECT_EQ(testing::run_on_cpu_and_sim(graph, bound, std::vector<Output>{finite})[0],
                std::vector<double>{expected})
          << name_of(dtype);
    }
  }
}

// ZeRO-2 checks only its chunk of a reduce-scatter bucket: the range {begin, end} of x's flat elements.
TEST(MixedPrecisionOps, AllFiniteOverARangeLooksOnlyThere) {
  const double inf = std::numeric_limits<double>::infinity();
  Graph graph;
  std::map<NodeId, HostValue> bound;
  const Output x = testing::bind_variable(graph, bound, "x", HostValue{{1, inf, 2, 3, 4, 5}, DType::f16, {2, 3}});
  std::vector<Output> flags;
  for (const std::vector<std::int64_t>& range :
       std::vector<std::vector<std::int64_t>>{{2, 6}, {0, 2}, {1, 2}, {3, 3}}) {
    flags.push_back(graph.add("AllFinite", {x}, {{"range", range}}));
  }
  const auto got = testing::run_on_cpu_and_sim(graph, bound, flags);
  EXPECT_EQ(got, (std::vector<std::vector<double>>{{1}, {0}, {0}, {1}}));
  tp_test::expect_invalid(
      [&] {
        graph.add("AllFinite", {x}, {{"range", std::vector<std::int64_t>{4, 7}}}, "past");
      },
      {"AllFinite 'past'", "[4,7]", "within the 6 elements"});
  tp_test::expect_invalid(
      [&] {
        graph.add("AllFinite", {x}, {{"range", std::vector<std::int64_t>{3, 2}}}, "back");
      },
      {"AllFinite 'back'", "{begin, end}"});
}

// ApplySgdIf / ApplyAdamIf with gradient `gradient` (float32 var and slots) and factor `apply`, on cpu and
// sim, two steps: 0 leaves var and slots bitwise untouched; otherwise they equal the unconditional tensor ops
// on the gradient widened to float32 and multiplied by `apply`, bitwise.
void expect_conditional_updates(const HostValue& gradient, double apply_value) {
  std::mt19937 rng(tp_test::test_seed());
  const HostValue initial = random_value(rng, gradient.dims, -1, 1, 0, DType::f32);
  const HostValue zeros{std::vector<double>(gradient.values.size(), 0.0), DType::f32, gradient.dims};
  Graph graph;
  std::map<NodeId, HostValue> values;
  const auto bind = [&](std::string_view name, const HostValue& value) {
    return testing::bind_variable(graph, values, name, value);
  };
  const Output var = bind("var", initial), grad = bind("grad", gradient), velocity = bind("velocity", zeros);
  const Output var2 = bind("var2", initial), m = bind("m", zeros), v = bind("v", zeros);
  const Output apply = bind("apply", HostValue{{apply_value}, DType::f32, {}});
  graph.add_node("ApplySgdIf", {var, grad, velocity, apply}, {{"learning_rate", 0.1}, {"momentum", 0.9}});
  graph.add_node("ApplyAdamIf", {var2, grad, m, v, apply}, {{"learning_rate", 0.01}});
  for (const Backend backend : device::testing::present_backends()) {
    SCOPED_TRACE(device::testing::backend_label(backend));
    auto device = make_device(backend);
    const auto bindings = testing::to_tensors(values, *device);
    for (std::int64_t step = 1; step <= 2; ++step) run_graph(graph, *device, bindings, step);
    const Tensor expected_var = testing::to_tensor(initial, *device),
                 expected_velocity = testing::to_tensor(zeros, *device);
    const Tensor expected_var2 = testing::to_tensor(initial, *device), expected_m = testing::to_tensor(zeros, *device);
    const Tensor expected_v = testing::to_tensor(zeros, *device);
    const Tensor g = tp::ops::scale(tp::ops::cast(bindings.at(grad.node), DType::f32), apply_value);
    for (std::int64_t step = 1; apply_value != 0 && step <= 2; ++step) {
      tp::ops::sgd_update(expected_var, g, expected_velocity, {.learning_rate = 0.1, .momentum = 0.9});
      tp::ops::adam_update(expected_var2, g, expected_m, expected_v, step, {.learning_rate = 0.01});
    }
    EXPECT_EQ(bindings.at(var.node).to_vector<float>(), expected_var.to_vector<float>());
    EXPECT_EQ(bindings.at(velocity.node).to_vector<float>(), expected_velocity.to_vector<float>());
    EXPECT_EQ(bindings.at(var2.node).to_vector<float>(), expected_var2.to_vector<float>());
    EXPECT_EQ(bindings.at(m.node).to_vector<float>(), expected_m.to_vector<float>());
    EXPECT_EQ(bindings.at(v.node).to_vector<float>(), expected_v.to_vector<float>());
    if (apply_value != 0) {
      EXPECT_NE(bindings.at(var2.node).to_vector<float>(), testing::to_tensor(initial, *device).to_vector<float>());
    }
  }
}

// Flag 0: var and slots untouched bitwise; flag 1: exactly the unconditional tensor ops.
TEST(MixedPrecisionOps, ConditionalUpdatesRunOnlyWhenTheFlagIsSet) {
  std::mt19937 rng(tp_test::test_seed() + 1);
  const HostValue gradient = random_value(rng, {3, 2}, -1, 1, 0, DType::f32);
  for (const double flag : {0.0, 1.0}) {
    SCOPED_TRACE(::testing::Message() << "apply = " << flag);
    expect_conditional_updates(gradient, flag);
  }
}

// Mixed precision's form: a 16-bit gradient still multiplied by the loss scale, and the factor flag / scale.
// The result equals the float32 update on the widened gradient divided by the scale, bitwise (the scale is a
// power of two); factor 0 leaves everything untouched.
TEST(MixedPrecisionOps, ConditionalUpdatesUnscaleA16BitGradient) {
  std::mt19937 rng(tp_test::test_seed() + 2);
  constexpr double kScale = 1024.0;
  for (const DType half : {DType::f16, DType::bf16}) {
    HostValue gradient = random_value(rng, {5, 3}, -kScale, kScale, 0, DType::f32);
    gradient.dtype = half;
    for (const double factor : {0.0, 1.0 / kScale}) {
      SCOPED_TRACE(::testing::Message() << name_of(half) << ", factor " << factor);
      expect_conditional_updates(gradient, factor);
    }
  }
}

TEST(MixedPrecisionOps, InferenceNamesTheDtypeAnOpRefuses) {
  Graph graph;
  const Output x16 = placeholder(graph, "x16", DType::f16, {-1, 4});
  const Output w32 = variable(graph, "w32", DType::f32, {4, 3});
  const Output var = variable(graph, "var", DType::f32, {3});
  const Output flag64 = variable(graph, "flag64", DType::f64, {});
  tp_test::expect_invalid(
      [&] {
        graph.add("MatMul", {x16, w32}, {}, "mm");
      },
      {"MatMul 'mm'", "float16", "float32", "share a dtype"});
  tp_test::expect_invalid([&] { graph.add("Softmax", {x16}, {}, "sm"); },
                          {"Softmax 'sm'", "float16[-1,4]", "insert a Cast"});
  const Output ints = placeholder(graph, "i", DType::i32, {3});
  tp_test::expect_invalid([&] { graph.add("AllFinite", {ints}, {}, "finite"); }, {"AllFinite 'finite'", "int32"});
  const Output grad64 = variable(graph, "grad64", DType::f64, {3});
  const Output grad16 = variable(graph, "grad16", DType::f16, {3});
  tp_test::expect_invalid(
      [&] {
        graph.add_node("ApplySgd", {var, grad64, var}, {}, "f64_gradient");
      },
      {"ApplySgd 'f64_gradient'", "float64"});
  const Output var64 = variable(graph, "var64", DType::f64, {3});
  tp_test::expect_invalid(
      [&] {
        graph.add_node("ApplySgd", {var64, grad16, var64}, {}, "f16_into_f64");
      },
      {"ApplySgd 'f16_into_f64'", "float16"});
  graph.add_node("ApplySgd", {var, grad16, var}, {}, "f16_into_f32");  // mixed precision's weight gradient
  tp_test::expect_invalid(
      [&] {
        graph.add_node("ApplySgdIf", {var, var, var, flag64}, {}, "update");
      },
      {"ApplySgdIf 'update'", "apply float64[]", "float32 scalar"});
  const Output i32 = placeholder(graph, "ints", DType::i32, {2, 2});
  tp_test::expect_invalid([&] { graph.add("Relu", {i32}, {}, "relu"); },
                          {"Relu 'relu'", "int32", "float32 or float64, or float16 / bfloat16"});
}

}  // namespace
}  // namespace tp::graph
