// SPDX-License-Identifier: Apache-2.0
#pragma once
// The optimizer updates of optimizer.hpp (parameters and slots of type T, float or double) on a gradient
// stored as G (T itself, or tp::Half / tp::BFloat16 for float parameters) and multiplied by `grad_scale` first: mixed
// precision keeps each weight gradient in its layer's 16-bit compute dtype, still multiplied by the loss scale, and the
// float32 master weights' update unscales it (grad_scale = 1 / loss scale) as it reads it.
//
// Each block of the gradient is widened and scaled into a T buffer on the stack, then the T kernel runs on
// that block: the result is exactly the update of T(g[i]) * grad_scale (both Adam and SGD are elementwise,
// so blocking does not change any value). The blocks are split over the intra-op threads as the T kernels'
// elements are.

#include <cstdint>

#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu {

template <typename T, typename G>
void sgd_update_scaled(T* param, const G* grad, T grad_scale, T* velocity, std::int64_t n, T lr, T momentum,
                       bool nesterov);

template <typename T, typename G>
void adam_update_scaled(T* param, const G* grad, T grad_scale, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2,
                        T epsilon, std::int64_t step);

#define TP_DECLARE_SCALED_OPTIMIZER(T, G, prefix)                                              \
  prefix template void sgd_update_scaled<T, G>(T*, const G*, T, T*, std::int64_t, T, T, bool); \
  prefix template void adam_update_scaled<T, G>(T*, const G*, T, T*, T*, std::int64_t, T, T, T, T, std::int64_t);

TP_DECLARE_SCALED_OPTIMIZER(float, float, extern)
TP_DECLARE_SCALED_OPTIMIZER(float, Half, extern)
TP_DECLARE_SCALED_OPTIMIZER(float, BFloat16, extern)
TP_DECLARE_SCALED_OPTIMIZER(double, double, extern)

}  // namespace tp::backend::cpu
