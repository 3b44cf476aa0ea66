// SPDX-License-Identifier: Apache-2.0
// Initialisers: exact determinism (same seed -> same bytes; one call over [0, n) equals two calls split at
// any k with offset k; results independent of n), and distribution checks on 2^17 samples with bounds of
// about 6 standard errors, so a correct generator fails them with probability far below 1e-6 while a wrong
// range, scale or correlation fails them outright.

#include "backend/cpu/kernels/random.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"

namespace {

using tp_test::expect_invalid;

constexpr std::int64_t kSamples = 1 << 17;

struct Moments {
  double mean = 0;
  double variance = 0;
};

template <typename T>
Moments moments_of(const std::vector<T>& values) {
  Moments result;
  for (T value : values) result.mean += static_cast<double>(value);
  result.mean /= static_cast<double>(values.size());
  for (T value : values) result.variance += std::pow(static_cast<double>(value) - result.mean, 2);
  result.variance /= static_cast<double>(values.size() - 1);
  return result;
}

// Correlation of consecutive samples: ~0 for an independent stream, within 6 / sqrt(n) for a correct one.
template <typename T>
double lag_one_correlation(const std::vector<T>& values, const Moments& moments) {
  double sum = 0;
  for (std::size_t i = 1; i < values.size(); ++i) {
    sum += (static_cast<double>(values[i]) - moments.mean) * (static_cast<double>(values[i - 1]) - moments.mean);
  }
  return sum / (static_cast<double>(values.size() - 1) * moments.variance);
}

template <typename T>
bool same_bytes(const std::vector<T>& left, const std::vector<T>& right) {
  return left.size() == right.size() && std::memcmp(left.data(), right.data(), left.size() * sizeof(T)) == 0;
}

template <typename T>
class RandomTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RandomTest, FloatTypes);

TYPED_TEST(RandomTest, FillWritesTheValue) {
  using T = TypeParam;
  std::vector<T> y(13, T{0});
  tp::backend::cpu::fill(y.data(), 13, T{2.5});
  EXPECT_EQ(y, std::vector<T>(13, T{2.5}));
  tp::backend::cpu::fill<T>(nullptr, 0, T{1});
}

TYPED_TEST(RandomTest, UniformIsDeterministicAndChunkingIndependent) {
  using T = TypeParam;
  const std::int64_t n = 1001;  // odd, not a multiple of the block size
  std::vector<T> whole(n);
  std::vector<T> again(n);
  tp::backend::cpu::uniform(whole.data(), n, T{-1}, T{2}, 42, 0);
  tp::backend::cpu::uniform(again.data(), n, T{-1}, T{2}, 42, 0);
  EXPECT_TRUE(same_bytes(whole, again));
  for (std::int64_t k : {0, 1, 2, 3, 5, 500, 1000, 1001}) {
    std::vector<T> split(n);
    tp::backend::cpu::uniform(split.data(), k, T{-1}, T{2}, 42, 0);
    tp::backend::cpu::uniform(split.data() + k, n - k, T{-1}, T{2}, 42, static_cast<std::uint64_t>(k));
    EXPECT_TRUE(same_bytes(whole, split)) << "split at " << k;
  }
  std::vector<T> other_seed(n);
  tp::backend::cpu::uniform(other_seed.data(), n, T{-1}, T{2}, 43, 0);
  std::int64_t equal = 0;
  for (std::int64_t i = 0; i < n; ++i) equal += whole[i] == other_seed[i] ? 1 : 0;
  EXPECT_LT(equal, 3) << "seeds 42 and 43 give nearly the same stream";
  // Seeds differing only in the high 32 bits are different keys too.
  std::vector<T> high_seed(n);
  tp::backend::cpu::uniform(high_seed.data(), n, T{-1}, T{2}, 42 + (std::uint64_t{1} << 32), 0);
  EXPECT_FALSE(same_bytes(whole, high_seed));
}

TYPED_TEST(RandomTest, NormalIsDeterministicAndChunkingIndependent) {
  using T = TypeParam;
  const std::int64_t n = 999;
  std::vector<T> whole(n);
  tp::backend::cpu::normal(whole.data(), n, T{0}, T{1}, 7, 100);
  for (std::int64_t k : {1, 2, 3, 998}) {
    std::vector<T> split(n);
    tp::backend::cpu::normal(split.data(), k, T{0}, T{1}, 7, 100);
    tp::backend::cpu::normal(split.data() + k, n - k, T{0}, T{1}, 7, 100 + static_cast<std::uint64_t>(k));
    EXPECT_TRUE(same_bytes(whole, split)) << "split at " << k;
  }
  // Element i depends on offset + i only: a shifted window sees the same values.
  std::vector<T> shifted(n - 10);
  tp::backend::cpu::normal(shifted.data(), n - 10, T{0}, T{1}, 7, 110);
  EXPECT_TRUE(std::equal(shifted.begin(), shifted.end(), whole.begin() + 10));
}

TYPED_TEST(RandomTest, UniformDistribution) {
  using T = TypeParam;
  const double low = -2;
  const double high = 3;
  std::vector<T> y(kSamples);
  tp::backend::cpu::uniform(y.data(), kSamples, T{-2}, T{3}, 2024, 0);
  EXPECT_GE(static_cast<double>(*std::min_element(y.begin(), y.end())), low);
  EXPECT_LT(static_cast<double>(*std::max_element(y.begin(), y.end())), high);
  const Moments m = moments_of(y);
  const double variance = (high - low) * (high - low) / 12;  // 2.0833
  const double standard_error = std::sqrt(variance / kSamples);
  EXPECT_NEAR(m.mean, (low + high) / 2, 6 * standard_error);
  EXPECT_NEAR(m.variance, variance, 0.02 * variance);
  // Deciles: each holds 10% +- 6 standard errors of a binomial proportion (0.0005).
  std::vector<std::int64_t> counts(10, 0);
  for (T value : y) ++counts[static_cast<std::size_t>((static_cast<double>(value) - low) / (high - low) * 10)];
  for (std::int64_t count : counts) EXPECT_NEAR(static_cast<double>(count) / kSamples, 0.1, 0.005);
  EXPECT_NEAR(lag_one_correlation(y, m), 0, 6 / std::sqrt(static_cast<double>(kSamples)));
}

TYPED_TEST(RandomTest, NormalDistribution) {
  using T = TypeParam;
  std::vector<T> y(kSamples);
  tp::backend::cpu::normal(y.data(), kSamples, T{1.5}, T{2}, 99, 12345);
  const Moments m = moments_of(y);
  EXPECT_NEAR(m.mean, 1.5, 6 * 2 / std::sqrt(static_cast<double>(kSamples)));
  EXPECT_NEAR(std::sqrt(m.variance), 2, 0.02 * 2);
  std::int64_t within_one = 0;
  std::int64_t within_two = 0;
  for (T value : y) {
    const double z = std::fabs((static_cast<double>(value) - 1.5) / 2);
    within_one += z < 1 ? 1 : 0;
    within_two += z < 2 ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(within_one) / kSamples, 0.682689, 0.008);
  EXPECT_NEAR(static_cast<double>(within_two) / kSamples, 0.954500, 0.004);
  // The two Box-Muller outputs of a pair (elements 2p, 2p + 1) are independent, as are the pairs.
  EXPECT_NEAR(lag_one_correlation(y, m), 0, 6 / std::sqrt(static_cast<double>(kSamples)));
  // stddev 0 is a constant.
  std::vector<T> constant(5);
  tp::backend::cpu::normal(constant.data(), 5, T{3}, T{0}, 1, 0);
  EXPECT_EQ(constant, std::vector<T>(5, T{3}));
}

TYPED_TEST(RandomTest, GlorotUniformUsesTheKerasLimit) {
  using T = TypeParam;
  const std::int64_t fan_in = 784;
  const std::int64_t fan_out = 129;
  const double limit = std::sqrt(6.0 / (fan_in + fan_out));
  std::vector<T> kernel(fan_in * fan_out);
  tp::backend::cpu::glorot_uniform(kernel.data(), fan_in, fan_out, 5);
  const auto [lowest, highest] = std::minmax_element(kernel.begin(), kernel.end());
  EXPECT_GE(static_cast<double>(*lowest), -limit - 1e-7);
  EXPECT_LT(static_cast<double>(*highest), limit + 1e-7);
  EXPECT_GT(static_cast<double>(*highest), 0.99 * limit);  // the range is used, not just bounded
  const Moments m = moments_of(kernel);
  EXPECT_NEAR(m.variance, limit * limit / 3, 0.02 * limit * limit / 3);
  // Same as uniform(-limit, limit) at offset 0.
  std::vector<T> expected(kernel.size());
  tp::backend::cpu::uniform(expected.data(), fan_in * fan_out, static_cast<T>(-limit), static_cast<T>(limit), 5, 0);
  EXPECT_TRUE(same_bytes(kernel, expected));
  tp::backend::cpu::glorot_uniform<T>(nullptr, 0, 0, 5);
  tp::backend::cpu::glorot_uniform<T>(nullptr, 10, 0, 5);
}

TYPED_TEST(RandomTest, DegenerateAndInvalidArguments) {
  using T = TypeParam;
  std::vector<T> y(4);
  tp::backend::cpu::uniform(y.data(), 4, T{1.5}, T{1.5}, 3, 0);
  EXPECT_EQ(y, std::vector<T>(4, T{1.5}));
  expect_invalid([&] { tp::backend::cpu::uniform(y.data(), 4, T{2}, T{1}, 3, 0); },
                 {"[cpu]", "uniform", "low <= high"});
  expect_invalid([&] { tp::backend::cpu::uniform(y.data(), 4, T{0}, std::numeric_limits<T>::infinity(), 3, 0); },
                 {"finite"});
  expect_invalid([&] { tp::backend::cpu::uniform(y.data(), -1, T{0}, T{1}, 3, 0); }, {"n = -1"});
  expect_invalid([&] { tp::backend::cpu::uniform(y.data(), 4, T{0}, T{1}, 3, ~std::uint64_t{0} - 2); },
                 {"offset", "overflows"});
  expect_invalid([&] { tp::backend::cpu::normal(y.data(), 4, T{0}, T{-1}, 3, 0); }, {"normal", "stddev = -1"});
  expect_invalid([&] { tp::backend::cpu::normal<T>(nullptr, 4, T{0}, T{1}, 3, 0); }, {"y is null"});
  expect_invalid([&] { tp::backend::cpu::glorot_uniform(y.data(), -2, 2, 3); }, {"glorot_uniform", "fan_in = -2"});
  expect_invalid([&] { tp::backend::cpu::fill(y.data(), -5, T{0}); }, {"fill", "n = -5"});
}

}  // namespace
