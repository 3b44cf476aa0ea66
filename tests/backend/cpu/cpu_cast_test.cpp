// SPDX-License-Identifier: Apache-2.0
// cast between all tp::DType pairs: special values (NaN, +-inf, +-0, saturation bounds, 65504 / 65520 for
// float16), every table entry on small integers, and the single-rounding guarantee for sources wider than
// float going to float16 / bfloat16 (checked against a reference that rounds the exact value in double
// or integer arithmetic, independently of the implementation).

#include "backend/cpu/kernels/cast.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "tensorpool/core/convert.hpp"
#include "tensorpool/core/half.hpp"

namespace {

using tp::DType;
using tp::backend::cpu::cast;
using tp_test::expect_invalid;

constexpr DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::f64,
                          DType::i32, DType::i64, DType::u8,   DType::boolean};

// Casts `source` (of dtype From, stored as C++ type S) to dtype To, stored as D.
template <typename D, typename S>
std::vector<D> cast_all(const std::vector<S>& source, DType from, DType to) {
  std::vector<D> out(source.size());
  cast(source.data(), from, out.data(), to, static_cast<std::int64_t>(source.size()));
  return out;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Cast, FloatToIntegerTruncatesSaturatesAndMapsNaNToZero) {
  const std::vector<double> source{kNaN,
                                   kInf,
                                   -kInf,
                                   2.9,
                                   -2.9,
                                   -0.0,
                                   1e10,
                                   -1e10,
                                   255.9,
                                   256.0,
                                   -0.5,
                                   -1.0,
                                   9223372036854775808.0,
                                   -9223372036854775808.0,
                                   9223372036854774784.0};
  using I32 = std::int32_t;
  using I64 = std::int64_t;
  constexpr I32 i32_max = std::numeric_limits<I32>::max();
  constexpr I32 i32_min = std::numeric_limits<I32>::min();
  constexpr I64 i64_max = std::numeric_limits<I64>::max();
  constexpr I64 i64_min = std::numeric_limits<I64>::min();
  EXPECT_EQ(
      cast_all<I32>(source, DType::f64, DType::i32),
      (std::vector<I32>{0, i32_max, i32_min, 2, -2, 0, i32_max, i32_min, 255, 256, 0, -1, i32_max, i32_min, i32_max}));
  EXPECT_EQ(cast_all<I64>(source, DType::f64, DType::i64),
            (std::vector<I64>{0, i64_max, i64_min, 2, -2, 0, 10000000000, -10000000000, 255, 256, 0, -1, i64_max,
                              i64_min, 9223372036854774784}));
  EXPECT_EQ(cast_all<std::uint8_t>(source, DType::f64, DType::u8),
            (std::vector<std::uint8_t>{0, 255, 0, 2, 0, 0, 255, 0, 255, 255, 0, 0, 255, 0, 255}));
  // From float32 the same rules hold; 2^31 is exactly representable and must saturate for int32.
  const std::vector<float> floats{2147483648.0F, -2147483648.0F, 2147483520.0F, std::nanf("")};
  EXPECT_EQ(cast_all<I32>(floats, DType::f32, DType::i32), (std::vector<I32>{i32_max, i32_min, 2147483520, 0}));
  // From float16: inf and the largest finite value.
  const std::vector<tp::Half> halves{tp::Half::from_bits(0x7C00), tp::Half::from_bits(0x7BFF),
                                     tp::Half::from_bits(0xFBFF), tp::Half::from_bits(0x7E00)};
  EXPECT_EQ(cast_all<I32>(halves, DType::f16, DType::i32), (std::vector<I32>{i32_max, 65504, -65504, 0}));
  EXPECT_EQ(cast_all<std::uint8_t>(halves, DType::f16, DType::u8), (std::vector<std::uint8_t>{255, 255, 0, 0}));
}

TEST(Cast, IntegerToIntegerSaturates) {
  const std::vector<std::int64_t> wide{
      std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(), -1, 256, 255, 0, 70000};
  EXPECT_EQ(cast_all<std::int32_t>(wide, DType::i64, DType::i32),
            (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::max(),
                                       std::numeric_limits<std::int32_t>::min(), -1, 256, 255, 0, 70000}));
  EXPECT_EQ(cast_all<std::uint8_t>(wide, DType::i64, DType::u8),
            (std::vector<std::uint8_t>{255, 0, 0, 255, 255, 0, 255}));
  const std::vector<std::int32_t> narrow{std::numeric_limits<std::int32_t>::min(), -5, 300};
  EXPECT_EQ(cast_all<std::int64_t>(narrow, DType::i32, DType::i64),
            (std::vector<std::int64_t>{std::numeric_limits<std::int32_t>::min(), -5, 300}));
  EXPECT_EQ(cast_all<std::uint8_t>(narrow, DType::i32, DType::u8), (std::vector<std::uint8_t>{0, 0, 255}));
  const std::vector<std::uint8_t> bytes{0, 200, 255};
  EXPECT_EQ(cast_all<std::int32_t>(bytes, DType::u8, DType::i32), (std::vector<std::int32_t>{0, 200, 255}));
}

TEST(Cast, BoolSemantics) {
  const std::vector<double> source{kNaN, 0.0, -0.0, 0.5, -kInf, 1e-300};
  EXPECT_EQ(cast_all<std::uint8_t>(source, DType::f64, DType::boolean), (std::vector<std::uint8_t>{1, 0, 0, 1, 1, 1}));
  const std::vector<tp::Half> halves{tp::Half::from_bits(0x7E00), tp::Half::from_bits(0x8000),
                                     tp::Half::from_bits(0x0001)};
  EXPECT_EQ(cast_all<std::uint8_t>(halves, DType::f16, DType::boolean), (std::vector<std::uint8_t>{1, 0, 1}));
  const std::vector<std::int64_t> ints{std::numeric_limits<std::int64_t>::min(), 0, 256};
  EXPECT_EQ(cast_all<std::uint8_t>(ints, DType::i64, DType::boolean), (std::vector<std::uint8_t>{1, 0, 1}));
  // Any nonzero byte is true, and bool -> bool normalises to 0 / 1.
  const std::vector<std::uint8_t> bools{0, 1, 2, 255};
  EXPECT_EQ(cast_all<float>(bools, DType::boolean, DType::f32), (std::vector<float>{0, 1, 1, 1}));
  EXPECT_EQ(cast_all<std::int64_t>(bools, DType::boolean, DType::i64), (std::vector<std::int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(cast_all<std::uint8_t>(bools, DType::boolean, DType::boolean), (std::vector<std::uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(cast_all<tp::Half>(bools, DType::boolean, DType::f16),
            (std::vector<tp::Half>{tp::Half::from_bits(0), tp::Half::from_bits(0x3C00), tp::Half::from_bits(0x3C00),
                                   tp::Half::from_bits(0x3C00)}));
}

TEST(Cast, Float16BoundsAndSpecials) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> source{65504.0F,
                                  65519.99F,
                                  65520.0F,
                                  -65520.0F,
                                  std::numeric_limits<float>::infinity(),
                                  -0.0F,
                                  0.0F,
                                  nan,
                                  5.960464477539063e-8F /* 2^-24 */,
                                  1e-9F};
  const std::vector<tp::Half> halves = cast_all<tp::Half>(source, DType::f32, DType::f16);
  const std::vector<std::uint16_t> expected{0x7BFF, 0x7BFF, 0x7C00, 0xFC00, 0x7C00, 0x8000, 0x0000, 0, 0x0001, 0};
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (std::isnan(source[i])) {
      EXPECT_EQ(halves[i].bits & 0x7C00, 0x7C00);
      EXPECT_NE(halves[i].bits & 0x03FF, 0) << "NaN must stay NaN";
    } else {
      EXPECT_EQ(halves[i].bits, expected[i]) << "element " << i << " = " << source[i];
    }
  }
  // And back to float32 and float64 exactly.
  const std::vector<float> widened = cast_all<float>(halves, DType::f16, DType::f32);
  EXPECT_EQ(widened[0], 65504.0F);
  EXPECT_EQ(widened[2], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(widened[5]));
  EXPECT_TRUE(std::isnan(widened[7]));
  const std::vector<double> doubles = cast_all<double>(halves, DType::f16, DType::f64);
  EXPECT_EQ(doubles[8], std::ldexp(1.0, -24));
  // bfloat16: the float32 range, rounded to 8 significant bits.
  const std::vector<float> big{3.3895314e38F, std::numeric_limits<float>::max(), 1.00390625F /* 1 + 2^-8 */};
  const std::vector<tp::BFloat16> brains = cast_all<tp::BFloat16>(big, DType::f32, DType::bf16);
  EXPECT_EQ(brains[0].bits, 0x7F7F);
  EXPECT_EQ(brains[1].bits, 0x7F80);  // rounds up to inf
  EXPECT_EQ(brains[2].bits, 0x3F80);  // a tie goes to even
}

TEST(Cast, EverySixteenBitPatternWidensExactlyAndNarrowsBack) {
  std::vector<tp::Half> halves(65536);
  std::vector<tp::BFloat16> brains(65536);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    halves[bits] = tp::Half::from_bits(static_cast<std::uint16_t>(bits));
    brains[bits] = tp::BFloat16::from_bits(static_cast<std::uint16_t>(bits));
  }
  const std::vector<double> wide_halves = cast_all<double>(halves, DType::f16, DType::f64);
  const std::vector<double> wide_brains = cast_all<double>(brains, DType::bf16, DType::f64);
  const std::vector<tp::Half> back_halves = cast_all<tp::Half>(wide_halves, DType::f64, DType::f16);
  const std::vector<tp::BFloat16> back_brains = cast_all<tp::BFloat16>(wide_brains, DType::f64, DType::bf16);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const double half = tp::half_bits_to_float(static_cast<std::uint16_t>(bits));
    const double brain = tp::bfloat16_bits_to_float(static_cast<std::uint16_t>(bits));
    if (std::isnan(half)) {
      ASSERT_TRUE(std::isnan(wide_halves[bits]) && std::isnan(static_cast<float>(back_halves[bits]))) << bits;
    } else {
      ASSERT_EQ(wide_halves[bits], half) << "f16 bits " << bits;
      ASSERT_EQ(back_halves[bits].bits, bits) << "f16 bits " << bits;
    }
    if (std::isnan(brain)) {
      ASSERT_TRUE(std::isnan(wide_brains[bits]) && std::isnan(static_cast<float>(back_brains[bits]))) << bits;
    } else {
      ASSERT_EQ(wide_brains[bits], brain) << "bf16 bits " << bits;
      ASSERT_EQ(back_brains[bits].bits, bits) << "bf16 bits " << bits;
    }
  }
}

TEST(Cast, EveryPairRoundTripsSmallIntegers) {
  // 0, 1, 2, 7, 100 are exact in every dtype except bool, whose images are 0 / 1: each of the 64 table
  // entries is exercised, through f64 as the common source and sink.
  const std::vector<double> values{0, 1, 2, 7, 100};
  for (DType from : kAll) {
    for (DType to : kAll) {
      SCOPED_TRACE(::testing::Message() << from << " -> " << to);
      std::vector<unsigned char> a(values.size() * 8);
      std::vector<unsigned char> b(values.size() * 8);
      std::vector<double> back(values.size());
      cast(values.data(), DType::f64, a.data(), from, 5);
      cast(a.data(), from, b.data(), to, 5);
      cast(b.data(), to, back.data(), DType::f64, 5);
      const bool boolean = from == DType::boolean || to == DType::boolean;
      for (std::size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(back[i], boolean ? (values[i] != 0 ? 1.0 : 0.0) : values[i]) << "value " << values[i];
      }
    }
  }
}

// The exact value `value` rounded to nearest-even with `digits` significant bits, smallest normal exponent
// `min_exponent` (subnormals below it) and overflow to inf from `overflow` up. Exact: scaling by powers of
// two and std::nearbyint (round to nearest even, the default mode) lose nothing in double.
double reference_round(double value, int digits, int min_exponent, double overflow) {
  if (std::isnan(value) || std::isinf(value) || value == 0) return value;
  const double magnitude = std::fabs(value);
  if (magnitude >= overflow) return std::copysign(kInf, value);
  const int exponent = std::max(std::ilogb(magnitude), min_exponent);
  const double ulp = std::ldexp(1.0, exponent - (digits - 1));
  return std::copysign(std::nearbyint(magnitude / ulp) * ulp, value);
}
double reference_half(double value) { return reference_round(value, 11, -14, 65520.0); }
double reference_bfloat16(double value) {
  return reference_round(value, 8, -126, std::ldexp(2.0 - std::ldexp(1.0, -8), 127));
}

TEST(Cast, WideSourcesRoundOnceToSixteenBits) {
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937_64 rng(seed);
  std::vector<double> source{
      1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),  // just above a float16 tie: via float it would tie
      1 + std::ldexp(1.0, -11),                         // an exact tie: to even (1.0)
      1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),   // just above a bfloat16 tie
      65519.999999999,
      65520.0,
      std::ldexp(1.0, -25) + std::ldexp(1.0, -60),
      1e300,
      -1e-300};
  std::uniform_int_distribution<int> exponent(-30, 17);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  for (int i = 0; i < 20000; ++i) {
    double value = std::ldexp(mantissa(rng), exponent(rng));
    if (i % 2 == 0) {  // near a float16 midpoint: the cases where double rounding would go wrong
      const double ulp = std::ldexp(1.0, std::max(std::ilogb(value), -14) - 10);
      value = (std::floor(value / ulp) + 0.5) * ulp + (i % 4 == 0 ? 1 : -1) * std::ldexp(ulp, -30);
    }
    source.push_back(i % 3 == 0 ? -value : value);
  }
  const std::vector<tp::Half> halves = cast_all<tp::Half>(source, DType::f64, DType::f16);
  const std::vector<tp::BFloat16> brains = cast_all<tp::BFloat16>(source, DType::f64, DType::bf16);
  for (std::size_t i = 0; i < source.size(); ++i) {
    ASSERT_EQ(static_cast<double>(static_cast<float>(halves[i])), reference_half(source[i]))
        << std::hexfloat << "f64 -> f16 of " << source[i];
    ASSERT_EQ(static_cast<double>(static_cast<float>(brains[i])), reference_bfloat16(source[i]))
        << std::hexfloat << "f64 -> bf16 of " << source[i];
  }
  // Float32 sources use the core conversion directly.
  const std::vector<float> floats{1.5F, -2.75F, 1e-8F};
  const std::vector<tp::Half> from_floats = cast_all<tp::Half>(floats, DType::f32, DType::f16);
  for (std::size_t i = 0; i < floats.size(); ++i) EXPECT_EQ(from_floats[i].bits, tp::float_to_half_bits(floats[i]));
}

TEST(Cast, Int64ToBFloat16RoundsOnce) {
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> source{(1 << 24) + (1 << 16) + 1,  // above a bfloat16 tie, a float tie below it
                                   (1 << 24) + (1 << 16),      // an exact tie: to even
                                   std::numeric_limits<std::int64_t>::max(),
                                   std::numeric_limits<std::int64_t>::min(),
                                   65519,
                                   65520,
                                   -70000,
                                   0};
  for (int i = 0; i < 20000; ++i) {
    const int width = 1 + i % 63;
    const auto value = static_cast<std::int64_t>(rng() >> (64 - width));
    source.push_back(i % 2 == 0 ? value : -value);
  }
  const std::vector<tp::BFloat16> brains = cast_all<tp::BFloat16>(source, DType::i64, DType::bf16);
  const std::vector<tp::Half> halves = cast_all<tp::Half>(source, DType::i64, DType::f16);
  for (std::size_t i = 0; i < source.size(); ++i) {
    // Exact integer reference: keep the top 8 bits of the magnitude, round the rest to nearest even.
    const std::int64_t value = source[i];
    const auto bits = static_cast<std::uint64_t>(value);
    const std::uint64_t magnitude = value < 0 ? 0 - bits : bits;
    const int shift = std::max(0, static_cast<int>(std::bit_width(magnitude)) - 8);
    std::uint64_t kept = shift == 0 ? magnitude : magnitude >> shift;
    if (shift > 0) {
      const std::uint64_t dropped = magnitude & ((std::uint64_t{1} << shift) - 1);
      const std::uint64_t half = std::uint64_t{1} << (shift - 1);
      if (dropped > half || (dropped == half && (kept & 1) != 0)) ++kept;
    }
    const double expected = std::copysign(std::ldexp(static_cast<double>(kept), shift), static_cast<double>(value));
    ASSERT_EQ(static_cast<double>(static_cast<float>(brains[i])), expected) << "i64 -> bf16 of " << value;
    // float16: exact below 2048, and the double reference is exact for every int64 (rounding happens once).
    ASSERT_EQ(static_cast<double>(static_cast<float>(halves[i])),
              reference_half(static_cast<double>(value) == std::ldexp(1.0, 63) ? kInf : static_cast<double>(value)))
        << "i64 -> f16 of " << value;
  }
}

TEST(Cast, SameDTypeIsAByteCopyAndInPlaceWorks) {
  const std::vector<tp::Half> signalling{tp::Half::from_bits(0x7C01), tp::Half::from_bits(0x8000)};
  EXPECT_EQ(cast_all<tp::Half>(signalling, DType::f16, DType::f16), signalling);
  // In place between equal sizes: int32 -> float32 over the same buffer.
  std::vector<std::int32_t> buffer{-3, 16777217, 7};
  cast(buffer.data(), DType::i32, buffer.data(), DType::f32, 3);
  float converted[3];
  std::memcpy(converted, buffer.data(), sizeof(converted));
  EXPECT_EQ(converted[0], -3.0F);
  EXPECT_EQ(converted[1], 16777216.0F);  // 2^24 + 1 rounds to even
  EXPECT_EQ(converted[2], 7.0F);
}

TEST(Cast, RejectsBadDTypesSizesAndNullPointers) {
  std::vector<double> buffer(4, 1.0);
  expect_invalid([&] { cast(buffer.data(), static_cast<DType>(42), buffer.data(), DType::f64, 1); },
                 {"[cpu]", "cast", "src_dtype = 42"});
  expect_invalid([&] { cast(buffer.data(), DType::f64, buffer.data(), static_cast<DType>(8), 1); }, {"dst_dtype = 8"});
  expect_invalid([&] { cast(buffer.data(), DType::f64, buffer.data(), DType::f64, -1); }, {"n = -1"});
  expect_invalid([&] { cast(nullptr, DType::f64, buffer.data(), DType::f32, 2); }, {"src is null"});
  cast(nullptr, DType::f64, nullptr, DType::boolean, 0);
}

// The pipeline's pixel normalisation: every byte value, at every position of a vector (lengths that are not
// a multiple of any vector width, offsets that are not aligned), equals the scalar float32 division.
TEST(Cast, U8ToF32DividedIsTheScalarDivisionForEveryByteAndPosition) {
  std::vector<std::uint8_t> bytes(256 * 3 + 7);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>((i * 97 + 13) % 256);
  for (const float divisor : {255.0f, 1.0f, 3.0f, 7.5f, 0.1f, -2.0f}) {
    for (const std::size_t offset : {0, 1, 5}) {
      const auto n = static_cast<std::int64_t>(bytes.size() - offset);
      std::vector<float> out(bytes.size() - offset + 1, -1.0f);
      tp::u8_to_f32_divided(bytes.data() + offset, divisor, out.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        const float expected = static_cast<float>(bytes[offset + static_cast<std::size_t>(i)]) / divisor;
        const float actual = out[static_cast<std::size_t>(i)];
        ASSERT_EQ(std::bit_cast<std::uint32_t>(actual), std::bit_cast<std::uint32_t>(expected))
            << "divisor " << divisor << ", offset " << offset << ", element " << i;
      }
      EXPECT_EQ(out.back(), -1.0f) << "wrote past n";
    }
  }
}

}  // namespace
