// SPDX-License-Identifier: Apache-2.0
// Reductions over [outer, axis, inner] against float64 references. Sums accumulate in double and round once,
// so a float result must be within 1 float ulp of the exact sum (the double accumulation error, at most
// axis * 2^-53 * sum|x|, is far below that); double results are allowed axis * 2^-52 * sum|x|. max and
// argmax select values and must match exactly.

#include "backend/cpu/kernels/reduce.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"

namespace {

using tp_test::expect_invalid;

struct View {
  std::int64_t outer;
  std::int64_t axis;
  std::int64_t inner;
};

std::ostream& operator<<(std::ostream& stream, View view) {
  return stream << "[" << view.outer << "," << view.axis << "," << view.inner << "]";
}

const std::vector<View> kViews = {{1, 1, 1}, {7, 13, 5}, {2, 200, 1}, {1, 5, 130}, {3, 1, 65}, {4, 64, 64}};

template <typename T>
T element(const std::vector<T>& x, View view, std::int64_t o, std::int64_t a, std::int64_t i) {
  return x[static_cast<std::size_t>((o * view.axis + a) * view.inner + i)];
}

template <typename T>
class ReduceTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ReduceTest, FloatTypes);

TYPED_TEST(ReduceTest, SumAndMeanMatchReference) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  for (View view : kViews) {
    SCOPED_TRACE(::testing::Message() << "view " << view);
    const std::vector<T> x = tp_test::random_vector<T>(rng, view.outer * view.axis * view.inner, -2, 3);
    std::vector<double> sums;
    std::vector<double> means;
    double magnitude = 0;
    for (std::int64_t o = 0; o < view.outer; ++o) {
      for (std::int64_t i = 0; i < view.inner; ++i) {
        double sum = 0;
        for (std::int64_t a = 0; a < view.axis; ++a) {
          sum += element(x, view, o, a, i);
          magnitude += std::fabs(static_cast<double>(element(x, view, o, a, i)));
        }
        sums.push_back(sum);
        means.push_back(sum / static_cast<double>(view.axis));
      }
    }
    const double rel = tp_test::epsilon_of<T>();
    const double abs = static_cast<double>(view.axis) * 0x1.0p-52 * magnitude;
    std::vector<T> y(sums.size(), T{-99});
    tp::backend::cpu::reduce_sum(x.data(), y.data(), view.outer, view.axis, view.inner);
    tp_test::expect_all_near(y, sums, rel, abs);
    tp::backend::cpu::reduce_mean(x.data(), y.data(), view.outer, view.axis, view.inner);
    tp_test::expect_all_near(y, means, rel, abs);
  }
}

TYPED_TEST(ReduceTest, MaxAndArgmaxMatchReferenceWithTies) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-3, 3);  // few distinct values: many ties
  for (View view : kViews) {
    SCOPED_TRACE(::testing::Message() << "view " << view);
    std::vector<T> x(static_cast<std::size_t>(view.outer * view.axis * view.inner));
    for (T& value : x) value = static_cast<T>(small(rng));
    std::vector<double> maxima;
    std::vector<std::int64_t> indices;
    for (std::int64_t o = 0; o < view.outer; ++o) {
      for (std::int64_t i = 0; i < view.inner; ++i) {
        std::int64_t best = 0;
        for (std::int64_t a = 1; a < view.axis; ++a) {
          if (element(x, view, o, a, i) > element(x, view, o, best, i)) best = a;
        }
        indices.push_back(best);
        maxima.push_back(element(x, view, o, best, i));
      }
    }
    std::vector<T> y(maxima.size());
    tp::backend::cpu::reduce_max(x.data(), y.data(), view.outer, view.axis, view.inner);
    tp_test::expect_all_near(y, maxima, 0, 0);
    std::vector<std::int64_t> arg(indices.size(), -1);
    tp::backend::cpu::argmax(x.data(), arg.data(), view.outer, view.axis, view.inner);
    EXPECT_EQ(arg, indices);
  }
}

TYPED_TEST(ReduceTest, NaNWinsAndInfinitiesAreOrdinary) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T inf = std::numeric_limits<T>::infinity();
  // Columns (inner = 4) of a [1, 4, 4] tensor: NaN in the middle; NaN first; all -inf; +inf then NaN.
  const std::vector<T> x{T{1}, nan,  -inf, T{0},  //
                         nan,  T{5}, -inf, inf,   //
                         T{9}, T{7}, -inf, T{2},  //
                         nan,  T{8}, -inf, nan};
  std::vector<T> y(4);
  std::vector<std::int64_t> arg(4);
  tp::backend::cpu::reduce_max(x.data(), y.data(), 1, 4, 4);
  tp::backend::cpu::argmax(x.data(), arg.data(), 1, 4, 4);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], -inf);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(arg, (std::vector<std::int64_t>{1, 0, 0, 3}));
  // Along a contiguous axis (inner = 1) too.
  const std::vector<T> row{T{3}, T{3}, nan, T{4}, nan};
  std::int64_t index = -1;
  tp::backend::cpu::argmax(row.data(), &index, 1, 5, 1);
  EXPECT_EQ(index, 2);
  tp::backend::cpu::argmax(row.data(), &index, 1, 2, 1);
  EXPECT_EQ(index, 0);  // first of the tie
}

TYPED_TEST(ReduceTest, EmptyDimensions) {
  using T = TypeParam;
  // Empty axis: sum 0, mean NaN; outputs are real elements.
  std::vector<T> y(12, T{-1});
  tp::backend::cpu::reduce_sum<T>(nullptr, y.data(), 3, 0, 4);
  EXPECT_EQ(y, std::vector<T>(12, T{0}));
  tp::backend::cpu::reduce_mean<T>(nullptr, y.data(), 3, 0, 4);
  for (T value : y) EXPECT_TRUE(std::isnan(value));
  // max and argmax have no identity.
  expect_invalid([&] { tp::backend::cpu::reduce_max<T>(nullptr, y.data(), 3, 0, 4); },
                 {"[cpu]", "reduce_max", "empty axis", "axis length 0"});
  std::vector<std::int64_t> arg(12);
  expect_invalid([&] { tp::backend::cpu::argmax<T>(nullptr, arg.data(), 3, 0, 4); }, {"argmax", "axis length 0"});
  expect_invalid([&] { tp::backend::cpu::argmax<T>(nullptr, nullptr, 0, 0, 4); }, {"axis length 0"});
  // Empty outer or inner: nothing to write, pointers may be null.
  tp::backend::cpu::reduce_sum<T>(nullptr, nullptr, 0, 5, 3);
  tp::backend::cpu::reduce_mean<T>(nullptr, nullptr, 4, 5, 0);
  tp::backend::cpu::reduce_max<T>(nullptr, nullptr, 0, 5, 3);
  tp::backend::cpu::argmax<T>(nullptr, nullptr, 4, 5, 0);
}

TEST(Reduce, RejectsNegativeSizesAndNullPointers) {
  std::vector<double> buffer(8, 1.0);
  double* data = buffer.data();
  expect_invalid([&] { tp::backend::cpu::reduce_sum<double>(data, data, -1, 2, 2); }, {"reduce_sum", "outer = -1"});
  expect_invalid([&] { tp::backend::cpu::reduce_mean<double>(data, data, 1, -2, 2); }, {"axis = -2"});
  expect_invalid([&] { tp::backend::cpu::reduce_max<double>(data, data, 1, 2, -3); }, {"inner = -3"});
  expect_invalid([&] { tp::backend::cpu::reduce_sum<double>(nullptr, data, 1, 2, 2); }, {"x is null", "4 elements"});
  expect_invalid([&] { tp::backend::cpu::argmax<double>(data, nullptr, 2, 2, 2); }, {"y is null", "4 elements"});
}

}  // namespace
