// SPDX-License-Identifier: Apache-2.0
// The reduction-gradient kernels (broadcast_axis, scale_rows) and the correct_count metric against float64
// references on random inputs, with their edge cases: empty sizes, aliasing, ties and NaN, bad labels.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/broadcast.hpp"
#include "backend/cpu/kernels/metrics.hpp"

namespace {

using tp_test::expect_invalid;

template <typename T>
class BroadcastTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(BroadcastTest, FloatTypes);

TYPED_TEST(BroadcastTest, BroadcastAxisRepeatsEachSliceScaledByAlpha) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  struct View {
    std::int64_t outer, axis, inner;
  };
  for (View view : {View{1, 1, 1}, View{3, 4, 5}, View{1, 7, 130}, View{6, 2, 1}, View{2, 0, 3}}) {
    SCOPED_TRACE(::testing::Message() << view.outer << "x" << view.axis << "x" << view.inner);
    const std::vector<T> x = tp_test::random_vector<T>(rng, view.outer * view.inner);
    for (T alpha : {T{1}, T{0.25}}) {
      std::vector<double> expected;
      for (std::int64_t o = 0; o < view.outer; ++o) {
        for (std::int64_t a = 0; a < view.axis; ++a) {
          for (std::int64_t i = 0; i < view.inner; ++i) {
            expected.push_back(static_cast<double>(alpha) * static_cast<double>(x[o * view.inner + i]));
          }
        }
      }
      std::vector<T> y(expected.size(), T{-99});
      tp::backend::cpu::broadcast_axis(x.data(), y.data(), view.outer, view.axis, view.inner, alpha);
      tp_test::expect_all_near(y, expected, tp_test::epsilon_of<T>(), 0);
    }
  }
  expect_invalid([] { tp::backend::cpu::broadcast_axis<T>(nullptr, nullptr, -1, 1, 1, T{1}); },
                 {"broadcast_axis", "outer = -1"});
  expect_invalid([] { tp::backend::cpu::broadcast_axis<T>(nullptr, nullptr, 1, 2, 1, T{1}); },
                 {"broadcast_axis", "x is null"});
  tp::backend::cpu::broadcast_axis<T>(nullptr, nullptr, 3, 0, 2, T{1});  // empty output: x is never read
}

TYPED_TEST(BroadcastTest, ScaleRowsMultipliesEachRowAndMayWorkInPlace) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  const std::int64_t rows = 7;
  const std::int64_t cols = 33;
  std::vector<T> x = tp_test::random_vector<T>(rng, rows * cols, -3, 3);
  const std::vector<T> s = tp_test::random_vector<T>(rng, rows, -2, 2);
  std::vector<double> expected;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      expected.push_back(static_cast<double>(x[r * cols + c]) * static_cast<double>(s[r]));
    }
  }
  std::vector<T> y(x.size());
  tp::backend::cpu::scale_rows(x.data(), s.data(), y.data(), rows, cols);
  tp_test::expect_all_near(y, expected, tp_test::epsilon_of<T>(), 0);
  tp::backend::cpu::scale_rows(x.data(), s.data(), x.data(), rows, cols);  // in place
  EXPECT_EQ(x, y);
  tp::backend::cpu::scale_rows<T>(nullptr, nullptr, nullptr, 0, 5);
  expect_invalid([] { tp::backend::cpu::scale_rows<T>(nullptr, nullptr, nullptr, 2, -1); }, {"scale_rows", "cols"});
}

TYPED_TEST(BroadcastTest, CorrectCountComparesFirstArgmaxWithLabels) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // Rows: clear max at 2; tie between 0 and 2 (first wins); NaN at 1 wins; all equal (index 0).
  const std::vector<T> scores = {T{0}, T{1}, T{5}, T{4}, T{1}, T{4}, T{9}, nan, T{1}, T{2}, T{2}, T{2}};
  const std::vector<std::int32_t> right = {2, 0, 1, 0};
  const std::vector<std::int64_t> half = {2, 2, 0, 0};
  EXPECT_EQ((tp::backend::cpu::correct_count<T, std::int32_t>(scores.data(), right.data(), 4, 3)), 4);
  EXPECT_EQ((tp::backend::cpu::correct_count<T, std::int64_t>(scores.data(), half.data(), 4, 3)), 2);
  EXPECT_EQ((tp::backend::cpu::correct_count<T, std::int64_t>(nullptr, nullptr, 0, 3)), 0);
  const std::vector<std::int64_t> bad = {2, 3, 0, 0};
  expect_invalid([&] { tp::backend::cpu::correct_count<T, std::int64_t>(scores.data(), bad.data(), 4, 3); },
                 {"correct_count", "label 3 of row 1", "[0, 3)"});
}

TYPED_TEST(BroadcastTest, CorrectCountMatchesAReferenceOnRandomScores) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  const std::int64_t rows = 100;
  const std::int64_t cols = 10;
  const std::vector<T> scores = tp_test::random_vector<T>(rng, rows * cols);
  std::uniform_int_distribution<std::int64_t> label(0, cols - 1);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
  std::int64_t expected = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < cols; ++c) best = scores[r * cols + c] > scores[r * cols + best] ? c : best;
    labels[r] = r % 3 == 0 ? best : label(rng);
    expected += labels[r] == best ? 1 : 0;
  }
  EXPECT_EQ((tp::backend::cpu::correct_count<T, std::int64_t>(scores.data(), labels.data(), rows, cols)), expected);
}

}  // namespace
