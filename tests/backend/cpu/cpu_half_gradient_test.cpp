// SPDX-License-Identifier: Apache-2.0
// The kernels that carry 16-bit weight gradients from the backward pass to the float32 master weights:
// the collectives' reduction (add_scaled_half), the loss-scaling check (all_finite on float16 / bfloat16) and
// the updates that widen and unscale a gradient as they read it (scaled_optimizer.hpp).
//
// All are exact by construction, so they are compared bitwise: add_scaled_half against one float32 sum
// rounded once per element; the scaled updates against the float32 kernel run on the gradient widened and
// multiplied by the scale first (over sizes that are not multiples of the kernels' blocks).

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/finite.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "backend/cpu/kernels/optimizer.hpp"
#include "backend/cpu/kernels/scaled_optimizer.hpp"

namespace tp::backend::cpu {
namespace {

using tp_test::expect_invalid;

template <typename H>
class HalfGradients : public ::testing::Test {};
using HalfTypes = ::testing::Types<Half, BFloat16>;
TYPED_TEST_SUITE(HalfGradients, HalfTypes);

template <typename H>
std::vector<H> random_half(std::mt19937& rng, std::int64_t n, double scale) {
  std::vector<H> values;
  for (double value : tp_test::random_vector<double>(rng, n, -scale, scale))
    values.push_back(H::from_float(static_cast<float>(value)));
  return values;
}

std::vector<std::uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits;
  for (float value : values) bits.push_back(std::bit_cast<std::uint32_t>(value));
  return bits;
}

TYPED_TEST(HalfGradients, AddScaledRoundsOneFloat32SumPerElement) {
  using H = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  for (const std::int64_t n : {0, 1, 7, 2048, 5001}) {  // empty, tails, one block, blocks plus a tail
    std::vector<H> y = random_half<H>(rng, n, 100.0);
    const std::vector<H> x = random_half<H>(rng, n, 100.0);
    std::vector<H> expected;
    for (std::int64_t i = 0; i < n; ++i) {
      expected.push_back(H::from_float(static_cast<float>(y[static_cast<std::size_t>(i)]) +
                                       0.5F * static_cast<float>(x[static_cast<std::size_t>(i)])));
    }
    add_scaled_half<H>(y.data(), 0.5F, x.data(), n);
    EXPECT_EQ(y, expected) << "n = " << n;
  }
}

TEST(HalfGradients, Float16SumOverflowsToInfinity) {
  // 60000 + 60000 is beyond float16's largest finite value (65504): the reduction must say so, not saturate,
  // so that loss scaling sees the overflow and skips the step.
  std::vector<Half> y{Half::from_float(60000.0F)};
  const std::vector<Half> x{Half::from_float(60000.0F)};
  add_scaled_half<Half>(y.data(), 1.0F, x.data(), 1);
  EXPECT_TRUE(std::isinf(static_cast<float>(y[0])));
  EXPECT_FALSE(all_finite<Half>(y.data(), 1));
}

TYPED_TEST(HalfGradients, AllFiniteSeesInfinityAndNanAnywhere) {
  using H = TypeParam;
  std::vector<H> values(1000, H::from_float(1.0F));
  values[3] = H::from_bits(std::is_same_v<H, Half> ? 0x7BFF : 0x7F7F);  // the largest finite value
  EXPECT_TRUE(all_finite<H>(values.data(), 1000));
  values[3] = H::from_float(std::numeric_limits<float>::max());  // rounds to Inf in both formats
  EXPECT_FALSE(all_finite<H>(values.data(), 1000));
  values[3] = H::from_float(-0.0F);
  EXPECT_TRUE(all_finite<H>(values.data(), 1000));
  EXPECT_TRUE(all_finite<H>(values.data(), 0));
  for (const float special : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()}) {
    for (const std::size_t at : {std::size_t{0}, std::size_t{517}, std::size_t{999}}) {
      std::vector<H> with = values;
      with[at] = H::from_float(special);
      EXPECT_FALSE(all_finite<H>(with.data(), 1000)) << special << " at " << at;
    }
  }
}

// The scaled updates equal the float32 ones on the widened, scaled gradient: bit for bit.
TYPED_TEST(HalfGradients, ScaledUpdatesEqualFloat32UpdatesOnTheUnscaledGradient) {
  using H = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  constexpr float kScale = 0x1p-15F;  // 1 / loss scale
  for (const std::int64_t n : {1, 2047, 2048, 6001}) {
    const std::vector<H> grad = random_half<H>(rng, n, 1000.0);
    std::vector<float> widened;
    for (const H g : grad) widened.push_back(static_cast<float>(g) * kScale);
    const std::vector<float> start = tp_test::random_vector<float>(rng, n, -1.0, 1.0);
    std::vector<float> param = start, m(static_cast<std::size_t>(n), 0.0F), v(static_cast<std::size_t>(n), 0.0F);
    std::vector<float> ref_param = start, ref_m = m, ref_v = v;
    for (std::int64_t step = 1; step <= 3; ++step) {
      adam_update_scaled<float, H>(param.data(), grad.data(), kScale, m.data(), v.data(), n, 1e-3F, 0.9F, 0.999F, 1e-7F,
                                   step);
      adam_update<float>(ref_param.data(), widened.data(), ref_m.data(), ref_v.data(), n, 1e-3F, 0.9F, 0.999F, 1e-7F,
                         step);
    }
    EXPECT_EQ(bits_of(param), bits_of(ref_param)) << "adam, n = " << n;
    EXPECT_EQ(bits_of(m), bits_of(ref_m));
    EXPECT_EQ(bits_of(v), bits_of(ref_v));
    EXPECT_NE(bits_of(param), bits_of(start));
    std::vector<float> velocity(static_cast<std::size_t>(n), 0.0F), ref_velocity = velocity;
    param = ref_param = start;
    for (int step = 0; step < 2; ++step) {
      sgd_update_scaled<float, H>(param.data(), grad.data(), kScale, velocity.data(), n, 0.01F, 0.9F, true);
      sgd_update<float>(ref_param.data(), widened.data(), ref_velocity.data(), n, 0.01F, 0.9F, true);
    }
    EXPECT_EQ(bits_of(param), bits_of(ref_param)) << "sgd, n = " << n;
    EXPECT_EQ(bits_of(velocity), bits_of(ref_velocity));
  }
}

TEST(HalfGradients, SummedBfloat16UpdateWritesCopiesThatAreTheCastOfTheParameterOnEveryPattern) {
  // One and two gradients (adam_bfloat16's AVX-512 forms and their scalar tails), with compute copies: the copies
  // hold narrow(param) bit for bit, also for zeros, denormals (which vcvtneps2bf16 would flush), rounding ties,
  // the largest finite values, infinities and NaNs. Zero gradients and slots leave each parameter as it was
  // (a NaN quieted), so the copies see every pattern below.
  std::vector<float> start;
  for (const std::uint32_t bits :
       {0x0000'0000U, 0x8000'0000U, 0x0000'0001U, 0x8000'7FFFU, 0x0000'8000U, 0x0001'8000U, 0x007F'FFFFU, 0x0080'0000U,
        0x3F80'8000U, 0x3F81'8000U, 0x3F80'7FFFU, 0x7F7F'FFFFU, 0xFF7F'8000U, 0x7F80'0000U, 0xFF80'0000U, 0x7FC0'0000U,
        0x7F80'0001U, 0xFFFF'FFFFU, 0x7FBF'FFFFU}) {
    start.push_back(std::bit_cast<float>(bits));
  }
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  for (float value : tp_test::random_vector<float>(rng, 45, -3.0, 3.0)) start.push_back(value);  // 64 in all
  const auto n = static_cast<std::int64_t>(start.size()) + 5;  // a scalar tail after the vector groups
  start.resize(static_cast<std::size_t>(n), 0.5F);
  const std::vector<BFloat16> zero(static_cast<std::size_t>(n));
  for (const std::size_t count : {1U, 2U}) {
    std::vector<float> param = start, m(start.size(), 0.0F), v(start.size(), 0.0F), mirror(start.size());
    std::vector<BFloat16> copy(start.size()), mirror_copy(start.size());
    const std::array<const BFloat16*, 2> grads{zero.data(), zero.data()};
    const std::array<AdamMirror<float>, 1> mirrors{{{.param = mirror.data(), .m = nullptr, .v = nullptr}}};
    const std::array<BFloat16*, 1> mirror_copies{mirror_copy.data()};
    adam_update_summed_half<BFloat16>(param.data(), grads.data(), count, m.data(), v.data(), n, 1e-3F, 0.9F, 0.999F,
                                      1e-7F, 1, mirrors, {.own = copy.data(), .mirrors = mirror_copies});
    for (std::size_t index = 0; index < start.size(); ++index) {
      const std::uint16_t expected = float_to_bfloat16_bits(param[index]);
      EXPECT_EQ(copy[index].bits, expected)
          << count << " gradients, parameter bits " << std::hex << std::bit_cast<std::uint32_t>(param[index]);
      EXPECT_EQ(mirror_copy[index].bits, expected);
    }
    EXPECT_EQ(bits_of(mirror), bits_of(param));
  }
}

TEST(HalfGradients, ScaledUpdatesOnFloatAndDoubleGradients) {
  std::vector<double> param{1.0, -2.0, 3.0}, ref = param;
  const std::vector<double> grad{0.5, 0.25, -4.0}, halved{0.25, 0.125, -2.0};
  sgd_update_scaled<double, double>(param.data(), grad.data(), 0.5, nullptr, 3, 0.1, 0.0, false);
  sgd_update<double>(ref.data(), halved.data(), nullptr, 3, 0.1, 0.0, false);
  EXPECT_EQ(param, ref);
  std::vector<float> fparam{1.0F}, m{0.0F}, v{0.0F}, ref_param{1.0F}, ref_m{0.0F}, ref_v{0.0F};
  const std::vector<float> fgrad{8.0F}, fhalved{4.0F};
  adam_update_scaled<float, float>(fparam.data(), fgrad.data(), 0.5F, m.data(), v.data(), 1, 1e-3F, 0.9F, 0.999F, 1e-7F,
                                   1);
  adam_update<float>(ref_param.data(), fhalved.data(), ref_m.data(), ref_v.data(), 1, 1e-3F, 0.9F, 0.999F, 1e-7F, 1);
  EXPECT_EQ(fparam, ref_param);
  EXPECT_EQ(m, ref_m);
}

TEST(HalfGradients, RejectBadArgumentsNamingTheKernel) {
  std::vector<Half> buffer(4);
  std::vector<float> param(4), m(4), v(4);
  expect_invalid([&] { add_scaled_half<Half>(buffer.data(), 1.0F, buffer.data(), -1); }, {"add_scaled_half", "n"});
  expect_invalid([&] { add_scaled_half<Half>(buffer.data(), 1.0F, nullptr, 4); }, {"add_scaled_half", "x"});
  expect_invalid(
      [&] {
        adam_update_scaled<float, Half>(param.data(), buffer.data(), 1.0F, m.data(), v.data(), 4, 1e-3F, 1.5F, 0.999F,
                                        1e-7F, 1);
      },
      {"adam_update", "beta1"});
  expect_invalid(
      [&] {
        adam_update_scaled<float, Half>(param.data(), nullptr, 1.0F, m.data(), v.data(), 4, 1e-3F, 0.9F, 0.999F, 1e-7F,
                                        1);
      },
      {"adam_update_scaled", "grad"});
  expect_invalid(
      [&] { sgd_update_scaled<float, Half>(param.data(), buffer.data(), 1.0F, nullptr, 4, 0.1F, 0.9F, false); },
      {"sgd_update", "momentum"});
}

}  // namespace
}  // namespace tp::backend::cpu
