// SPDX-License-Identifier: Apache-2.0
#pragma once
// Filling tensors: constants, and counter-based random numbers (Philox4x32-10): element i depends only on
// (seed, offset + i), so results do not depend on how the work is split. Floating dtypes f32 and f64.

#include <cstdint>

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

void fill(const Tensor& out, double value, const OpContext& context = {});
void uniform(const Tensor& out, double low, double high, std::uint64_t seed, std::uint64_t offset = 0,
             const OpContext& context = {});
void normal(const Tensor& out, double mean, double stddev, std::uint64_t seed, std::uint64_t offset = 0,
            const OpContext& context = {});
// Keras' default kernel initialiser for a [fan_in, fan_out] matrix: uniform in +-sqrt(6 / (fan_in + fan_out)).
void glorot_uniform(const Tensor& out, std::uint64_t seed, const OpContext& context = {});

}  // namespace tp::ops
