// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fast element conversions between float32 and the 16-bit float formats for the half-precision kernels and
// the Cast kernel, bit for bit equal to core/half.hpp (round to nearest, ties to even; NaN stays NaN; Inf
// stays Inf; exact widening), whatever MXCSR's flush-to-zero and denormals-are-zero bits say (the streams set
// them): tested exhaustively for every 16-bit pattern and on a sweep of float patterns.
//
//   float16:  the CPU's F16C instructions (vcvtph2ps / vcvtps2ph, chosen at run time when the CPU has them)
//             for blocks of 8, else and for tails a 65,536-entry table to widen and an inline rounding to
//             narrow (normal results and zeros inline, every other value through tp::float_to_half_bits).
//   bfloat16: a 16-bit shift to widen; an inline round-to-nearest-even on the bits to narrow; both
//             branch-free, with NaNs made quiet as the core functions make them. The span functions run
//             them as vectorised loops (one clone per instruction set, isa_clones.hpp) when the spans are
//             aligned to their element types, as tensors are.
// The span functions take any alignment (bytes are moved with unaligned loads or memcpy); src and dst must
// not overlap.

#include <bit>
#include <cstdint>
#include <type_traits>

#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu::detail {

// The float value of every float16 bit pattern (index = bits), built once.
const float* half_to_float_table();

inline float widen(Half value, const float* table = half_to_float_table()) { return table[value.bits]; }

// Branch-free (so loops over spans vectorise): a NaN gets its quiet bit set, as the core conversion does.
inline float widen(BFloat16 value) {
  const std::uint32_t bits = value.bits;
  const std::uint32_t quiet = (bits & 0x7FFFU) > 0x7F80U ? 0x0040U : 0U;
  return std::bit_cast<float>((bits | quiet) << 16);
}

template <typename H>
H narrow(float value);

template <>
inline Half narrow<Half>(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t magnitude = bits & 0x7FFF'FFFFU;
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000U);
  // [2^-14, 65520): the result is a normal half (rounding may carry into the next binade, still normal; at
  // the top, exactly Inf, which round-to-nearest-even also gives).
  if (magnitude >= 0x3880'0000U && magnitude < 0x477F'F000U) {
    const std::uint32_t rebiased = magnitude - 0x3800'0000U;  // exponent bias 127 -> 15
    const std::uint32_t rounded = (rebiased + 0x0FFFU + ((rebiased >> 13) & 1U)) >> 13;
    return Half::from_bits(static_cast<std::uint16_t>(sign | rounded));
  }
  if (magnitude <= 0x3300'0000U) return Half::from_bits(sign);  // |x| <= 2^-25: rounds (ties to even) to +-0
  return Half::from_float(value);
}

// Branch-free too: a NaN keeps its sign and top payload bits and gets its quiet bit, as the core conversion.
template <>
inline BFloat16 narrow<BFloat16>(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = (bits + 0x7FFFU + ((bits >> 16) & 1U)) >> 16;
  const std::uint32_t nan = (bits >> 16) | 0x0040U;
  return BFloat16::from_bits(static_cast<std::uint16_t>((bits & 0x7FFF'FFFFU) > 0x7F80'0000U ? nan : rounded));
}

// n elements; src holds 16-bit floats (float16 / bfloat16) or float32, dst the other.
void half_to_float(const void* src, void* dst, std::int64_t n);
void float_to_half(const void* src, void* dst, std::int64_t n);
void bfloat16_to_float(const void* src, void* dst, std::int64_t n);
void float_to_bfloat16(const void* src, void* dst, std::int64_t n);

template <typename H>
void widen_span(const H* src, float* dst, std::int64_t n) {
  if constexpr (std::is_same_v<H, Half>) {
    half_to_float(src, dst, n);
  } else {
    bfloat16_to_float(src, dst, n);
  }
}

template <typename H>
void narrow_span(const float* src, H* dst, std::int64_t n) {
  if constexpr (std::is_same_v<H, Half>) {
    float_to_half(src, dst, n);
  } else {
    float_to_bfloat16(src, dst, n);
  }
}

}  // namespace tp::backend::cpu::detail
