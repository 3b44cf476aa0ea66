// SPDX-License-Identifier: Apache-2.0
// relu, relu_grad, bias_add and bias_add_grad against float64 references. relu and its gradient select
// values, so they must match exactly; bias_add is one rounded addition (exact against a float64 sum rounded
// to T); bias_add_grad sums in double and rounds once, so it must be within 1 ulp of T of the exact sum
// (plus the double accumulation error, 1e-15 relative to the sum of magnitudes, for double).

#include "backend/cpu/kernels/activations.hpp"
#include "backend/cpu/kernels/bias.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"

namespace {

using tp_test::expect_invalid;

template <typename T>
class ActivationsTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ActivationsTest, FloatTypes);

TYPED_TEST(ActivationsTest, ReluAndGradientMatchReference) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  for (std::int64_t n : {0, 1, 7, 1001}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::vector<T> x = tp_test::random_vector<T>(rng, n, -3, 3);
    if (n >= 7) {  // the boundary and the specials
      x[0] = T{0};
      x[1] = -T{0};
      x[2] = std::numeric_limits<T>::infinity();
      x[3] = -std::numeric_limits<T>::infinity();
      x[4] = std::numeric_limits<T>::denorm_min();
    }
    const std::vector<T> dy = tp_test::random_vector<T>(rng, n, -3, 3);
    std::vector<double> expected_y;
    std::vector<double> expected_dx;
    for (std::int64_t i = 0; i < n; ++i) {
      const double value = x[i];
      expected_y.push_back(value > 0 ? value : 0.0);
      expected_dx.push_back(value > 0 ? static_cast<double>(dy[i]) : 0.0);
    }
    std::vector<T> y(x.size(), T{-7});
    tp::backend::cpu::relu(x.data(), y.data(), n);
    tp_test::expect_all_near(y, expected_y, 0, 0);
    for (std::int64_t i = 0; i < n; ++i) EXPECT_FALSE(std::signbit(y[i])) << "relu(" << x[i] << ") is -0";
    std::vector<T> dx(x.size(), T{-7});
    tp::backend::cpu::relu_grad(dy.data(), x.data(), dx.data(), n);
    tp_test::expect_all_near(dx, expected_dx, 0, 0);
    // In place: y over x, dx over dy.
    std::vector<T> in_place = x;
    tp::backend::cpu::relu(in_place.data(), in_place.data(), n);
    EXPECT_EQ(in_place, y);
    std::vector<T> grad_in_place = dy;
    tp::backend::cpu::relu_grad(grad_in_place.data(), x.data(), grad_in_place.data(), n);
    EXPECT_EQ(grad_in_place, dx);
  }
}

TYPED_TEST(ActivationsTest, ReluPropagatesNaNAndItsGradientIsZeroThere) {
  using T = TypeParam;
  const std::vector<T> x{std::numeric_limits<T>::quiet_NaN(), T{2}};
  const std::vector<T> dy{T{5}, T{5}};
  std::vector<T> y(2);
  std::vector<T> dx(2);
  tp::backend::cpu::relu(x.data(), y.data(), 2);
  tp::backend::cpu::relu_grad(dy.data(), x.data(), dx.data(), 2);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], T{2});
  EXPECT_EQ(dx, (std::vector<T>{T{0}, T{5}}));
}

TYPED_TEST(ActivationsTest, BiasAddAndGradientMatchReference) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  struct Shape {
    std::int64_t rows;
    std::int64_t cols;
  };
  for (Shape shape : {Shape{1, 1}, Shape{7, 13}, Shape{300, 3}, Shape{2, 129}, Shape{0, 4}, Shape{5, 0}}) {
    SCOPED_TRACE(::testing::Message() << shape.rows << "x" << shape.cols);
    const std::int64_t count = shape.rows * shape.cols;
    const std::vector<T> x = tp_test::random_vector<T>(rng, count, -4, 4);
    const std::vector<T> bias = tp_test::random_vector<T>(rng, shape.cols, -4, 4);
    std::vector<double> expected;
    for (std::int64_t i = 0; i < count; ++i) {
      expected.push_back(static_cast<double>(static_cast<T>(static_cast<double>(x[i]) + bias[i % shape.cols])));
    }
    std::vector<T> y = x;  // in place
    tp::backend::cpu::bias_add(y.data(), bias.data(), y.data(), shape.rows, shape.cols);
    tp_test::expect_all_near(y, expected, 0, 0);

    std::vector<double> sums(static_cast<std::size_t>(shape.cols), 0.0);
    double magnitude = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      sums[static_cast<std::size_t>(i % shape.cols)] += x[i];
      magnitude += std::fabs(static_cast<double>(x[i]));
    }
    std::vector<T> dbias(sums.size(), T{-99});
    tp::backend::cpu::bias_add_grad(x.data(), dbias.data(), shape.rows, shape.cols);
    tp_test::expect_all_near(dbias, sums, tp_test::epsilon_of<T>(), 1e-15 * magnitude);
  }
}

TEST(Activations, RejectsNegativeSizesAndNullPointers) {
  std::vector<float> buffer(8, 1.0F);
  float* data = buffer.data();
  expect_invalid([&] { tp::backend::cpu::relu<float>(data, data, -4); }, {"[cpu]", "relu", "n = -4"});
  expect_invalid([&] { tp::backend::cpu::relu_grad<float>(data, nullptr, data, 2); }, {"relu_grad", "x is null"});
  expect_invalid([&] { tp::backend::cpu::bias_add<float>(data, data, data, 2, -1); }, {"bias_add", "cols = -1"});
  expect_invalid([&] { tp::backend::cpu::bias_add_grad<float>(data, nullptr, 2, 3); },
                 {"bias_add_grad", "dbias is null", "3 elements"});
  tp::backend::cpu::relu<float>(nullptr, nullptr, 0);
}

}  // namespace
