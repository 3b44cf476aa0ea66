// SPDX-License-Identifier: Apache-2.0
#pragma once
// The mirrored bfloat16 Adam update's element loop (adam_update_summed_half with one or two gradients, the
// main jobs' case): per element the gradient widened, or the sum of two rounded once to bfloat16 (as
// add_scaled_half rounds it), adam_element's update of the float32 parameter and slots on it, and the updated
// parameter rounded into its bfloat16 compute copy as detail::narrow rounds it, in one pass. Bitwise the
// separate passes (widen_span or the rounded sum, adam_apply, narrow_span): every form computes each element
// with the same operations, no floating-point contraction. Forms: scalar; AVX-512 (16 elements per iteration in
// 512-bit registers, where the compiler's vectorisation of the scalar form, mixing 16- and 32-bit lanes, stays
// in 256-bit ones); and with AVX512_BF16, whose vcvtneps2bf16 rounds the copy as detail::narrow does except that it
// flushes float32 denormals (those lanes take the integer rounding instead).

#include <bit>
#include <cstdint>

#include "backend/cpu/kernels/optimizer.hpp"
#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu {

namespace detail {

// x rounded to bfloat16 and kept as float32, on its bits: ties to even; a NaN keeps its sign and top payload
// bits and gets its quiet bit, as detail::narrow and detail::widen give it.
inline float round_to_bfloat16(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = (bits + 0x7FFFU + ((bits >> 16) & 1U)) & 0xFFFF'0000U;
  const std::uint32_t nan = (bits | 0x0040'0000U) & 0xFFFF'0000U;
  // Magnitudes compared as signed integers (both below 2^31): one vector comparison.
  return std::bit_cast<float>(static_cast<std::int32_t>(bits & 0x7FFF'FFFFU) > 0x7F80'0000 ? nan : rounded);
}

// A bfloat16 widened by a shift alone: exact (a NaN keeps its payload; the sums above give it its quiet bit).
inline float shifted(BFloat16 value) { return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16); }

}  // namespace detail

// n elements of param, m, v and grad0 (and grad1, copy where not null): g = grad0, or round(grad0 + grad1);
// adam_element(g) on param, m, v; then copy = narrow(param). Runs on the calling thread; nothing is checked.
void adam_bfloat16(float* param, const BFloat16* grad0, const BFloat16* grad1, float* m, float* v, BFloat16* copy,
                   std::int64_t n, const AdamStep<float>& scalars) noexcept;

}  // namespace tp::backend::cpu
