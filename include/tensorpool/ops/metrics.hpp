// SPDX-License-Identifier: Apache-2.0
#pragma once
// Metrics computed on the device, so that only a scalar comes back to the host.

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

// out (float32 []) = number of rows of predictions [rows, cols] (f32 or f64) whose argmax equals labels[r]
// (int32 or int64 [rows]); ties take the first maximum. A label outside [0, cols) is a task error naming the
// row and value, reported at the next synchronization.
void correct_count_into(const Tensor& predictions, const Tensor& labels, const Tensor& out,
                        const OpContext& context = {});
[[nodiscard]] Tensor correct_count(const Tensor& predictions, const Tensor& labels, const OpContext& context = {});

}  // namespace tp::ops
