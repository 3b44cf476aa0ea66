// SPDX-License-Identifier: Apache-2.0
#pragma once
// Conversion between any two dtypes, with the kernel's documented semantics (round to nearest even into
// f16/bf16; float to integer truncates toward zero and saturates, NaN -> 0; to bool: x != 0).

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

void cast_into(const Tensor& x, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor cast(const Tensor& x, DType dtype, const OpContext& context = {});

}  // namespace tp::ops
