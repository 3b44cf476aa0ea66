// SPDX-License-Identifier: Apache-2.0
// Sparse categorical cross-entropy against float64 references, for float/double logits and int32/int64
// labels. Losses and gradients are computed per row in double and rounded once, so they must be within
// 4 ulps of T of the reference (plus 1e-15 absolute for gradients near 0, and 4 ulps of the largest logit
// for losses, whose reference lse - logit cancels). The logits gradient is also
// checked against central finite differences of the double loss (step 1e-5, tolerance 1e-7: the
// O(h^2) truncation error is about 1e-11 and the cancellation error about 1e-11).

#include "backend/cpu/kernels/cross_entropy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"

namespace {

using tp::backend::cpu::kProbabilityEpsilon;
using tp::backend::cpu::sparse_categorical_cross_entropy_from_probs;
using tp::backend::cpu::sparse_softmax_cross_entropy;
using tp_test::expect_invalid;

struct Batch {
  std::int64_t rows;
  std::int64_t cols;
};
const std::vector<Batch> kBatches = {{1, 1}, {7, 13}, {5, 2}, {1, 100}, {0, 4}};

double reference_logsumexp(const double* row, std::int64_t cols) {
  double max = -std::numeric_limits<double>::infinity();
  for (std::int64_t c = 0; c < cols; ++c) max = std::max(max, row[c]);
  double sum = 0;
  for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(row[c] - max);
  return max + std::log(sum);
}

template <typename Pair>
class CrossEntropyTest : public ::testing::Test {};
using Pairs = ::testing::Types<std::tuple<float, std::int32_t>, std::tuple<float, std::int64_t>,
                               std::tuple<double, std::int32_t>, std::tuple<double, std::int64_t>>;
TYPED_TEST_SUITE(CrossEntropyTest, Pairs);

TYPED_TEST(CrossEntropyTest, FromLogitsMatchesReference) {
  using T = std::tuple_element_t<0, TypeParam>;
  using Label = std::tuple_element_t<1, TypeParam>;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  const double tolerance = 4 * tp_test::epsilon_of<T>();
  for (Batch batch : kBatches) {
    SCOPED_TRACE(::testing::Message() << batch.rows << "x" << batch.cols);
    const std::vector<T> logits = tp_test::random_vector<T>(rng, batch.rows * batch.cols, -8, 8);
    std::uniform_int_distribution<std::int64_t> pick(0, batch.cols - 1);
    std::vector<Label> labels;
    for (std::int64_t r = 0; r < batch.rows; ++r) labels.push_back(static_cast<Label>(pick(rng)));
    const std::vector<double> wide = tp_test::widen(logits);
    std::vector<double> expected_loss;
    std::vector<double> expected_grad;
    for (std::int64_t r = 0; r < batch.rows; ++r) {
      const double* row = wide.data() + r * batch.cols;
      const double lse = reference_logsumexp(row, batch.cols);
      expected_loss.push_back(lse - row[labels[r]]);
      for (std::int64_t c = 0; c < batch.cols; ++c) {
        expected_grad.push_back(std::exp(row[c] - lse) - (c == labels[r] ? 1.0 : 0.0));
      }
    }
    std::vector<T> loss(labels.size(), T{-1});
    std::vector<T> grad(logits.size(), T{-1});
    sparse_softmax_cross_entropy(logits.data(), labels.data(), loss.data(), grad.data(), batch.rows, batch.cols);
    // The reference's lse - logit cancels for small losses: its error is ulps of the logits (|x| <= 8).
    tp_test::expect_all_near(loss, expected_loss, tolerance, 8 * tolerance);
    tp_test::expect_all_near(grad, expected_grad, tolerance, 1e-15);
    // Loss only; and the gradient written over the logits.
    std::vector<T> loss_only(labels.size());
    sparse_softmax_cross_entropy<T, Label>(logits.data(), labels.data(), loss_only.data(), nullptr, batch.rows,
                                           batch.cols);
    EXPECT_EQ(loss_only, loss);
    std::vector<T> aliased = logits;
    sparse_softmax_cross_entropy(aliased.data(), labels.data(), loss_only.data(), aliased.data(), batch.rows,
                                 batch.cols);
    EXPECT_EQ(aliased, grad);
    EXPECT_EQ(loss_only, loss);
  }
}

TEST(CrossEntropy, LogitsGradientMatchesCentralDifferences) {
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  const std::int64_t rows = 4;
  const std::int64_t cols = 7;
  std::vector<double> logits = tp_test::random_vector<double>(rng, rows * cols, -3, 3);
  const std::vector<std::int64_t> labels{0, 6, 3, 3};
  std::vector<double> loss(rows);
  std::vector<double> grad(logits.size());
  sparse_softmax_cross_entropy(logits.data(), labels.data(), loss.data(), grad.data(), rows, cols);
  const double step = 1e-5;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const auto row = static_cast<std::size_t>(static_cast<std::int64_t>(i) / cols);
    const double saved = logits[i];
    std::vector<double> plus(rows);
    std::vector<double> minus(rows);
    logits[i] = saved + step;
    sparse_softmax_cross_entropy<double, std::int64_t>(logits.data(), labels.data(), plus.data(), nullptr, rows, cols);
    logits[i] = saved - step;
    sparse_softmax_cross_entropy<double, std::int64_t>(logits.data(), labels.data(), minus.data(), nullptr, rows, cols);
    logits[i] = saved;
    EXPECT_NEAR(grad[i], (plus[row] - minus[row]) / (2 * step), 1e-7) << "logit " << i;
  }
}

TYPED_TEST(CrossEntropyTest, FromProbabilitiesMatchesReferenceAndClips) {
  using T = std::tuple_element_t<0, TypeParam>;
  using Label = std::tuple_element_t<1, TypeParam>;
  const double tolerance = 4 * tp_test::epsilon_of<T>();
  // Row 0: an ordinary distribution. Row 1: p[label] = 0 clips to eps. Row 2: p[label] = 1 clips to 1 - eps.
  // Row 3: p[label] exactly at eps (inside the clip range, gradient passes).
  const auto eps = static_cast<T>(kProbabilityEpsilon);
  // The probabilities are T's nearest values to these decimals (float rounds them).
  const auto t = [](double value) { return static_cast<T>(value); };
  const std::vector<T> probs{t(0.2), T{0.5}, t(0.3), t(0.6), t(0.4), T{0}, T{0}, T{1}, T{0}, eps, T{0.5}, T{0.5}};
  const std::vector<Label> labels{1, 2, 1, 0};
  std::vector<T> loss(4);
  std::vector<T> grad(probs.size(), T{-1});
  sparse_categorical_cross_entropy_from_probs(probs.data(), labels.data(), loss.data(), grad.data(), 4, 3);
  // Keras divides by the row's sum of clipped probabilities S: loss = log S - log c[label].
  const double e = kProbabilityEpsilon;
  const auto half = static_cast<double>(T{0.5});
  const auto at_eps = static_cast<double>(eps);
  const double sum0 = static_cast<double>(t(0.2)) + half + static_cast<double>(t(0.3));
  const double sum1 = static_cast<double>(t(0.6)) + static_cast<double>(t(0.4)) + e;
  const double sum2 = e + (1 - e) + e;
  const double sum3 = at_eps + half + half;
  const std::vector<double> expected_loss{std::log(sum0) - std::log(half), std::log(sum1) - std::log(e),
                                          std::log(sum2) - std::log(1 - e), std::log(sum3) - std::log(at_eps)};
  tp_test::expect_all_near(loss, expected_loss, tolerance, 0);
  // Entries outside the clip range (0 and 1 here) get no gradient.
  const std::vector<double> expected_grad{1 / sum0, 1 / sum0 - 1 / half,   1 / sum0, 1 / sum1, 1 / sum1, 0, 0, 0,
                                          0,        1 / sum3 - 1 / at_eps, 1 / sum3, 1 / sum3};
  tp_test::expect_all_near(grad, expected_grad, tolerance, 0);
}

TEST(CrossEntropy, ProbabilityGradientMatchesCentralDifferences) {
  const std::vector<double> probs{0.1, 0.7, 0.2, 0.25, 0.25, 0.5};
  const std::vector<std::int32_t> labels{1, 2};
  std::vector<double> loss(2);
  std::vector<double> grad(probs.size());
  sparse_categorical_cross_entropy_from_probs(probs.data(), labels.data(), loss.data(), grad.data(), 2, 3);
  const double step = 1e-6;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    std::vector<double> shifted = probs;
    std::vector<double> plus(2);
    std::vector<double> minus(2);
    shifted[i] = probs[i] + step;
    sparse_categorical_cross_entropy_from_probs<double, std::int32_t>(shifted.data(), labels.data(), plus.data(),
                                                                      nullptr, 2, 3);
    shifted[i] = probs[i] - step;
    sparse_categorical_cross_entropy_from_probs<double, std::int32_t>(shifted.data(), labels.data(), minus.data(),
                                                                      nullptr, 2, 3);
    const std::size_t row = i / 3;
    EXPECT_NEAR(grad[i], (plus[row] - minus[row]) / (2 * step), 1e-6) << "probability " << i;
  }
}

TYPED_TEST(CrossEntropyTest, BadLabelsThrowNamingRowLabelAndClassCountBeforeWriting) {
  using T = std::tuple_element_t<0, TypeParam>;
  using Label = std::tuple_element_t<1, TypeParam>;
  const std::vector<T> logits(6, T{0.5});
  std::vector<T> loss(2, T{-3});
  std::vector<T> grad(6, T{-3});
  for (Label bad : {Label{-1}, Label{3}, std::numeric_limits<Label>::max(), std::numeric_limits<Label>::min()}) {
    const std::vector<Label> labels{Label{0}, bad};
    const std::string value = std::to_string(bad);
    expect_invalid([&] { sparse_softmax_cross_entropy(logits.data(), labels.data(), loss.data(), grad.data(), 2, 3); },
                   {"[cpu]", "sparse_softmax_cross_entropy", "row 1", "label " + value, "3 classes"});
    expect_invalid(
        [&] {
          sparse_categorical_cross_entropy_from_probs(logits.data(), labels.data(), loss.data(), grad.data(), 2, 3);
        },
        {"sparse_categorical_cross_entropy_from_probs", "row 1", "label " + value, "3 classes"});
    EXPECT_EQ(loss, std::vector<T>(2, T{-3})) << "written before the labels were checked";
    EXPECT_EQ(grad, std::vector<T>(6, T{-3}));
  }
  // No classes: every label is out of range.
  const std::vector<Label> zero{Label{0}};
  expect_invalid([&] { sparse_softmax_cross_entropy<T, Label>(nullptr, zero.data(), loss.data(), nullptr, 1, 0); },
                 {"row 0", "label 0", "0 classes"});
  expect_invalid(
      [&] { sparse_softmax_cross_entropy<T, Label>(logits.data(), zero.data(), loss.data(), nullptr, -1, 3); },
      {"rows = -1"});
  expect_invalid([&] { sparse_softmax_cross_entropy<T, Label>(logits.data(), nullptr, loss.data(), nullptr, 2, 3); },
                 {"labels is null"});
}

TEST(CrossEntropy, ExtremeLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  // Huge logits are shifted; a -inf logit at the label costs +inf; a -inf elsewhere has probability 0.
  const std::vector<float> logits{1e4F, 0.0F, -inf, 3.0F, -inf, 3.0F};
  const std::vector<std::int32_t> labels{0, 1};
  std::vector<float> loss(2);
  std::vector<float> grad(6);
  sparse_softmax_cross_entropy(logits.data(), labels.data(), loss.data(), grad.data(), 2, 3);
  EXPECT_EQ(loss[0], 0.0F);
  EXPECT_EQ(loss[1], inf);
  EXPECT_EQ(grad[0], 0.0F);
  EXPECT_EQ(grad[2], 0.0F);
  EXPECT_EQ(grad[4], -1.0F);
  EXPECT_NEAR(grad[3], 0.5F, 1e-7F);
}

}  // namespace
