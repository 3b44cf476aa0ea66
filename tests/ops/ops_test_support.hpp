// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host-side float64 references and random inputs for the tensor-op tests (the kernels themselves are checked
// in depth in tests/backend/cpu; these tests check the op layer's wiring, validation and dispatch).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/tensor.hpp"

namespace tp::ops::testing {

using device::testing::Backend;
using device::testing::make_device;

inline std::vector<float> random_values(std::size_t count, std::uint32_t seed, float low = -1.0F, float high = 1.0F) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = distribution(engine);
  return values;
}

// Row-major [rows, cols] element (r, c) of a matrix stored as [cols, rows] when `transposed`.
inline double at(const std::vector<float>& matrix, std::int64_t rows, std::int64_t cols, std::int64_t r, std::int64_t c,
                 bool transposed) {
  const std::int64_t index = transposed ? c * rows + r : r * cols + c;
  return static_cast<double>(matrix[static_cast<std::size_t>(index)]);
}

inline void expect_near_all(const std::vector<float>& actual, const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t index = 0; index < actual.size(); ++index) {
    ASSERT_NEAR(actual[index], expected[index], tolerance * (1.0 + std::abs(expected[index]))) << "at " << index;
  }
}

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& param) {
  return device::testing::backend_label(param.param);
}

}  // namespace tp::ops::testing
