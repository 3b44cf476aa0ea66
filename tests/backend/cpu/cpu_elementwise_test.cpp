// SPDX-License-Identifier: Apache-2.0
// Elementwise kernels against float64 references. For +, -, *, / a float64 result rounded once to float is
// the correctly rounded float result (53 >= 2 * 24 + 2 bits), and for double the reference is the same
// operation, so binary ops must match exactly. scale and add_scaled round twice in T (the product, then the
// sum), so they get a tolerance of 2 ulps of T.

#include "backend/cpu/kernels/elementwise.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"

namespace {

using tp::backend::cpu::BinaryOp;
using tp_test::expect_invalid;

constexpr BinaryOp kOps[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div};

double reference(BinaryOp op, double left, double right) {
  switch (op) {
    case BinaryOp::add: return left + right;
    case BinaryOp::sub: return left - right;
    case BinaryOp::mul: return left * right;
    case BinaryOp::div: return left / right;
  }
  return 0;
}

// Rounds the float64 reference to T: the exact expected bits.
template <typename T>
std::vector<double> rounded(const std::vector<double>& values) {
  std::vector<double> out;
  for (double value : values) out.push_back(static_cast<double>(static_cast<T>(value)));
  return out;
}

template <typename T>
class ElementwiseTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ElementwiseTest, FloatTypes);

TYPED_TEST(ElementwiseTest, SameLengthMatchesReferenceExactly) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  for (std::int64_t n : {0, 1, 7, 13, 1000}) {
    const std::vector<T> x = tp_test::random_vector<T>(rng, n, -10, 10);
    const std::vector<T> y = tp_test::random_vector<T>(rng, n, 0.5, 3);
    for (BinaryOp op : kOps) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " op=" << static_cast<int>(op));
      std::vector<double> expected;
      for (std::int64_t i = 0; i < n; ++i) expected.push_back(reference(op, x[i], y[i]));
      std::vector<T> z(x.size(), T{-99});
      tp::backend::cpu::binary(op, x.data(), y.data(), z.data(), n);
      tp_test::expect_all_near(z, rounded<T>(expected), 0, 0);
      // In place, output over the first operand.
      std::vector<T> in_place = x;
      tp::backend::cpu::binary(op, in_place.data(), y.data(), in_place.data(), n);
      EXPECT_EQ(in_place, z);
    }
    std::vector<T> sum(x.size()), difference(x.size()), product(x.size()), quotient(x.size());
    tp::backend::cpu::add(x.data(), y.data(), sum.data(), n);
    tp::backend::cpu::sub(x.data(), y.data(), difference.data(), n);
    tp::backend::cpu::mul(x.data(), y.data(), product.data(), n);
    tp::backend::cpu::div(x.data(), y.data(), quotient.data(), n);
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(sum[i], static_cast<T>(static_cast<double>(x[i]) + y[i]));
      EXPECT_EQ(difference[i], static_cast<T>(static_cast<double>(x[i]) - y[i]));
      EXPECT_EQ(product[i], static_cast<T>(static_cast<double>(x[i]) * y[i]));
      EXPECT_EQ(quotient[i], static_cast<T>(static_cast<double>(x[i]) / y[i]));
    }
  }
}

TYPED_TEST(ElementwiseTest, RowBroadcastAndScalarMatchReference) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  struct Shape {
    std::int64_t rows;
    std::int64_t cols;
  };
  for (Shape shape : {Shape{1, 1}, Shape{7, 13}, Shape{13, 1}, Shape{1, 9}, Shape{0, 5}, Shape{4, 0}}) {
    const std::int64_t count = shape.rows * shape.cols;
    const std::vector<T> x = tp_test::random_vector<T>(rng, count, -10, 10);
    const std::vector<T> row = tp_test::random_vector<T>(rng, shape.cols, 0.5, 3);
    const T scalar = static_cast<T>(1.7);
    for (BinaryOp op : kOps) {
      SCOPED_TRACE(::testing::Message() << shape.rows << "x" << shape.cols << " op=" << static_cast<int>(op));
      std::vector<double> broadcast_expected;
      std::vector<double> scalar_expected;
      for (std::int64_t i = 0; i < count; ++i) {
        broadcast_expected.push_back(reference(op, x[i], row[i % shape.cols]));
        scalar_expected.push_back(reference(op, x[i], scalar));
      }
      std::vector<T> z(x.size());
      tp::backend::cpu::binary_row_broadcast(op, x.data(), row.data(), z.data(), shape.rows, shape.cols);
      tp_test::expect_all_near(z, rounded<T>(broadcast_expected), 0, 0);
      std::vector<T> in_place = x;
      tp::backend::cpu::binary_scalar(op, in_place.data(), scalar, in_place.data(), count);
      tp_test::expect_all_near(in_place, rounded<T>(scalar_expected), 0, 0);
    }
  }
}

TYPED_TEST(ElementwiseTest, ScaleAndAddScaled) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  const double ulps = 2 * tp_test::epsilon_of<T>();
  for (std::int64_t n : {0, 1, 7, 513}) {
    const std::vector<T> x = tp_test::random_vector<T>(rng, n, -5, 5);
    const std::vector<T> y0 = tp_test::random_vector<T>(rng, n, -5, 5);
    const T alpha = static_cast<T>(-0.37);
    std::vector<double> scaled;
    std::vector<double> accumulated;
    for (std::int64_t i = 0; i < n; ++i) {
      scaled.push_back(static_cast<double>(alpha) * x[i]);
      accumulated.push_back(static_cast<double>(y0[i]) + static_cast<double>(alpha) * x[i]);
    }
    std::vector<T> y(x.size());
    tp::backend::cpu::scale(x.data(), alpha, y.data(), n);
    tp_test::expect_all_near(y, scaled, ulps, 0);
    std::vector<T> target = y0;
    tp::backend::cpu::add_scaled(target.data(), alpha, x.data(), n);
    // The absolute part covers cancellation: the sum's error is relative to |y| + |alpha x|, not the result.
    tp_test::expect_all_near(target, accumulated, ulps, 10 * ulps);
  }
}

TEST(Elementwise, IeeeSpecialValuesPassThrough) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{1.0F, -1.0F, 0.0F, inf};
  const std::vector<float> y{0.0F, 0.0F, 0.0F, inf};
  std::vector<float> z(4);
  tp::backend::cpu::div(x.data(), y.data(), z.data(), 4);
  EXPECT_EQ(z[0], inf);
  EXPECT_EQ(z[1], -inf);
  EXPECT_TRUE(std::isnan(z[2]));
  EXPECT_TRUE(std::isnan(z[3]));
}

TEST(Elementwise, RejectsNegativeSizesNullPointersAndBadOps) {
  std::vector<double> buffer(8, 1.0);
  double* data = buffer.data();
  expect_invalid([&] { tp::backend::cpu::add<double>(data, data, data, -2); }, {"[cpu]", "binary", "n = -2"});
  expect_invalid([&] { tp::backend::cpu::add<double>(data, nullptr, data, 3); }, {"y is null", "3 elements"});
  expect_invalid([&] { tp::backend::cpu::binary_row_broadcast<double>(BinaryOp::mul, data, nullptr, data, 2, 4); },
                 {"binary_row_broadcast", "row is null", "4 elements"});
  expect_invalid([&] { tp::backend::cpu::binary_scalar<double>(BinaryOp::add, data, 1.0, data, -1); }, {"n = -1"});
  expect_invalid([&] { tp::backend::cpu::add_scaled<double>(nullptr, 2.0, data, 1); }, {"add_scaled", "y is null"});
  expect_invalid([&] { tp::backend::cpu::binary<double>(static_cast<BinaryOp>(9), data, data, data, 1); }, {"op = 9"});
  const std::int64_t big = std::int64_t{1} << 40;
  expect_invalid([&] { tp::backend::cpu::binary_row_broadcast<double>(BinaryOp::add, data, data, data, big, big); },
                 {"overflow"});
  // Empty buffers may be null.
  tp::backend::cpu::add<double>(nullptr, nullptr, nullptr, 0);
  tp::backend::cpu::binary_row_broadcast<double>(BinaryOp::add, nullptr, nullptr, nullptr, 0, 7);
}

}  // namespace
