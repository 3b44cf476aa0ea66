// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/scaled_optimizer.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <string_view>
#include <type_traits>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/adam_element.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/half_convert.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"
#include "backend/cpu/kernels/optimizer.hpp"
#include "tensorpool/core/error.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tp::backend::cpu {

namespace {

// 8-16 KiB on the stack: large enough that the per-block call costs nothing measurable, small enough to
// stay in L1 next to the parameter and slot blocks it is combined with.
constexpr std::int64_t kBlock = 2048;

// Parameters per chunk of the intra-op threads' split (the float32 updates' grain, optimizer.cpp): each
// thread widens and updates its chunks block by block, so the update splits over the threads as the float32
// one does. Element-wise: the bits do not depend on the split.
constexpr std::int64_t kChunk = 8 * kBlock;

// Calls update(offset, count, block) for each block of the gradient, widened to T and scaled.
template <typename T, typename G, typename Update>
void for_each_scaled_block(const G* grad, T grad_scale, std::int64_t n, const Update& update) {
  parallel_for(n, kChunk, [&](std::int64_t begin, std::int64_t end) {
    std::array<T, kBlock> block;
    for (std::int64_t offset = begin; offset < end; offset += kBlock) {
      const std::int64_t count = std::min(kBlock, end - offset);
      if constexpr (std::is_same_v<G, T>) {
        std::copy_n(grad + offset, count, block.data());
      } else {
        detail::widen_span(grad + offset, block.data(), count);
      }
      if (grad_scale != T{1}) {  // x 1 is exact: skipped (mixed_bfloat16's updates have no loss scale)
        for (std::int64_t i = 0; i < count; ++i) block[static_cast<std::size_t>(i)] *= grad_scale;
      }
      update(offset, count, block.data());
    }
  });
}

// The sums of add_scaled_half (each addition computed in float32 and rounded once to H), kept widened: sum =
// first + second, then sum += addend. One clone per instruction set (isa_clones.hpp); one addition per element,
// so every clone gives the same bits. For bfloat16 the loops are integer arithmetic the compiler vectorises:
// an addend is widened by a shift alone (the core widening also sets a NaN's quiet bit, but a NaN addend makes
// the sum a NaN with that addend's payload either way, and the rounding below sets the quiet bit), and the sum
// is rounded on its bits (ties to even; a NaN keeps its sign and top payload bits and gets its quiet bit, as
// detail::narrow and detail::widen give it).
float round_to_bfloat16(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = (bits + 0x7FFFU + ((bits >> 16) & 1U)) & 0xFFFF'0000U;
  const std::uint32_t nan = (bits | 0x0040'0000U) & 0xFFFF'0000U;
  // Magnitudes compared as signed integers (both below 2^31): one vector comparison.
  return std::bit_cast<float>(static_cast<std::int32_t>(bits & 0x7FFF'FFFFU) > 0x7F80'0000 ? nan : rounded);
}

float shifted(BFloat16 value) { return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16); }

template <typename H>
TP_ISA_CLONES void sum_rounded(const H* first, const H* second, float* sum, std::int64_t n) {
  if constexpr (std::is_same_v<H, Half>) {
    const float* table = detail::half_to_float_table();
    for (std::int64_t i = 0; i < n; ++i) {
      sum[i] =
          detail::widen(detail::narrow<Half>(detail::widen(first[i], table) + detail::widen(second[i], table)), table);
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) sum[i] = round_to_bfloat16(shifted(first[i]) + shifted(second[i]));
  }
}

template <typename H>
TP_ISA_CLONES void add_rounded(float* sum, const H* addend, std::int64_t n) {
  if constexpr (std::is_same_v<H, Half>) {
    const float* table = detail::half_to_float_table();
    for (std::int64_t i = 0; i < n; ++i) {
      sum[i] = detail::widen(detail::narrow<Half>(sum[i] + detail::widen(addend[i], table)), table);
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) sum[i] = round_to_bfloat16(sum[i] + shifted(addend[i]));
  }
}

// One or two replicas' bfloat16 gradients in one pass: per element the gradient widened (one) or the
// sum_rounded sum (two, grad1 not null), adam_apply's update on it (adam_element, the same expressions,
// uncontracted) and, where copy is not null, the updated parameter rounded into copy as detail::narrow rounds
// it: bitwise widen_span or sum_rounded, then adam_apply, then narrow_span, without the passes over a block of
// gradients and of parameters. Scalar form: the tails, and CPUs without AVX-512.
void adam_bfloat16_scalar(float* param, const BFloat16* grad0, const BFloat16* grad1, float* m, float* v,
                          BFloat16* copy, std::int64_t begin, std::int64_t n, const AdamStep<float>& s) {
  for (std::int64_t i = begin; i < n; ++i) {
    const float sum = grad1 == nullptr ? shifted(grad0[i]) : round_to_bfloat16(shifted(grad0[i]) + shifted(grad1[i]));
    detail::adam_element(sum, param[i], m[i], v[i], s.alpha, s.one_minus_beta1, s.one_minus_beta2, s.epsilon);
    if (copy != nullptr) copy[i] = detail::narrow<BFloat16>(param[i]);
  }
}

#if defined(__x86_64__)
// Every lane: the zero-masking forms of the intrinsics, whose plain forms start from an undefined register that
// GCC 12 reports as maybe-uninitialized.
constexpr __mmask16 kAll = 0xFFFF;

// round_to_bfloat16 on 16 lanes of float bits: the rounded bits, still in the high half.
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

// 16 bfloat16 values widened to float32 lanes (shifted: exact).
__attribute__((target("avx512f"))) inline __m512 widen_bfloat16_lanes(const BFloat16* source) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, bits), 16));
}

// The same with AVX-512, 16 elements per iteration in 512-bit registers (the compiler vectorises the scalar
// form, which mixes 16- and 32-bit lanes, in 256-bit registers: half the float32 update's width): every
// operation is the scalar form's, lane by lane, so the bits are the same. Returns how many elements it did.
template <bool kTwo>
__attribute__((target("avx512f"))) std::int64_t adam_bfloat16_avx512(float* param, const BFloat16* grad0,
                                                                     const BFloat16* grad1, float* m, float* v,
                                                                     BFloat16* copy, std::int64_t n,
                                                                     const AdamStep<float>& s) {
  const __m512 alpha = _mm512_set1_ps(s.alpha);
  const __m512 one_minus_beta1 = _mm512_set1_ps(s.one_minus_beta1);
  const __m512 one_minus_beta2 = _mm512_set1_ps(s.one_minus_beta2);
  const __m512 epsilon = _mm512_set1_ps(s.epsilon);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 g = widen_bfloat16_lanes(grad0 + i);
    if constexpr (kTwo) {
      g = _mm512_castsi512_ps(
          round_bfloat16_lanes(_mm512_castps_si512(_mm512_add_ps(g, widen_bfloat16_lanes(grad1 + i)))));
    }
    const __m512 m_old = _mm512_loadu_ps(m + i);
    const __m512 v_old = _mm512_loadu_ps(v + i);
    const __m512 m_new = _mm512_add_ps(m_old, _mm512_mul_ps(_mm512_sub_ps(g, m_old), one_minus_beta1));
    const __m512 v_new =
        _mm512_add_ps(v_old, _mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(g, g), v_old), one_minus_beta2));
    _mm512_storeu_ps(m + i, m_new);
    _mm512_storeu_ps(v + i, v_new);
    const __m512 step =
        _mm512_div_ps(_mm512_mul_ps(m_new, alpha), _mm512_add_ps(_mm512_maskz_sqrt_ps(kAll, v_new), epsilon));
    const __m512 updated = _mm512_sub_ps(_mm512_loadu_ps(param + i), step);
    _mm512_storeu_ps(param + i, updated);
    if (copy != nullptr) {  // narrow: round's bits shifted down (a NaN's: its top bits with the quiet bit)
      const __m512i bits = _mm512_maskz_srli_epi32(kAll, round_bfloat16_lanes(_mm512_castps_si512(updated)), 16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(copy + i), _mm512_maskz_cvtepi32_epi16(kAll, bits));
    }
  }
  return i;
}

bool has_avx512f() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported;
}
#endif

void adam_bfloat16(float* param, const BFloat16* grad0, const BFloat16* grad1, float* m, float* v, BFloat16* copy,
                   std::int64_t n, const AdamStep<float>& scalars) {
  std::int64_t done = 0;
#if defined(__x86_64__)
  if (has_avx512f()) {
    done = grad1 == nullptr ? adam_bfloat16_avx512<false>(param, grad0, grad1, m, v, copy, n, scalars)
                            : adam_bfloat16_avx512<true>(param, grad0, grad1, m, v, copy, n, scalars);
  }
#endif
  adam_bfloat16_scalar(param, grad0, grad1, m, v, copy, done, n, scalars);
}

}  // namespace

template <typename T, typename G>
void sgd_update_scaled(T* param, const G* grad, T grad_scale, T* velocity, std::int64_t n, T lr, T momentum,
                       bool nesterov) {
  constexpr std::string_view kKernel = "sgd_update_scaled";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "param", param, n);
  detail::check_pointer(kKernel, "grad", grad, n);
  if (velocity != nullptr) detail::check_pointer(kKernel, "velocity", velocity, n);
  // The blocks run on the intra-op threads, where nothing may throw: the hyperparameters are checked here.
  sgd_update<T>(param, nullptr, velocity, 0, lr, momentum, nesterov);
  for_each_scaled_block(grad, grad_scale, n, [&](std::int64_t offset, std::int64_t count, const T* block) {
    sgd_update<T>(param + offset, block, velocity == nullptr ? nullptr : velocity + offset, count, lr, momentum,
                  nesterov);
  });
}

template <typename T, typename G>
void adam_update_scaled(T* param, const G* grad, T grad_scale, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2,
                        T epsilon, std::int64_t step) {
  constexpr std::string_view kKernel = "adam_update_scaled";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "param", param, n);
  detail::check_pointer(kKernel, "grad", grad, n);
  detail::check_pointer(kKernel, "m", m, n);
  detail::check_pointer(kKernel, "v", v, n);
  // The blocks run on the intra-op threads, where nothing may throw: the hyperparameters are checked here, once.
  const AdamStep<T> scalars = adam_step(kKernel, lr, beta1, beta2, epsilon, step);
  for_each_scaled_block(grad, grad_scale, n, [&](std::int64_t offset, std::int64_t count, const T* block) {
    adam_apply(scalars, param + offset, block, m + offset, v + offset, count);
  });
}

template <typename H>
void adam_update_summed_half(float* param, const H* const* grads, std::size_t count, float* m, float* v, std::int64_t n,
                             float lr, float beta1, float beta2, float epsilon, std::int64_t step,
                             std::span<const AdamMirror<float>> mirrors, HalfCopies<H> copies) {
  constexpr std::string_view kKernel = "adam_update_summed_half";
  check_summed_update(kKernel, param, grads, count, m, v, n, mirrors);
  if (copies.own != nullptr) {
    detail::check_pointer(kKernel, "copies.own", copies.own, n);
    for (H* copy : copies.mirrors) detail::check_pointer(kKernel, "copies.mirrors[k]", copy, n);
  } else if (!copies.mirrors.empty()) {
    TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": ", copies.mirrors.size(),
             " mirrors of the compute copy but no copy of its own (copies.own is null)");
  }
  // The blocks run on the intra-op threads, where nothing may throw: the hyperparameters are checked here, once.
  const AdamStep<float> scalars = adam_step(kKernel, lr, beta1, beta2, epsilon, step);
  parallel_for(n, kChunk, [&](std::int64_t begin, std::int64_t end) {
    std::array<float, kBlock> sum;
    for (std::int64_t offset = begin; offset < end; offset += kBlock) {
      const std::int64_t length = std::min(kBlock, end - offset);
      if constexpr (std::is_same_v<H, BFloat16>) {
        if (count <= 2) {  // one or two replicas (the main jobs): the sum, the update and the copy in one pass
          adam_bfloat16(param + offset, grads[0] + offset, count == 2 ? grads[1] + offset : nullptr, m + offset,
                        v + offset, copies.own == nullptr ? nullptr : copies.own + offset, length, scalars);
          copy_to_mirrors(mirrors, param, m, v, offset, length);
          for (H* copy : copies.mirrors) std::copy_n(copies.own + offset, length, copy + offset);
          continue;
        }
      }
      if (count == 1) {
        detail::widen_span(grads[0] + offset, sum.data(), length);
      } else {
        sum_rounded(grads[0] + offset, grads[1] + offset, sum.data(), length);
      }
      for (std::size_t index = 2; index < count; ++index) add_rounded(sum.data(), grads[index] + offset, length);
      adam_apply(scalars, param + offset, sum.data(), m + offset, v + offset, length);
      copy_to_mirrors(mirrors, param, m, v, offset, length);
      if (copies.own != nullptr) {
        detail::narrow_span(param + offset, copies.own + offset, length);
        for (H* copy : copies.mirrors) std::copy_n(copies.own + offset, length, copy + offset);
      }
    }
  });
}

TP_DECLARE_SCALED_OPTIMIZER(float, float, )
TP_DECLARE_SCALED_OPTIMIZER(float, Half, )
TP_DECLARE_SCALED_OPTIMIZER(float, BFloat16, )
TP_DECLARE_SCALED_OPTIMIZER(double, double, )

template void adam_update_summed_half<Half>(float*, const Half* const*, std::size_t, float*, float*, std::int64_t,
                                            float, float, float, float, std::int64_t,
                                            std::span<const AdamMirror<float>>, HalfCopies<Half>);
template void adam_update_summed_half<BFloat16>(float*, const BFloat16* const*, std::size_t, float*, float*,
                                                std::int64_t, float, float, float, float, std::int64_t,
                                                std::span<const AdamMirror<float>>, HalfCopies<BFloat16>);

}  // namespace tp::backend::cpu
