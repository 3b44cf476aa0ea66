// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared helpers of the CPU kernel tests: seeded random inputs (the seed is printed on failure through
// SCOPED_TRACE and can be overridden with TP_TEST_SEED), float64 comparisons with per-type tolerances, and
// an expectation that an action throws tp::InvalidArgument mentioning given fragments.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"

namespace tp_test {

// TP_TEST_SEED=<n> replays a failure; otherwise every run uses the same default seed.
inline std::uint32_t test_seed() {
  const char* text = std::getenv("TP_TEST_SEED");
  return text != nullptr ? static_cast<std::uint32_t>(std::strtoul(text, nullptr, 10)) : 20240611U;
}

#define TP_TRACE_SEED(seed) SCOPED_TRACE(::testing::Message() << "seed " << (seed) << " (rerun with TP_TEST_SEED)")

template <typename T>
std::vector<T> random_vector(std::mt19937& rng, std::int64_t n, double low = -1.0, double high = 1.0) {
  std::uniform_real_distribution<double> distribution(low, high);
  std::vector<T> values(static_cast<std::size_t>(n));
  for (T& value : values) value = static_cast<T>(distribution(rng));
  return values;
}

template <typename T>
std::vector<double> widen(const std::vector<T>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// Machine epsilon of T as a double: 2^-23 for float, 2^-52 for double.
template <typename T>
constexpr double epsilon_of() {
  return static_cast<double>(std::numeric_limits<T>::epsilon());
}

// Expects |actual[i] - expected[i]| <= abs_tolerance + rel_tolerance * |expected[i]| for every i, with NaN
// expected only where NaN is found (and the reverse).
template <typename T>
void expect_all_near(const std::vector<T>& actual, const std::vector<double>& expected, double rel_tolerance,
                     double abs_tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  int reported = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const auto value = static_cast<double>(actual[i]);
    const bool ok = std::isnan(expected[i])
                        ? std::isnan(value)
                        : (value == expected[i] ||
                           std::fabs(value - expected[i]) <= abs_tolerance + rel_tolerance * std::fabs(expected[i]));
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << value << ", expected " << expected[i] << " (rel " << rel_tolerance
                    << ", abs " << abs_tolerance << ")";
    }
  }
  EXPECT_EQ(reported, 0) << "mismatching elements";
}

// Runs `action`, expects tp::InvalidArgument, and checks every fragment appears in its message.
template <typename Action>
void expect_invalid(Action action, const std::vector<std::string>& fragments) {
  try {
    action();
    ADD_FAILURE() << "no tp::InvalidArgument thrown";
  } catch (const tp::InvalidArgument& error) {
    const std::string text = error.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(text.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << text;
    }
  }
}

}  // namespace tp_test
