// SPDX-License-Identifier: Apache-2.0
// SGD and Adam updates against double reference implementations of the Keras formulas, over three steps.
// The kernels do elementwise arithmetic in T, so float results are compared with rel 1e-5 / abs 1e-7 (the
// update is ~lr = 1e-3 in size and each step adds a few float roundings), double ones with rel 1e-12 /
// abs 1e-15.

#include "backend/cpu/kernels/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"

namespace {

using tp::backend::cpu::adam_update;
using tp::backend::cpu::sgd_update;
using tp_test::expect_invalid;

template <typename T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr double rel = 1e-5;
  static constexpr double abs = 1e-7;
};
template <>
struct Tolerance<double> {
  static constexpr double rel = 1e-12;
  static constexpr double abs = 1e-15;
};

template <typename T>
class OptimizerTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(OptimizerTest, FloatTypes);

TYPED_TEST(OptimizerTest, AdamThreeStepsMatchReference) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  for (std::int64_t n : {0, 1, 7, 257}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::vector<T> param = tp_test::random_vector<T>(rng, n, -1, 1);
    std::vector<T> m(param.size(), T{0});
    std::vector<T> v(param.size(), T{0});
    std::vector<double> ref_param = tp_test::widen(param);
    std::vector<double> ref_m(param.size(), 0.0);
    std::vector<double> ref_v(param.size(), 0.0);
    // Non-default hyperparameters too, so a swapped beta cannot pass.
    const double lr = 0.01;
    const double beta1 = 0.8;
    const double beta2 = 0.95;
    const double epsilon = 1e-6;
    for (std::int64_t step = 1; step <= 3; ++step) {
      const std::vector<T> grad = tp_test::random_vector<T>(rng, n, -2, 2);
      adam_update(param.data(), grad.data(), m.data(), v.data(), n, static_cast<T>(lr), static_cast<T>(beta1),
                  static_cast<T>(beta2), static_cast<T>(epsilon), step);
      const auto t = static_cast<double>(step);
      const double b1 = static_cast<T>(beta1);  // the hyperparameters as the kernel received them
      const double b2 = static_cast<T>(beta2);
      const double alpha = static_cast<T>(lr) * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
      for (std::size_t i = 0; i < param.size(); ++i) {
        const double g = grad[i];
        ref_m[i] += (g - ref_m[i]) * (1 - b1);
        ref_v[i] += (g * g - ref_v[i]) * (1 - b2);
        ref_param[i] -= ref_m[i] * alpha / (std::sqrt(ref_v[i]) + static_cast<T>(epsilon));
      }
    }
    tp_test::expect_all_near(m, ref_m, Tolerance<T>::rel, Tolerance<T>::abs);
    tp_test::expect_all_near(v, ref_v, Tolerance<T>::rel, Tolerance<T>::abs);
    tp_test::expect_all_near(param, ref_param, Tolerance<T>::rel, Tolerance<T>::abs);
  }
}

TYPED_TEST(OptimizerTest, AdamFirstStepMovesEachParameterByAboutLr) {
  using T = TypeParam;
  // At step 1 with the defaults, m = 0.1 g, v = 0.001 g^2 and alpha = lr sqrt(0.001) / 0.1, so the step is
  // lr * g / (|g| + eps / sqrt(0.001)): lr against the gradient's sign, for |g| >> eps.
  std::vector<T> param{T{1}, T{1}, T{1}};
  const std::vector<T> grad{T{3}, T{-0.5}, T{0}};
  std::vector<T> m(3, T{0});
  std::vector<T> v(3, T{0});
  adam_update(param.data(), grad.data(), m.data(), v.data(), 3, static_cast<T>(tp::backend::cpu::kAdamLearningRate),
              static_cast<T>(tp::backend::cpu::kAdamBeta1), static_cast<T>(tp::backend::cpu::kAdamBeta2),
              static_cast<T>(tp::backend::cpu::kAdamEpsilon), 1);
  EXPECT_NEAR(static_cast<double>(param[0]), 1 - 1e-3, 1e-6);
  EXPECT_NEAR(static_cast<double>(param[1]), 1 + 1e-3, 1e-6);
  EXPECT_EQ(param[2], T{1});
}

TYPED_TEST(OptimizerTest, SgdVariantsMatchReference) {
  using T = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  const std::int64_t n = 13;
  const double lr = 0.05;
  for (double momentum : {0.0, 0.9}) {
    for (bool nesterov : {false, true}) {
      for (bool with_velocity : {false, true}) {
        if (!with_velocity && momentum != 0) continue;
        SCOPED_TRACE(::testing::Message()
                     << "momentum=" << momentum << " nesterov=" << nesterov << " velocity=" << with_velocity);
        std::vector<T> param = tp_test::random_vector<T>(rng, n);
        std::vector<T> velocity(param.size(), T{0});
        std::vector<double> ref_param = tp_test::widen(param);
        std::vector<double> ref_velocity(param.size(), 0.0);
        const double mu = static_cast<T>(momentum);
        const double rate = static_cast<T>(lr);
        for (int step = 0; step < 3; ++step) {
          const std::vector<T> grad = tp_test::random_vector<T>(rng, n, -2, 2);
          sgd_update(param.data(), grad.data(), with_velocity ? velocity.data() : nullptr, n, static_cast<T>(lr),
                     static_cast<T>(momentum), nesterov);
          for (std::size_t i = 0; i < param.size(); ++i) {
            const double g = grad[i];
            if (!with_velocity) {
              ref_param[i] -= rate * g;
              continue;
            }
            ref_velocity[i] = mu * ref_velocity[i] - rate * g;
            ref_param[i] += nesterov ? mu * ref_velocity[i] - rate * g : ref_velocity[i];
          }
        }
        tp_test::expect_all_near(param, ref_param, Tolerance<T>::rel, Tolerance<T>::abs);
        if (with_velocity) tp_test::expect_all_near(velocity, ref_velocity, Tolerance<T>::rel, Tolerance<T>::abs);
      }
    }
  }
}

TEST(Optimizer, RejectsBadArgumentsNamingThem) {
  std::vector<float> buffer(4, 1.0F);
  float* data = buffer.data();
  expect_invalid([&] { adam_update(data, data, data, data, 4, 1e-3F, 0.9F, 0.999F, 1e-7F, 0); },
                 {"[cpu]", "adam_update", "step = 0", ">= 1"});
  expect_invalid([&] { adam_update(data, data, data, data, 4, 1e-3F, 0.9F, 0.999F, 1e-7F, -3); }, {"step = -3"});
  expect_invalid([&] { adam_update(data, data, data, data, 4, 1e-3F, 1.0F, 0.999F, 1e-7F, 1); }, {"beta1 = 1"});
  expect_invalid([&] { adam_update(data, data, data, data, 4, 1e-3F, 0.9F, -0.5F, 1e-7F, 1); }, {"beta2 = -0.5"});
  expect_invalid([&] { adam_update(data, data, data, data, 4, 1e-3F, 0.9F, 0.999F, -1.0F, 1); }, {"epsilon = -1"});
  expect_invalid([&] { adam_update<float>(data, data, nullptr, data, 4, 1e-3F, 0.9F, 0.999F, 1e-7F, 1); },
                 {"m is null"});
  expect_invalid([&] { adam_update(data, data, data, data, -1, 1e-3F, 0.9F, 0.999F, 1e-7F, 1); }, {"n = -1"});
  expect_invalid([&] { sgd_update<float>(data, data, nullptr, 4, 0.1F, 0.9F, false); },
                 {"sgd_update", "momentum = 0.9", "velocity is null"});
  expect_invalid([&] { sgd_update<float>(data, nullptr, data, 4, 0.1F, 0.0F, false); }, {"grad is null"});
  adam_update<float>(nullptr, nullptr, nullptr, nullptr, 0, 1e-3F, 0.9F, 0.999F, 1e-7F, 1);
  sgd_update<float>(nullptr, nullptr, nullptr, 0, 0.1F, 0.0F, false);
}

}  // namespace
