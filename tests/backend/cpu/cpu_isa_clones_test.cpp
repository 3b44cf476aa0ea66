// SPDX-License-Identifier: Apache-2.0
// The element-wise kernels marked TP_ISA_CLONES run the widest clone this CPU supports (AVX-512 or AVX2 on
// current x86-64). Every clone must round exactly as the plain scalar formula does, or replicas on machines
// with different instruction sets would drift apart: these tests compare bit for bit against the formulas
// computed here, in a translation unit compiled for the baseline instruction set (no fused multiply-add
// exists there, so every operation rounds on its own). A clone that fuses (the kernels built without
// -ffp-contract=off) fails AdamMatchesTheScalarFormulaBitForBit. Lengths and offsets are odd so that the
// vector loops' peeled heads and tails run too. The axis sum (reduce_sum) is checked the same way.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/activations.hpp"
#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/optimizer.hpp"
#include "backend/cpu/kernels/reduce.hpp"

namespace {

constexpr std::int64_t kLength = 1037;
constexpr std::size_t kOffset = 3;  // misaligns every array by 12 bytes

std::string widest_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2")) return "avx2";
#endif
  return "baseline";
}

class IsaClones : public ::testing::Test {
 protected:
  void SetUp() override { RecordProperty("isa", widest_isa()); }

  std::vector<float> random(double low = -1.0, double high = 1.0) {
    return tp_test::random_vector<float>(rng_, kLength + static_cast<std::int64_t>(kOffset), low, high);
  }

  std::mt19937 rng_{tp_test::test_seed()};
};

// Counts differing bit patterns, so a failure says how many elements drifted rather than printing 1037 lines.
std::int64_t mismatches(const std::vector<float>& actual, const std::vector<float>& expected) {
  std::int64_t count = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    count += std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0 ? 1 : 0;
  }
  return count;
}

TEST_F(IsaClones, AdamMatchesTheScalarFormulaBitForBit) {
  TP_TRACE_SEED(tp_test::test_seed());
  SCOPED_TRACE("widest clone: " + widest_isa());
  std::vector<float> param = random();
  std::vector<float> m = random(-0.01, 0.01);
  std::vector<float> v = random(0.0, 1e-4);
  std::vector<float> expected_param = param;
  std::vector<float> expected_m = m;
  std::vector<float> expected_v = v;
  const float lr = 1e-3F;
  const float beta1 = 0.9F;
  const float beta2 = 0.999F;
  const float epsilon = 1e-7F;
  for (std::int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grad = random();
    tp::backend::cpu::adam_update<float>(param.data() + kOffset, grad.data() + kOffset, m.data() + kOffset,
                                         v.data() + kOffset, kLength, lr, beta1, beta2, epsilon, step);
    const auto t = static_cast<double>(step);
    const auto alpha = static_cast<float>(static_cast<double>(lr) * std::sqrt(1.0 - std::pow(double{beta2}, t)) /
                                          (1.0 - std::pow(double{beta1}, t)));
    for (std::size_t i = kOffset; i < param.size(); ++i) {
      const float g = grad[i];
      expected_m[i] = expected_m[i] + (g - expected_m[i]) * (1.0F - beta1);
      expected_v[i] = expected_v[i] + (g * g - expected_v[i]) * (1.0F - beta2);
      expected_param[i] -= expected_m[i] * alpha / (std::sqrt(expected_v[i]) + epsilon);
    }
  }
  EXPECT_EQ(mismatches(m, expected_m), 0);
  EXPECT_EQ(mismatches(v, expected_v), 0);
  EXPECT_EQ(mismatches(param, expected_param), 0);
}

TEST_F(IsaClones, NesterovSgdMatchesTheScalarFormulaBitForBit) {
  TP_TRACE_SEED(tp_test::test_seed());
  std::vector<float> param = random();
  std::vector<float> velocity = random(-0.01, 0.01);
  const std::vector<float> grad = random();
  std::vector<float> expected_param = param;
  std::vector<float> expected_velocity = velocity;
  const float lr = 0.01F;
  const float momentum = 0.9F;
  tp::backend::cpu::sgd_update<float>(param.data() + kOffset, grad.data() + kOffset, velocity.data() + kOffset, kLength,
                                      lr, momentum, true);
  for (std::size_t i = kOffset; i < param.size(); ++i) {
    expected_velocity[i] = momentum * expected_velocity[i] - lr * grad[i];
    expected_param[i] += momentum * expected_velocity[i] - lr * grad[i];
  }
  EXPECT_EQ(mismatches(velocity, expected_velocity), 0);
  EXPECT_EQ(mismatches(param, expected_param), 0);
}

TEST_F(IsaClones, AddScaledAndDivisionMatchTheScalarFormulasBitForBit) {
  TP_TRACE_SEED(tp_test::test_seed());
  std::vector<float> y = random();
  const std::vector<float> x = random();
  const std::vector<float> divisor = random(0.5, 2.0);
  std::vector<float> expected_y = y;
  const float alpha = 0.3F;
  tp::backend::cpu::add_scaled<float>(y.data() + kOffset, alpha, x.data() + kOffset, kLength);
  for (std::size_t i = kOffset; i < y.size(); ++i) expected_y[i] += alpha * x[i];
  EXPECT_EQ(mismatches(y, expected_y), 0);

  std::vector<float> quotient(y.size(), 0.0F);
  std::vector<float> expected_quotient(y.size(), 0.0F);
  tp::backend::cpu::binary<float>(tp::backend::cpu::BinaryOp::div, x.data() + kOffset, divisor.data() + kOffset,
                                  quotient.data() + kOffset, kLength);
  for (std::size_t i = kOffset; i < y.size(); ++i) expected_quotient[i] = x[i] / divisor[i];
  EXPECT_EQ(mismatches(quotient, expected_quotient), 0);
}

TEST_F(IsaClones, ReluAndItsGradientKeepNanAndSignedZeroAsTheScalarFormulas) {
  std::vector<float> x = random();
  x[kOffset] = std::nanf("");
  x[kOffset + 1] = -0.0F;
  x[kOffset + 2] = 0.0F;
  const std::vector<float> dy = random();
  std::vector<float> y(x.size(), 1.0F);
  std::vector<float> dx(x.size(), 1.0F);
  std::vector<float> expected_y = y;
  std::vector<float> expected_dx = dx;
  tp::backend::cpu::relu<float>(x.data() + kOffset, y.data() + kOffset, kLength);
  tp::backend::cpu::relu_grad<float>(dy.data() + kOffset, x.data() + kOffset, dx.data() + kOffset, kLength);
  for (std::size_t i = kOffset; i < x.size(); ++i) {
    expected_y[i] = x[i] <= 0.0F ? 0.0F : x[i];
    expected_dx[i] = x[i] > 0.0F ? dy[i] : 0.0F;
  }
  EXPECT_EQ(mismatches(y, expected_y), 0);
  EXPECT_EQ(mismatches(dx, expected_dx), 0);
  EXPECT_TRUE(std::isnan(y[kOffset]));
}

// The axis sum (bias gradients) widens each element to double and adds the rows in order, one sum per inner
// position; full blocks of inner positions keep their sums in vector registers. Inner 200: three full blocks
// and a partial one; the expected sums are the scalar loop's, rounded to float once.
TEST_F(IsaClones, AxisSumAddsTheRowsInOrderAsTheScalarLoop) {
  constexpr std::int64_t kOuter = 2;
  constexpr std::int64_t kAxis = 37;
  constexpr std::int64_t kInner = 200;
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  // Rows 1 and 2 are 2^60 and -2^60 in every column: they swallow row 0 in order (row 0 + 2^60 - 2^60 = 0)
  // and the other rows in the reverse order, so a sum in any other order gives other bits.
  std::vector<float> x = tp_test::random_vector<float>(rng, kOuter * kAxis * kInner);
  for (std::int64_t o = 0; o < kOuter; ++o) {
    for (std::int64_t i = 0; i < kInner; ++i) {
      x[static_cast<std::size_t>((o * kAxis + 1) * kInner + i)] = 0x1.0p60F;
      x[static_cast<std::size_t>((o * kAxis + 2) * kInner + i)] = -0x1.0p60F;
    }
  }
  std::vector<float> y(static_cast<std::size_t>(kOuter * kInner), 0.0F);
  std::vector<float> expected(y.size(), 0.0F);
  tp::backend::cpu::reduce_sum<float>(x.data(), y.data(), kOuter, kAxis, kInner);
  for (std::int64_t o = 0; o < kOuter; ++o) {
    for (std::int64_t i = 0; i < kInner; ++i) {
      double sum = 0;
      for (std::int64_t a = 0; a < kAxis; ++a)
        sum += static_cast<double>(x[static_cast<std::size_t>((o * kAxis + a) * kInner + i)]);
      expected[static_cast<std::size_t>(o * kInner + i)] = static_cast<float>(sum);
    }
  }
  EXPECT_EQ(mismatches(y, expected), 0);
}

}  // namespace
