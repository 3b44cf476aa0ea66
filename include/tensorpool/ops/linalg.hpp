// SPDX-License-Identifier: Apache-2.0
#pragma once
// Matrix products through the BLAS (OpenBLAS sgemm/dgemm): out[m,n] = op(a) x op(b), op = optional transpose.

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

struct MatmulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
};

// a and b: rank-2 tensors of one floating dtype (f32 or f64) on one device; inner dimensions must agree.
void matmul_into(const Tensor& a, const Tensor& b, const Tensor& out, MatmulOptions options = {},
                 const OpContext& context = {});
[[nodiscard]] Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options = {},
                            const OpContext& context = {});

}  // namespace tp::ops
