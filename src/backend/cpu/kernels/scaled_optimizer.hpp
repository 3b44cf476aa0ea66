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

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/kernels/optimizer.hpp"
#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu {

template <typename T, typename G>
void sgd_update_scaled(T* param, const G* grad, T grad_scale, T* velocity, std::int64_t n, T lr, T momentum,
                       bool nesterov);

template <typename T, typename G>
void adam_update_scaled(T* param, const G* grad, T grad_scale, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2,
                        T epsilon, std::int64_t step);

// adam_update_summed (optimizer.hpp) on float32 variables whose gradients are stored as H (tp::Half or
// tp::BFloat16; mixed_bfloat16's weight gradients): g = grads[0] + grads[1] + ..., added left to right, each
// addition computed in float32 and rounded once to H, as add_scaled_half(sum, 1, grads[k]) rounds it, then the
// float32 update on the widened sum. Bitwise SumAcrossPeers (or the in-process AllReduce) on the H gradients
// followed by adam_update_scaled<float, H> with grad_scale 1; the mirrors are written as adam_update_summed
// writes them. count >= 1; no grads buffer overlaps param, m or v. With `copies`, the updated parameter is also
// rounded to H into copies.own and that copy stored into each of copies.mirrors, block by block while the block is in
// cache: the layers' 16-bit compute copies of the master weights, bitwise narrow_span(param) after every update, so the
// forward pass reads them instead of casting every variable each step.
template <typename H>
struct HalfCopies {
  H* own = nullptr;                  // n elements, or null: no compute copy
  std::span<H* const> mirrors = {};  // the other replicas' copies, n elements each; empty without own
};

template <typename H>
void adam_update_summed_half(float* param, const H* const* grads, std::size_t count, float* m, float* v, std::int64_t n,
                             float lr, float beta1, float beta2, float epsilon, std::int64_t step,
                             std::span<const AdamMirror<float>> mirrors = {}, HalfCopies<H> copies = {});

#define TP_DECLARE_SCALED_OPTIMIZER(T, G, prefix)                                              \
  prefix template void sgd_update_scaled<T, G>(T*, const G*, T, T*, std::int64_t, T, T, bool); \
  prefix template void adam_update_scaled<T, G>(T*, const G*, T, T*, T*, std::int64_t, T, T, T, T, std::int64_t);

TP_DECLARE_SCALED_OPTIMIZER(float, float, extern)
TP_DECLARE_SCALED_OPTIMIZER(float, Half, extern)
TP_DECLARE_SCALED_OPTIMIZER(float, BFloat16, extern)
TP_DECLARE_SCALED_OPTIMIZER(double, double, extern)

extern template void adam_update_summed_half<Half>(float*, const Half* const*, std::size_t, float*, float*,
                                                   std::int64_t, float, float, float, float, std::int64_t,
                                                   std::span<const AdamMirror<float>>, HalfCopies<Half>);
extern template void adam_update_summed_half<BFloat16>(float*, const BFloat16* const*, std::size_t, float*, float*,
                                                       std::int64_t, float, float, float, float, std::int64_t,
                                                       std::span<const AdamMirror<float>>, HalfCopies<BFloat16>);

}  // namespace tp::backend::cpu
