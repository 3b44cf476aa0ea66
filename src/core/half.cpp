// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/half.hpp"

#include <bit>

namespace tp {
namespace {

constexpr std::uint32_t kFloatSignMask = 0x8000'0000U;
constexpr std::uint32_t kFloatAbsMask = 0x7FFF'FFFFU;
constexpr std::uint32_t kFloatInfBits = 0x7F80'0000U;
constexpr std::uint32_t kFloatQuietBit = 0x0040'0000U;
constexpr std::uint32_t kFloatMantissaMask = 0x007F'FFFFU;
constexpr std::uint32_t kFloatImplicitBit = 0x0080'0000U;

constexpr std::uint32_t kHalfInfBits = 0x7C00U;
constexpr std::uint32_t kHalfQuietBit = 0x0200U;
constexpr std::uint32_t kHalfMantissaMask = 0x03FFU;
constexpr int kHalfMantissaBits = 10;
constexpr int kFloatMantissaBits = 23;
constexpr int kExponentRebias = 127 - 15;  // float bias minus half bias

constexpr std::uint32_t kBFloat16QuietBit = 0x0040U;

// Drops the low `shift` bits of `value` (1 <= shift <= 31), rounding to nearest with ties to even.
constexpr std::uint32_t shift_right_round_even(std::uint32_t value, int shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t dropped = value & ((std::uint32_t{1} << shift) - 1);
  const std::uint32_t halfway = std::uint32_t{1} << (shift - 1);
  const bool round_up = dropped > halfway || (dropped == halfway && (kept & 1U) != 0);
  return kept + (round_up ? 1U : 0U);
}

}  // namespace

std::uint16_t float_to_half_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits & kFloatSignMask) >> 16;
  const std::uint32_t magnitude = bits & kFloatAbsMask;

  if (magnitude > kFloatInfBits) {  // NaN: keep the top payload bits, force quiet so it stays a NaN
    const std::uint32_t payload = (magnitude >> (kFloatMantissaBits - kHalfMantissaBits)) & kHalfMantissaMask;
    return static_cast<std::uint16_t>(sign | kHalfInfBits | kHalfQuietBit | payload);
  }
  const int exponent = static_cast<int>(magnitude >> kFloatMantissaBits) - kExponentRebias;  // half-biased
  if (exponent >= 31) return static_cast<std::uint16_t>(sign | kHalfInfBits);                // Inf or far too large

  if (exponent <= 0) {
    // Half subnormal (or zero): the result counts units of 2^-24. The float's 24-bit significand (implicit
    // bit included) is worth significand x 2^(exponent - 14) such units, so shift right by 14 - exponent.
    // Past a shift of 24 even the largest significand is below half a unit: rounds to 0. Float
    // subnormals land here with exponent -112 and also round to 0.
    const int shift = 14 - exponent;
    if (shift > 24) return static_cast<std::uint16_t>(sign);
    const std::uint32_t significand = (magnitude & kFloatMantissaMask) | kFloatImplicitBit;
    // A carry out of the subnormal range yields 0x0400, the smallest normal: exactly right.
    return static_cast<std::uint16_t>(sign | shift_right_round_even(significand, shift));
  }

  // Normal: exponent and mantissa are adjacent, so a mantissa carry correctly bumps the exponent, and a
  // carry out of exponent 30 yields 0x7C00 (Inf): overflow by rounding.
  const std::uint32_t rebased =
      (static_cast<std::uint32_t>(exponent) << kFloatMantissaBits) | (magnitude & kFloatMantissaMask);
  return static_cast<std::uint16_t>(sign | shift_right_round_even(rebased, kFloatMantissaBits - kHalfMantissaBits));
}

float half_bits_to_float(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000U) << 16;
  const std::uint32_t exponent = (half >> kHalfMantissaBits) & 0x1FU;
  const std::uint32_t mantissa = half & kHalfMantissaMask;
  const int widen = kFloatMantissaBits - kHalfMantissaBits;

  if (exponent == 0x1F) {  // Inf, or NaN (returned quiet with its payload)
    const std::uint32_t quiet = mantissa != 0 ? kFloatQuietBit : 0U;
    return std::bit_cast<float>(sign | kFloatInfBits | quiet | (mantissa << widen));
  }
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);  // +-0
    // Subnormal: mantissa x 2^-24. Its leading one at bit p gives a normal float with exponent p - 24.
    const int leading = static_cast<int>(std::bit_width(mantissa)) - 1;  // 0..9
    const std::uint32_t float_exponent = static_cast<std::uint32_t>(leading - 24 + 127);
    const std::uint32_t float_mantissa = (mantissa << (kFloatMantissaBits - leading)) & kFloatMantissaMask;
    return std::bit_cast<float>(sign | (float_exponent << kFloatMantissaBits) | float_mantissa);
  }
  const std::uint32_t float_exponent = exponent + kExponentRebias;
  return std::bit_cast<float>(sign | (float_exponent << kFloatMantissaBits) | (mantissa << widen));
}

std::uint16_t float_to_bfloat16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & kFloatAbsMask) > kFloatInfBits) {  // NaN: truncate the payload, force quiet
    return static_cast<std::uint16_t>((bits >> 16) | kBFloat16QuietBit);
  }
  // bfloat16 is the top half of a float32: round the low 16 bits away. The carry from the mantissa moves
  // into the exponent and, from the largest finite value, into Inf; Inf itself has no low bits to round.
  // Sign is untouched (a carry never reaches bit 31 from a non-NaN).
  return static_cast<std::uint16_t>(shift_right_round_even(bits & kFloatAbsMask, 16) | (bits >> 16 & 0x8000U));
}

float bfloat16_bits_to_float(std::uint16_t bfloat16) {
  std::uint32_t bits = static_cast<std::uint32_t>(bfloat16) << 16;
  if ((bits & kFloatAbsMask) > kFloatInfBits) bits |= kFloatQuietBit;  // NaN comes back quiet
  return std::bit_cast<float>(bits);
}

}  // namespace tp
