// SPDX-License-Identifier: Apache-2.0
// Exhaustive and boundary tests of the float32 <-> float16 / bfloat16 conversions. Every reference here is
// computed independently of the implementation: widening from the bit fields with std::ldexp, narrowing by
// rounding the exact value in double arithmetic (doubles hold every float and every midpoint exactly).

#include "tensorpool/core/half.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

// A 16-bit float format described by its fields, for the reference computations.
struct Format {
  const char* name;
  int mantissa_bits;
  int exponent_bits;
  int bias;
  std::uint16_t (*narrow)(float);
  float (*widen)(std::uint16_t);

  int exponent_all_ones() const { return (1 << exponent_bits) - 1; }
  int min_normal_exponent() const { return 1 - bias; }
  int max_exponent() const { return exponent_all_ones() - 1 - bias; }
  bool is_nan(std::uint16_t bits) const {
    return ((bits >> mantissa_bits) & exponent_all_ones()) == exponent_all_ones() &&
           (bits & ((1 << mantissa_bits) - 1)) != 0;
  }
  std::uint16_t quiet_bit() const { return static_cast<std::uint16_t>(1U << (mantissa_bits - 1)); }
};

const Format kHalf{"float16", 10, 5, 15, tp::float_to_half_bits, tp::half_bits_to_float};
const Format kBFloat16{"bfloat16", 7, 8, 127, tp::float_to_bfloat16_bits, tp::bfloat16_bits_to_float};

std::uint32_t bits_of(float value) { return std::bit_cast<std::uint32_t>(value); }
float float_from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

// The value of a 16-bit pattern, from its fields.
double reference_widen(const Format& format, std::uint16_t bits) {
  const bool negative = (bits & 0x8000U) != 0;
  const int exponent = (bits >> format.mantissa_bits) & format.exponent_all_ones();
  const int mantissa = bits & ((1 << format.mantissa_bits) - 1);
  double magnitude = 0;
  if (exponent == format.exponent_all_ones()) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, format.min_normal_exponent() - format.mantissa_bits);
  } else {
    magnitude = std::ldexp((1 << format.mantissa_bits) + mantissa, exponent - format.bias - format.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// `value` (finite or infinite, not NaN) rounded to the format: nearest, ties to even, Inf past the range.
double reference_round(const Format& format, double value) {
  const double magnitude = std::fabs(value);
  if (magnitude == 0 || std::isinf(magnitude)) return value;
  int frexp_exponent = 0;
  std::frexp(magnitude, &frexp_exponent);  // magnitude in [2^(e-1), 2^e)
  const int exponent = std::max(frexp_exponent - 1, format.min_normal_exponent());
  const double unit = std::ldexp(1.0, exponent - format.mantissa_bits);  // spacing of the format there
  const double scaled = magnitude / unit;                                // exact: a power-of-two scale
  double rounded = std::floor(scaled);
  const double fraction = scaled - rounded;
  if (fraction > 0.5 || (fraction == 0.5 && std::fmod(rounded, 2.0) != 0)) rounded += 1;
  double result = rounded * unit;
  if (result >= std::ldexp(1.0, format.max_exponent() + 1)) result = std::numeric_limits<double>::infinity();
  return std::copysign(result, value);
}

// Checks narrow(input) against the reference; returns false (after reporting) on a mismatch.
bool check_narrow(const Format& format, float input) {
  const std::uint16_t bits = format.narrow(input);
  if (std::isnan(input)) {
    const bool ok =
        format.is_nan(bits) && (bits & format.quiet_bit()) != 0 && ((bits & 0x8000U) != 0) == std::signbit(input);
    EXPECT_TRUE(ok) << format.name << ": NaN 0x" << std::hex << bits_of(input) << " -> 0x" << bits;
    return ok;
  }
  const double expected = reference_round(format, input);
  const double got = reference_widen(format, bits);
  const bool ok = !format.is_nan(bits) && got == expected && std::signbit(got) == std::signbit(expected);
  EXPECT_TRUE(ok) << format.name << ": " << std::hexfloat << input << " (0x" << std::hex << bits_of(input) << ") -> 0x"
                  << bits << " = " << got << ", expected " << expected;
  return ok;
}

// Every finite 16-bit value, its midpoints with both neighbours, and +-1 and +-2 float ulps around each.
void check_all_boundaries(const Format& format) {
  int failures = 0;
  for (std::uint32_t pattern = 0; pattern < 0x10000U && failures < 20; ++pattern) {
    const auto bits = static_cast<std::uint16_t>(pattern);
    const double value = reference_widen(format, bits);
    if (std::isnan(value) || std::isinf(value)) continue;
    // Neighbours in magnitude; past the largest finite value the "next" one is 2^(max_exponent + 1).
    const double magnitude = std::fabs(value);
    // Below +-0 the "previous" value is the smallest subnormal of the other sign.
    const int magnitude_bits = bits & 0x7FFF;
    const int largest_finite = (format.exponent_all_ones() << format.mantissa_bits) - 1;
    const double above = magnitude_bits == largest_finite
                             ? std::ldexp(1.0, format.max_exponent() + 1)
                             : reference_widen(format, static_cast<std::uint16_t>(magnitude_bits + 1));
    const double below =
        magnitude_bits == 0 ? -above : reference_widen(format, static_cast<std::uint16_t>(magnitude_bits - 1));
    const double sign = std::signbit(value) ? -1.0 : 1.0;
    for (double center : {magnitude, (magnitude + above) / 2, (magnitude + below) / 2}) {
      const auto center_float = static_cast<float>(sign * center);
      ASSERT_EQ(static_cast<double>(center_float), sign * center) << "midpoint not exact in float";
      float up = center_float;
      float down = center_float;
      if (!check_narrow(format, center_float)) ++failures;
      for (int step = 0; step < 2; ++step) {
        up = std::nextafter(up, std::numeric_limits<float>::infinity());
        down = std::nextafter(down, -std::numeric_limits<float>::infinity());
        if (!check_narrow(format, up)) ++failures;
        if (!check_narrow(format, down)) ++failures;
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// Every float's top (32 - dropped_bits) bits take every value, with the dropped bits at and around the
// rounding points (the normal-range boundaries of the format); plus random floats (fixed seed).
void check_float_sweep(const Format& format, int dropped_bits) {
  const std::uint32_t half_point = 1U << (dropped_bits - 1);
  const std::uint32_t low_mask = (1U << dropped_bits) - 1;
  const std::vector<std::uint32_t> lows{0, 1, 2, half_point - 1, half_point, half_point + 1, low_mask - 1, low_mask};
  int failures = 0;
  for (std::uint32_t top = 0; top < (1U << (32 - dropped_bits)) && failures < 20; ++top) {
    for (std::uint32_t low : lows) {
      if (!check_narrow(format, float_from_bits((top << dropped_bits) | low))) ++failures;
    }
  }
  constexpr std::uint32_t kSeed = 20240611;
  std::mt19937 random(kSeed);
  for (int i = 0; i < 1'000'000 && failures < 20; ++i) {
    if (!check_narrow(format, float_from_bits(static_cast<std::uint32_t>(random())))) ++failures;
  }
  EXPECT_EQ(failures, 0) << "random seed " << kSeed;
}

void check_widen_all(const Format& format) {
  int failures = 0;
  for (std::uint32_t pattern = 0; pattern < 0x10000U && failures < 20; ++pattern) {
    const auto bits = static_cast<std::uint16_t>(pattern);
    const float got = format.widen(bits);
    const double expected = reference_widen(format, bits);
    if (format.is_nan(bits)) {
      // NaN stays NaN: quiet, same sign, payload kept in the top mantissa bits.
      const std::uint32_t got_bits = bits_of(got);
      const int shift = 23 - format.mantissa_bits;
      const bool ok = std::isnan(got) && (got_bits & 0x0040'0000U) != 0 &&
                      (got_bits >> 31) == static_cast<std::uint32_t>(bits >> 15) &&
                      ((got_bits >> shift) & ((1U << format.mantissa_bits) - 1)) ==
                          ((bits | format.quiet_bit()) & ((1U << format.mantissa_bits) - 1U)) &&
                      (got_bits & ((1U << shift) - 1)) == 0;
      EXPECT_TRUE(ok) << format.name << ": 0x" << std::hex << pattern << " -> 0x" << got_bits;
      if (!ok) ++failures;
      continue;
    }
    const bool ok = static_cast<double>(got) == expected && std::signbit(got) == std::signbit(expected);
    EXPECT_TRUE(ok) << format.name << ": 0x" << std::hex << pattern << " -> " << std::hexfloat << got << ", expected "
                    << expected;
    if (!ok) ++failures;
  }
  EXPECT_EQ(failures, 0);
}

void check_round_trip_all(const Format& format) {
  int failures = 0;
  for (std::uint32_t pattern = 0; pattern < 0x10000U && failures < 20; ++pattern) {
    const auto bits = static_cast<std::uint16_t>(pattern);
    const std::uint16_t back = format.narrow(format.widen(bits));
    // Non-NaN and quiet NaN patterns come back exactly; a signalling NaN comes back as its quiet twin.
    const std::uint16_t expected = format.is_nan(bits) ? static_cast<std::uint16_t>(bits | format.quiet_bit()) : bits;
    EXPECT_EQ(back, expected) << format.name << ": 0x" << std::hex << pattern;
    if (back != expected) ++failures;
  }
  EXPECT_EQ(failures, 0);
}

TEST(Half, WidenMatchesFieldReferenceOnAllPatterns) { check_widen_all(kHalf); }
TEST(Half, RoundTripsAllPatterns) { check_round_trip_all(kHalf); }
TEST(Half, NarrowRoundsEveryBoundaryToNearestEven) { check_all_boundaries(kHalf); }
TEST(Half, NarrowMatchesReferenceOnFloatSweep) { check_float_sweep(kHalf, 13); }

TEST(Half, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(tp::float_to_half_bits(0.0F), 0x0000);
  EXPECT_EQ(tp::float_to_half_bits(-0.0F), 0x8000);
  EXPECT_EQ(tp::float_to_half_bits(1.0F), 0x3C00);
  EXPECT_EQ(tp::float_to_half_bits(-2.0F), 0xC000);
  EXPECT_EQ(tp::float_to_half_bits(65504.0F), 0x7BFF);
  EXPECT_EQ(tp::float_to_half_bits(inf), 0x7C00);
  EXPECT_EQ(tp::float_to_half_bits(-inf), 0xFC00);
  // Overflow: 65520 is the midpoint to 2^16 and ties to even (to Inf); just below stays at the max.
  EXPECT_EQ(tp::float_to_half_bits(65520.0F), 0x7C00);
  EXPECT_EQ(tp::float_to_half_bits(std::nextafter(65520.0F, 0.0F)), 0x7BFF);
  EXPECT_EQ(tp::float_to_half_bits(-1e10F), 0xFC00);
  EXPECT_EQ(tp::float_to_half_bits(std::numeric_limits<float>::max()), 0x7C00);
  // Subnormals and underflow: 2^-24 is the smallest subnormal; 2^-25 ties to even (zero); above rounds up.
  EXPECT_EQ(tp::float_to_half_bits(std::ldexp(1.0F, -24)), 0x0001);
  EXPECT_EQ(tp::float_to_half_bits(std::ldexp(1.0F, -25)), 0x0000);
  EXPECT_EQ(tp::float_to_half_bits(-std::ldexp(1.0F, -25)), 0x8000);
  EXPECT_EQ(tp::float_to_half_bits(std::nextafter(std::ldexp(1.0F, -25), 1.0F)), 0x0001);
  EXPECT_EQ(tp::float_to_half_bits(std::ldexp(3.0F, -25)), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(tp::float_to_half_bits(std::ldexp(1.0F, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(tp::float_to_half_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(tp::float_to_half_bits(-std::numeric_limits<float>::denorm_min()), 0x8000);
  EXPECT_EQ(tp::half_bits_to_float(0x0001), std::ldexp(1.0F, -24));
  EXPECT_EQ(tp::half_bits_to_float(0x03FF), std::ldexp(1023.0F, -24));
  EXPECT_TRUE(std::signbit(tp::half_bits_to_float(0x8000)));
  // NaN: quiet, sign kept, never Inf, even when the payload is only in bits that get dropped.
  for (std::uint32_t nan_bits : {0x7FC00000U, 0xFFC00000U, 0x7F800001U, 0xFF800001U, 0x7FBFFFFFU}) {
    const std::uint16_t half = tp::float_to_half_bits(float_from_bits(nan_bits));
    EXPECT_TRUE(kHalf.is_nan(half)) << std::hex << nan_bits;
    EXPECT_NE(half & 0x0200, 0) << std::hex << nan_bits;
    EXPECT_EQ(static_cast<std::uint32_t>(half >> 15), nan_bits >> 31) << std::hex << nan_bits;
  }
  EXPECT_EQ(tp::float_to_half_bits(float_from_bits(0x7FC00000U)), 0x7E00);
  EXPECT_TRUE(std::isnan(tp::half_bits_to_float(0x7C01)));
}

TEST(BFloat16, WidenMatchesFieldReferenceOnAllPatterns) { check_widen_all(kBFloat16); }
TEST(BFloat16, RoundTripsAllPatterns) { check_round_trip_all(kBFloat16); }
TEST(BFloat16, NarrowRoundsEveryBoundaryToNearestEven) { check_all_boundaries(kBFloat16); }
TEST(BFloat16, NarrowMatchesReferenceOnFloatSweep) { check_float_sweep(kBFloat16, 16); }

TEST(BFloat16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(tp::float_to_bfloat16_bits(0.0F), 0x0000);
  EXPECT_EQ(tp::float_to_bfloat16_bits(-0.0F), 0x8000);
  EXPECT_EQ(tp::float_to_bfloat16_bits(1.0F), 0x3F80);
  EXPECT_EQ(tp::float_to_bfloat16_bits(inf), 0x7F80);
  EXPECT_EQ(tp::float_to_bfloat16_bits(-inf), 0xFF80);
  EXPECT_EQ(tp::float_to_bfloat16_bits(std::numeric_limits<float>::max()), 0x7F80);  // overflow by rounding
  EXPECT_EQ(tp::float_to_bfloat16_bits(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(tp::float_to_bfloat16_bits(float_from_bits(0x7F7F7FFFU)), 0x7F7F);  // just below the tie
  EXPECT_EQ(tp::float_to_bfloat16_bits(float_from_bits(0x3F808000U)), 0x3F80);  // tie, to even
  EXPECT_EQ(tp::float_to_bfloat16_bits(float_from_bits(0x3F818000U)), 0x3F82);  // tie, to even
  EXPECT_EQ(tp::float_to_bfloat16_bits(float_from_bits(0x00008000U)), 0x0000);  // subnormal tie
  EXPECT_EQ(tp::float_to_bfloat16_bits(float_from_bits(0x00008001U)), 0x0001);
  EXPECT_EQ(tp::float_to_bfloat16_bits(float_from_bits(0x807FFFFFU)), 0x8080);  // to smallest normal
  for (std::uint32_t nan_bits : {0x7FC00000U, 0xFFC00000U, 0x7F800001U, 0xFF800001U, 0x7FFFFFFFU}) {
    const std::uint16_t bfloat16 = tp::float_to_bfloat16_bits(float_from_bits(nan_bits));
    EXPECT_TRUE(kBFloat16.is_nan(bfloat16)) << std::hex << nan_bits;
    EXPECT_NE(bfloat16 & 0x0040, 0) << std::hex << nan_bits;
    EXPECT_EQ(static_cast<std::uint32_t>(bfloat16 >> 15), nan_bits >> 31) << std::hex << nan_bits;
  }
}

TEST(HalfTypes, WrapTheBitsWithExplicitConversions) {
  const tp::Half half = tp::Half::from_float(1.5F);
  EXPECT_EQ(half.bits, 0x3E00);
  EXPECT_EQ(static_cast<float>(half), 1.5F);
  EXPECT_EQ(half, tp::Half::from_bits(0x3E00));
  EXPECT_NE(tp::Half::from_float(0.0F), tp::Half::from_float(-0.0F));  // bitwise equality
  const tp::BFloat16 bfloat16 = tp::BFloat16::from_float(-3.0F);
  EXPECT_EQ(bfloat16.bits, 0xC040);
  EXPECT_EQ(static_cast<float>(bfloat16), -3.0F);
  EXPECT_EQ(bfloat16, tp::BFloat16::from_bits(0xC040));
}

}  // namespace
