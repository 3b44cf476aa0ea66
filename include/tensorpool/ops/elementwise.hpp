// SPDX-License-Identifier: Apache-2.0
#pragma once
// Elementwise arithmetic on floating tensors (f32, f64). Binary ops take y of x's shape, of x's last dimension
// (broadcast over rows, as a bias), or a scalar (shape []); anything else names both shapes in the error.

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

enum class Arithmetic { add, sub, mul, div };

void binary_into(Arithmetic op, const Tensor& x, const Tensor& y, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor binary(Arithmetic op, const Tensor& x, const Tensor& y, const OpContext& context = {});
[[nodiscard]] inline Tensor add(const Tensor& x, const Tensor& y, const OpContext& context = {}) {
  return binary(Arithmetic::add, x, y, context);
}
[[nodiscard]] inline Tensor sub(const Tensor& x, const Tensor& y, const OpContext& context = {}) {
  return binary(Arithmetic::sub, x, y, context);
}
[[nodiscard]] inline Tensor mul(const Tensor& x, const Tensor& y, const OpContext& context = {}) {
  return binary(Arithmetic::mul, x, y, context);
}
[[nodiscard]] inline Tensor div(const Tensor& x, const Tensor& y, const OpContext& context = {}) {
  return binary(Arithmetic::div, x, y, context);
}

// out = alpha * x.
void scale_into(const Tensor& x, double alpha, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor scale(const Tensor& x, double alpha, const OpContext& context = {});
// y += alpha * x, in place. float16 / bfloat16 too (the collectives reduce 16-bit gradients): each sum is
// computed in float32 and rounded once.
void add_scaled(const Tensor& y, double alpha, const Tensor& x, const OpContext& context = {});
// The same with x on another device that y's device can read directly (device::peer_accessible: a ring
// collective's reduction reads the neighbour's chunk in place instead of copying it first). It runs on y's
// stream (or context.stream) and orders nothing with x's device: the caller makes y's stream wait for x's
// producer and x's later writers wait for this op (Stream::record / wait).
void add_scaled_from_peer(const Tensor& y, double alpha, const Tensor& x, const OpContext& context = {});

}  // namespace tp::ops
