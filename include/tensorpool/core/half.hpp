// SPDX-License-Identifier: Apache-2.0
#pragma once
// Bit-level conversions between float32 and the two 16-bit float formats, with no hardware intrinsics:
//   float16  (IEEE 754 binary16): 1 sign, 5 exponent (bias 15), 10 mantissa bits; max finite 65504.
//   bfloat16 (the top half of a float32): 1 sign, 8 exponent (bias 127), 7 mantissa bits.
//
// Narrowing (float -> 16 bits) rounds to nearest, ties to even, in one step from the exact float value
// (no double rounding). Values past the largest finite 16-bit value round to +-Inf per that rule (for
// float16 everything with magnitude >= 65520 becomes Inf). Results below the smallest normal become
// subnormals or +-0, correctly rounded; -0 stays -0. Inf stays Inf. A NaN stays a NaN with its sign, its
// quiet bit set and the top bits of its payload kept, so it can never turn into Inf.
// Widening (16 bits -> float) is exact for every non-NaN value; NaNs come back quiet with sign and payload.
// So for every non-NaN pattern p: narrow(widen(p)) == p, and for every quiet NaN pattern too.

#include <cstdint>

namespace tp {

[[nodiscard]] std::uint16_t float_to_half_bits(float value);
[[nodiscard]] float half_bits_to_float(std::uint16_t bits);

[[nodiscard]] std::uint16_t float_to_bfloat16_bits(float value);
[[nodiscard]] float bfloat16_bits_to_float(std::uint16_t bits);

// A float16 value as stored in tensors: just the bits, converted only when asked.
struct Half {
  std::uint16_t bits = 0;

  static constexpr Half from_bits(std::uint16_t raw) { return Half{raw}; }
  static Half from_float(float value) { return Half{float_to_half_bits(value)}; }
  explicit operator float() const { return half_bits_to_float(bits); }
  // Bitwise: +0 != -0 and a NaN equals itself; compare as floats for IEEE semantics.
  friend constexpr bool operator==(Half, Half) = default;
};

// A bfloat16 value as stored in tensors: just the bits, converted only when asked.
struct BFloat16 {
  std::uint16_t bits = 0;

  static constexpr BFloat16 from_bits(std::uint16_t raw) { return BFloat16{raw}; }
  static BFloat16 from_float(float value) { return BFloat16{float_to_bfloat16_bits(value)}; }
  explicit operator float() const { return bfloat16_bits_to_float(bits); }
  // Bitwise: +0 != -0 and a NaN equals itself; compare as floats for IEEE semantics.
  friend constexpr bool operator==(BFloat16, BFloat16) = default;
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit float types must be 2 bytes");

}  // namespace tp
