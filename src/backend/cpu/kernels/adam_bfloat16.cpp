// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/adam_bfloat16.hpp"

#include "backend/cpu/kernels/adam_element.hpp"
#include "backend/cpu/kernels/half_convert.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tp::backend::cpu {

namespace {

void adam_bfloat16_scalar(float* param, const BFloat16* grad0, const BFloat16* grad1, float* m, float* v,
                          BFloat16* copy, std::int64_t begin, std::int64_t n, const AdamStep<float>& s) {
  for (std::int64_t i = begin; i < n; ++i) {
    const float g = grad1 == nullptr ? detail::shifted(grad0[i])
                                     : detail::round_to_bfloat16(detail::shifted(grad0[i]) + detail::shifted(grad1[i]));
    detail::adam_element(g, param[i], m[i], v[i], s.alpha, s.one_minus_beta1, s.one_minus_beta2, s.epsilon);
    if (copy != nullptr) copy[i] = detail::narrow<BFloat16>(param[i]);
  }
}

#if defined(__x86_64__)
// Every lane: the zero-masking forms of the intrinsics, whose plain forms start from an undefined register that
// GCC 12 reports as maybe-uninitialized.
constexpr __mmask16 kAll = 0xFFFF;

// detail::round_to_bfloat16 on 16 lanes of float bits: the rounded bits, still in the high half.
__attribute__((target("avx512f"))) inline __m512i round_bfloat16_lanes(__m512i bits) {
  const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, bits, 16), _mm512_set1_epi32(1));
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF'0000U));
  const __m512i rounded =
      _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), odd), high);
  const __m512i nan = _mm512_and_si512(_mm512_or_si512(bits, _mm512_set1_epi32(0x0040'0000)), high);
  const __mmask16 is_nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFF'FFFF)), _mm512_set1_epi32(0x7F80'0000));
  return _mm512_mask_blend_epi32(is_nan, rounded, nan);
}

// detail::narrow<BFloat16> on 16 lanes: the rounded bits shifted down and packed.
__attribute__((target("avx512f"))) inline __m256i narrow_bfloat16_lanes(__m512 values) {
  return _mm512_maskz_cvtepi32_epi16(
      kAll, _mm512_maskz_srli_epi32(kAll, round_bfloat16_lanes(_mm512_castps_si512(values)), 16));
}

// 16 bfloat16 values widened to float32 lanes (shifted: exact).
__attribute__((target("avx512f"))) inline __m512 widen_bfloat16_lanes(const BFloat16* source) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, bits), 16));
}

// Elements [i, i + 16): the gradient (kTwo: the rounded sum), Adam on param, m and v; returns the updated param.
template <bool kTwo>
__attribute__((target("avx512f"), always_inline)) inline __m512 adam_lanes(float* param, const BFloat16* grad0,
                                                                           const BFloat16* grad1, float* m, float* v,
                                                                           std::int64_t i, const AdamStep<float>& s) {
  __m512 g = widen_bfloat16_lanes(grad0 + i);
  if constexpr (kTwo) {
    g = _mm512_castsi512_ps(
        round_bfloat16_lanes(_mm512_castps_si512(_mm512_add_ps(g, widen_bfloat16_lanes(grad1 + i)))));
  }
  const __m512 m_old = _mm512_loadu_ps(m + i);
  const __m512 v_old = _mm512_loadu_ps(v + i);
  const __m512 m_new = _mm512_add_ps(m_old, _mm512_mul_ps(_mm512_sub_ps(g, m_old), _mm512_set1_ps(s.one_minus_beta1)));
  const __m512 v_new =
      _mm512_add_ps(v_old, _mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(g, g), v_old), _mm512_set1_ps(s.one_minus_beta2)));
  _mm512_storeu_ps(m + i, m_new);
  _mm512_storeu_ps(v + i, v_new);
  const __m512 step = _mm512_div_ps(_mm512_mul_ps(m_new, _mm512_set1_ps(s.alpha)),
                                    _mm512_add_ps(_mm512_maskz_sqrt_ps(kAll, v_new), _mm512_set1_ps(s.epsilon)));
  const __m512 updated = _mm512_sub_ps(_mm512_loadu_ps(param + i), step);
  _mm512_storeu_ps(param + i, updated);
  return updated;
}

// The AVX-512 form; returns how many elements it did (whole groups of 16).
template <bool kTwo>
__attribute__((target("avx512f"))) std::int64_t adam_bfloat16_avx512(float* param, const BFloat16* grad0,
                                                                     const BFloat16* grad1, float* m, float* v,
                                                                     BFloat16* copy, std::int64_t n,
                                                                     const AdamStep<float>& s) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 updated = adam_lanes<kTwo>(param, grad0, grad1, m, v, i, s);
    if (copy != nullptr) _mm256_storeu_si256(reinterpret_cast<__m256i*>(copy + i), narrow_bfloat16_lanes(updated));
  }
  return i;
}

// The same with vcvtneps2bf16 for the copy: lanes holding a nonzero float32 denormal (which it flushes to zero)
// take narrow_bfloat16_lanes; it rounds every other value exactly as detail::narrow does (tested on every
// float32 pattern).
template <bool kTwo>
__attribute__((target("avx512f,avx512bf16"))) std::int64_t adam_bfloat16_avx512_bf16(
    float* param, const BFloat16* grad0, const BFloat16* grad1, float* m, float* v, BFloat16* copy, std::int64_t n,
    const AdamStep<float>& s) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 updated = adam_lanes<kTwo>(param, grad0, grad1, m, v, i, s);
    if (copy == nullptr) continue;
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(updated), _mm512_set1_epi32(0x7FFF'FFFF));
    // magnitude - 1 below 0x7FFFFF (unsigned): a magnitude in [1, 0x7FFFFF], a nonzero denormal.
    const __mmask16 denormal =
        _mm512_cmplt_epu32_mask(_mm512_sub_epi32(magnitude, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7F'FFFF));
    const __m256i rounded =
        denormal == 0 ? reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(updated)) : narrow_bfloat16_lanes(updated);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(copy + i), rounded);
  }
  return i;
}

bool has_avx512f() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported;
}

bool has_avx512_bf16() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return supported;
}

// The widest form this CPU runs; how many elements it did.
std::int64_t adam_bfloat16_vector(float* param, const BFloat16* grad0, const BFloat16* grad1, float* m, float* v,
                                  BFloat16* copy, std::int64_t n, const AdamStep<float>& s) {
  if (has_avx512_bf16()) {
    return grad1 == nullptr ? adam_bfloat16_avx512_bf16<false>(param, grad0, grad1, m, v, copy, n, s)
                            : adam_bfloat16_avx512_bf16<true>(param, grad0, grad1, m, v, copy, n, s);
  }
  if (has_avx512f()) {
    return grad1 == nullptr ? adam_bfloat16_avx512<false>(param, grad0, grad1, m, v, copy, n, s)
                            : adam_bfloat16_avx512<true>(param, grad0, grad1, m, v, copy, n, s);
  }
  return 0;
}
#else
std::int64_t adam_bfloat16_vector(float*, const BFloat16*, const BFloat16*, float*, float*, BFloat16*, std::int64_t,
                                  const AdamStep<float>&) {
  return 0;
}
#endif

}  // namespace

void adam_bfloat16(float* param, const BFloat16* grad0, const BFloat16* grad1, float* m, float* v, BFloat16* copy,
                   std::int64_t n, const AdamStep<float>& scalars) noexcept {
  const std::int64_t done = adam_bfloat16_vector(param, grad0, grad1, m, v, copy, n, scalars);
  adam_bfloat16_scalar(param, grad0, grad1, m, v, copy, done, n, scalars);
}

}  // namespace tp::backend::cpu
