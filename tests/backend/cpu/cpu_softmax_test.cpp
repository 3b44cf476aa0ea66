// SPDX-License-Identifier: Apache-2.0
// softmax and log_softmax against a float64 reference (the same max-shifted formula in double). The kernels
// compute each row in double and round once, so the tolerance is 2 ulps of T relative to the value, plus
// 1e-15 absolute for double (the reference's own exp/log rounding). Rows must sum to 1 within
// cols ulps of T.

#include "backend/cpu/kernels/softmax.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/cross_entropy.hpp"

namespace {

using tp_test::expect_invalid;

// Reference softmax (log_space false) or log_softmax (true) of row-major [rows, cols] values, in double.
std::vector<double> reference(const std::vector<double>& x, std::int64_t rows, std::int64_t cols, bool log_space) {
  std::vector<double> out(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    double max = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < cols; ++c) max = std::max(max, row[c]);
    double sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(row[c] - max);
    for (std::int64_t c = 0; c < cols; ++c) {
      out[static_cast<std::size_t>(r * cols + c)] =
          log_space ? row[c] - max - std::log(sum) : std::exp(row[c] - max) / sum;
    }
  }
  return out;
}

template <typename T>
class SoftmaxTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SoftmaxTest, FloatTypes);

TYPED_TEST(SoftmaxTest, MatchesReferenceAndRowsSumToOne) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  struct Shape {
    std::int64_t rows;
    std::int64_t cols;
  };
  const double ulp = tp_test::epsilon_of<T>();
  for (Shape shape : {Shape{1, 1}, Shape{7, 13}, Shape{13, 7}, Shape{1, 1000}, Shape{0, 5}, Shape{5, 0}}) {
    SCOPED_TRACE(::testing::Message() << shape.rows << "x" << shape.cols);
    const std::vector<T> x = tp_test::random_vector<T>(rng, shape.rows * shape.cols, -20, 20);
    const std::vector<double> wide = tp_test::widen(x);
    std::vector<T> y(x.size());
    tp::backend::cpu::softmax(x.data(), y.data(), shape.rows, shape.cols);
    tp_test::expect_all_near(y, reference(wide, shape.rows, shape.cols, false), 2 * ulp, 1e-300);
    for (std::int64_t r = 0; r < shape.rows; ++r) {
      double sum = 0;
      for (std::int64_t c = 0; c < shape.cols; ++c) sum += y[r * shape.cols + c];
      if (shape.cols > 0) {
        EXPECT_NEAR(sum, 1.0, static_cast<double>(shape.cols) * ulp) << "row " << r;
      }
    }
    std::vector<T> log_y = x;  // in place
    tp::backend::cpu::log_softmax(log_y.data(), log_y.data(), shape.rows, shape.cols);
    tp_test::expect_all_near(log_y, reference(wide, shape.rows, shape.cols, true), 2 * ulp, 1e-15);
    std::vector<T> in_place = x;
    tp::backend::cpu::softmax(in_place.data(), in_place.data(), shape.rows, shape.cols);
    EXPECT_EQ(in_place, y);
  }
}

TYPED_TEST(SoftmaxTest, HugeLogitsAndMinusInfinityAreStable) {
  using T = TypeParam;
  const T inf = std::numeric_limits<T>::infinity();
  // Row 0: huge logits (exp(1e4) overflows any float type unshifted). Row 1: -inf entries get probability 0.
  // Row 2: a single finite entry among -inf takes everything.
  const std::vector<T> x{T{1e4}, T{1e4}, T{1e4 - 1}, T{-1e4},  //
                         -inf,   T{0},   -inf,       T{0},     //
                         -inf,   -inf,   T{-5e3},    -inf};
  std::vector<T> y(x.size());
  tp::backend::cpu::softmax(x.data(), y.data(), 3, 4);
  const double e = std::exp(-1.0);
  const double z = 2 + e;
  const std::vector<double> expected{1 / z, 1 / z, e / z, 0, 0, 0.5, 0, 0.5, 0, 0, 1, 0};
  tp_test::expect_all_near(y, expected, 4 * tp_test::epsilon_of<T>(), 0);
  std::vector<T> log_y(x.size());
  tp::backend::cpu::log_softmax(x.data(), log_y.data(), 3, 4);
  const double log_z = std::log(z);
  const double log_half = std::log(0.5);
  const std::vector<double> log_expected{-log_z,    -log_z,   -1 - log_z, -2e4 - log_z, -INFINITY, log_half,
                                         -INFINITY, log_half, -INFINITY,  -INFINITY,    0,         -INFINITY};
  tp_test::expect_all_near(log_y, log_expected, 4 * tp_test::epsilon_of<T>(), 0);
}

TYPED_TEST(SoftmaxTest, UndefinedRowsAreNaN) {
  using T = TypeParam;
  const T inf = std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // All -inf; a +inf; a NaN. The next row stays clean: a bad row does not leak.
  const std::vector<T> x{-inf, -inf, T{1}, inf, nan, T{1}, T{0}, T{0}};
  std::vector<T> y(x.size());
  tp::backend::cpu::softmax(x.data(), y.data(), 4, 2);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isnan(y[i])) << "element " << i;
  EXPECT_EQ(y[6], T{0.5});
  EXPECT_EQ(y[7], T{0.5});
}

TEST(Softmax, RejectsNegativeSizesAndNullPointers) {
  std::vector<float> buffer(8, 1.0F);
  float* data = buffer.data();
  expect_invalid([&] { tp::backend::cpu::softmax<float>(data, data, -1, 2); }, {"[cpu]", "softmax", "rows = -1"});
  expect_invalid([&] { tp::backend::cpu::log_softmax<float>(data, data, 2, -2); }, {"log_softmax", "cols = -2"});
  expect_invalid([&] { tp::backend::cpu::softmax<float>(nullptr, data, 2, 2); }, {"x is null", "4 elements"});
  tp::backend::cpu::softmax<float>(nullptr, nullptr, 3, 0);
}

// Softmax and the cross-entropy's gradient keep each row's exponentials while summing them (rows up to
// kCachedExpCols entries) instead of taking them twice: the bits must be those of the two-pass formula, for a
// cached row and for a wider one.
template <typename T>
void expect_two_pass_bits(std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
  const std::vector<T> x = tp_test::random_vector<T>(rng, rows * cols, -30, 30);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    labels[static_cast<std::size_t>(r)] = static_cast<std::int32_t>((r * 7) % cols);
  std::vector<T> y(x.size());
  std::vector<T> loss(static_cast<std::size_t>(rows));
  std::vector<T> grad(x.size());
  tp::backend::cpu::softmax(x.data(), y.data(), rows, cols);
  tp::backend::cpu::sparse_softmax_cross_entropy(x.data(), labels.data(), loss.data(), grad.data(), rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = x.data() + r * cols;
    double max = static_cast<double>(row[0]);
    for (std::int64_t c = 1; c < cols; ++c) max = std::max(max, static_cast<double>(row[c]));
    double sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(row[c]) - max);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double probability = std::exp(static_cast<double>(row[c]) - max) / sum;
      const auto index = static_cast<std::size_t>(r * cols + c);
      ASSERT_EQ(y[index], static_cast<T>(probability)) << "softmax row " << r << " col " << c;
      const bool is_label = c == labels[static_cast<std::size_t>(r)];
      ASSERT_EQ(grad[index], static_cast<T>(is_label ? probability - 1.0 : probability))
          << "cross-entropy gradient row " << r << " col " << c;
    }
  }
}

TYPED_TEST(SoftmaxTest, CachedExponentialsKeepTheTwoPassBits) {
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  namespace detail = tp::backend::cpu::detail;
  for (const std::int64_t cols :
       std::vector<std::int64_t>{1, 10, detail::kCachedExpCols, detail::kCachedExpCols + 1, 1000}) {
    expect_two_pass_bits<TypeParam>(37, cols, rng);
  }
}

// A loop of exponentials is handed to the intra-op helpers only when it is long against the hand-off: the main
// job's [32, 10] logits (softmax for the accuracy, the cross-entropy and its gradient) run on their caller and
// wake no helper, while [128, 10] and larger batches split.
TEST(Softmax, SmallBatchesOfLogitsRunOnTheirCallerAndLargerOnesSplit) {
  namespace cpu = tp::backend::cpu;
  cpu::set_intra_op_threads(2);
  constexpr std::int64_t kCols = 10;
  auto handed_for = [&](std::int64_t rows) {
    const std::vector<float> x(static_cast<std::size_t>(rows * kCols), 0.5F);
    const std::vector<std::int32_t> labels(static_cast<std::size_t>(rows), 3);
    std::vector<float> y(x.size());
    std::vector<float> loss(static_cast<std::size_t>(rows));
    const std::uint64_t before = cpu::detail::loops_handed_to_helpers();
    cpu::softmax(x.data(), y.data(), rows, kCols);
    cpu::sparse_softmax_cross_entropy(x.data(), labels.data(), loss.data(), y.data(), rows, kCols);
    return cpu::detail::loops_handed_to_helpers() - before;
  };
  EXPECT_EQ(handed_for(32), 0U);
  EXPECT_EQ(handed_for(51), 0U);
  EXPECT_EQ(handed_for(52), 2U);
  EXPECT_EQ(handed_for(128), 2U);
  EXPECT_EQ(handed_for(4096), 2U);
  cpu::set_intra_op_threads(1);
}

}  // namespace
