// SPDX-License-Identifier: Apache-2.0
#pragma once
// all_finite: a float32 scalar [] that is 1 when every element of x (float32 or float64, any shape) is finite
// and 0 when one is Inf or NaN. Dynamic loss scaling gates the optimizer update on it (sgd_update_if,
// adam_update_if in optimizer.hpp) and reads it back to adjust the scale.

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

void all_finite_into(const Tensor& x, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor all_finite(const Tensor& x, const OpContext& context = {});

}  // namespace tp::ops
