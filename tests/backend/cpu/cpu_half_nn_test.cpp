// SPDX-License-Identifier: Apache-2.0
// The half-precision MLP kernels (float16 and bfloat16 storage, float32 arithmetic) against float64
// references computed from the same 16-bit inputs, and the fast conversions they use against the bit-exact
// core ones.
//
// Tolerances (documented in docs/mixed-precision.md): each result is the float32 result rounded once to the
// 16-bit type, so it may be off by half an ulp of that type: relative u = 2^-11 (float16) or 2^-8 (bfloat16),
// plus, for matmul, the float32 GEMM's own tolerance (cpu_gemm_test: 1e-5 x sqrt(k) x sum |a||b|), and an
// absolute half of the smallest subnormal for results that land in float16's subnormal range (2^-25).
// relu and relu_grad are exact. A wrong transpose, a missing conversion or a double rounding in the wrong
// place is off by far more.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/half_convert.hpp"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include "backend/cpu/kernels/bf16_gemm.hpp"
#include "backend/cpu/kernels/half_nn.hpp"

namespace tp::backend::cpu {
namespace {

using tp_test::expect_invalid;

template <typename H>
struct HalfTraits;
template <>
struct HalfTraits<Half> {
  static constexpr double unit_roundoff = 0x1p-11;
  static constexpr double subnormal_abs = 0x1p-25;
};
template <>
struct HalfTraits<BFloat16> {
  static constexpr double unit_roundoff = 0x1p-8;
  static constexpr double subnormal_abs = 0x1p-134;
};

template <typename H>
class HalfKernels : public ::testing::Test {};
using HalfTypes = ::testing::Types<Half, BFloat16>;
TYPED_TEST_SUITE(HalfKernels, HalfTypes);

template <typename H>
std::vector<H> random_half(std::mt19937& rng, std::int64_t n, double low = -1.0, double high = 1.0) {
  std::vector<H> values;
  for (double value : tp_test::random_vector<double>(rng, n, low, high)) {
    values.push_back(H::from_float(static_cast<float>(value)));
  }
  return values;
}

template <typename H>
double value_of(H value) {
  return static_cast<double>(static_cast<float>(value));
}

// |got - expected| <= u |expected| + extra + subnormal_abs, element by element.
template <typename H>
void expect_rounded_once(const std::vector<H>& got, const std::vector<double>& expected,
                         const std::vector<double>& extra) {
  ASSERT_EQ(got.size(), expected.size());
  int failures = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tolerance =
        HalfTraits<H>::unit_roundoff * std::fabs(expected[i]) + extra[i] + HalfTraits<H>::subnormal_abs;
    if (!(std::fabs(value_of(got[i]) - expected[i]) <= tolerance) && failures++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << value_of(got[i]) << ", expected " << expected[i] << " (tolerance "
                    << tolerance << ")";
    }
  }
  EXPECT_EQ(failures, 0);
}

// Runs `multiply(ta, tb, m, n, k, a, b, c)` over every transpose and the shapes below (empty ones only when
// `with_empty`), against float64 with the tolerance above.
template <typename H, typename Multiply>
void expect_matmul_matches_float64(Multiply multiply, bool with_empty = true) {
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  struct Case {
    std::int64_t m, n, k;
  };
  for (const Case shape : {Case{1, 1, 1}, Case{7, 13, 5}, Case{32, 64, 784}, Case{3, 0, 4}, Case{0, 3, 4},
                           Case{4, 3, 0}, Case{1, 17, 9}, Case{128, 10, 512}, Case{200, 96, 16}}) {
    if (!with_empty && shape.m * shape.n * shape.k == 0) continue;
    for (const Transpose ta : {Transpose::no, Transpose::yes}) {
      for (const Transpose tb : {Transpose::no, Transpose::yes}) {
        const auto [m, n, k] = shape;
        SCOPED_TRACE(::testing::Message() << "m=" << m << " n=" << n << " k=" << k << " ta=" << (ta == Transpose::yes)
                                          << " tb=" << (tb == Transpose::yes));
        const std::vector<H> a = random_half<H>(rng, m * k);
        const std::vector<H> b = random_half<H>(rng, k * n);
        std::vector<H> c(static_cast<std::size_t>(m * n), H::from_float(123.0F));  // must be overwritten
        multiply(ta, tb, m, n, k, a.data(), b.data(), c.data());
        std::vector<double> expected(c.size()), extra(c.size());
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double sum = 0, magnitude = 0;
            for (std::int64_t p = 0; p < k; ++p) {
              const double x = value_of(a[static_cast<std::size_t>(ta == Transpose::yes ? p * m + i : i * k + p)]);
              const double y = value_of(b[static_cast<std::size_t>(tb == Transpose::yes ? j * k + p : p * n + j)]);
              sum += x * y;
              magnitude += std::fabs(x * y);
            }
            expected[static_cast<std::size_t>(i * n + j)] = sum;
            extra[static_cast<std::size_t>(i * n + j)] =
                1e-5 * std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1))) * magnitude;
          }
        }
        expect_rounded_once(c, expected, extra);
      }
    }
  }
}

TYPED_TEST(HalfKernels, MatmulMatchesFloat64ForEveryTransposeAndShape) {
  expect_matmul_matches_float64<TypeParam>([](auto... arguments) { matmul_half<TypeParam>(arguments...); });
}

TYPED_TEST(HalfKernels, WidenedMatmulMatchesFloat64ForEveryTransposeAndShape) {
  expect_matmul_matches_float64<TypeParam>(
      [](auto... arguments) { matmul_half_widened<TypeParam>(arguments..., GemmLibrary::automatic); });
}

// The oneDNN path on its own, and matmul_half<BFloat16> taking one of its two paths (the faster here) for
// each shape, the same one at every product of the shape.
TEST(Bfloat16Gemm, OneDnnOnTheCpusBfloat16InstructionsMatchesFloat64) {
  if (!bf16_gemm_native()) GTEST_SKIP() << "this CPU has no AVX512_BF16: matmul_half converts around sgemm instead";
  expect_matmul_matches_float64<BFloat16>(matmul_bf16_onednn, /*with_empty=*/false);
  std::mt19937 rng(tp_test::test_seed());
  const std::vector<BFloat16> a = random_half<BFloat16>(rng, 32 * 784), b = random_half<BFloat16>(rng, 784 * 512);
  std::vector<BFloat16> dispatched(32 * 512), again(32 * 512), native(32 * 512), widened(32 * 512);
  matmul_half<BFloat16>(Transpose::no, Transpose::no, 32, 512, 784, a.data(), b.data(), dispatched.data(),
                        GemmLibrary::onednn);
  matmul_half<BFloat16>(Transpose::no, Transpose::no, 32, 512, 784, a.data(), b.data(), again.data(),
                        GemmLibrary::onednn);
  matmul_bf16_onednn(Transpose::no, Transpose::no, 32, 512, 784, a.data(), b.data(), native.data());
  matmul_half_widened<BFloat16>(Transpose::no, Transpose::no, 32, 512, 784, a.data(), b.data(), widened.data(),
                                GemmLibrary::onednn);
  EXPECT_NE(native, widened) << "the two paths sum in different orders: the test below must tell them apart";
  EXPECT_TRUE(dispatched == native || dispatched == widened) << "matmul_half<BFloat16> takes one of the two paths";
  EXPECT_EQ(dispatched, again) << "and keeps it for the shape";
}

// Padded to a tile's depth (or further): zeros after the k-th entry of the depth in both operands, whatever
// sits beyond the caller's matrices.
TEST(Bfloat16Gemm, ProductsPaddedInDepthMatchFloat64) {
  if (!bf16_gemm_native()) GTEST_SKIP() << "this CPU has no AVX512_BF16: matmul_half converts around sgemm instead";
  for (const std::int64_t extra : {0, 1, 32}) {
    SCOPED_TRACE(::testing::Message() << "depth k + " << extra << ", at least a tile's");
    expect_matmul_matches_float64<BFloat16>(
        [extra](Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, const BFloat16* a,
                const BFloat16* b, BFloat16* c) {
          matmul_bf16_onednn_at_depth(ta, tb, m, n, k, std::max(k + extra, bf16_gemm_tile_depth(k)), a, b, c);
        },
        /*with_empty=*/false);
  }
  std::vector<BFloat16> c(4);
  const std::vector<BFloat16> a(4), b(4);
  EXPECT_THROW(matmul_bf16_onednn_at_depth(Transpose::no, Transpose::no, 2, 2, 2, 1, a.data(), b.data(), c.data()),
               InvalidArgument);
}

// A product is padded only to a whole tile's depth, and only below it.
TEST(Bfloat16Gemm, TileDepthIsTheProductsOwnOrAWholeTile) {
  for (std::int64_t k = 1; k <= 64; ++k) {
    const std::int64_t depth = bf16_gemm_tile_depth(k);
    EXPECT_TRUE(depth == k || (k < 32 && depth == 32)) << "k " << k << " depth " << depth;
    EXPECT_EQ(bf16_gemm_tile_depth(k), depth) << "the answer is kept";
  }
  if (!bf16_gemm_native()) {
    EXPECT_EQ(bf16_gemm_tile_depth(16), 16) << "no bfloat16 kernels: nothing to pad for";
  }
}

TYPED_TEST(HalfKernels, BiasAddAndItsGradientMatchFloat64) {
  using H = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  for (const auto& [rows, cols] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {7, 13}, {64, 512}, {0, 5}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const std::vector<H> x = random_half<H>(rng, rows * cols, -4, 4);
    const std::vector<H> bias = random_half<H>(rng, cols);
    std::vector<H> y(x.size());
    bias_add_half<H>(x.data(), bias.data(), y.data(), rows, cols);
    std::vector<double> expected(x.size()), sums(static_cast<std::size_t>(cols), 0.0), magnitudes(sums);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto i = static_cast<std::size_t>(r * cols + c);
        expected[i] = value_of(x[i]) + value_of(bias[static_cast<std::size_t>(c)]);
        sums[static_cast<std::size_t>(c)] += value_of(x[i]);
        magnitudes[static_cast<std::size_t>(c)] += std::fabs(value_of(x[i]));
      }
    }
    // float32 rounding before the 16-bit one: 2^-24 relative more.
    std::vector<double> extra(expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) extra[i] = 0x1p-24 * std::fabs(expected[i]);
    expect_rounded_once(y, expected, extra);
    bias_add_half<H>(y.data(), bias.data(), y.data(), rows, cols);  // in place is allowed
    std::vector<H> dbias(static_cast<std::size_t>(cols), H::from_float(7.0F));
    bias_add_grad_half<H>(x.data(), dbias.data(), rows, cols);
    std::vector<double> sum_extra(sums.size());
    for (std::size_t c = 0; c < sums.size(); ++c) sum_extra[c] = 0x1p-24 * magnitudes[c];
    expect_rounded_once(dbias, sums, sum_extra);  // rows == 0: zeros
  }
}

TYPED_TEST(HalfKernels, ReluAndReluGradAreExact) {
  using H = TypeParam;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  std::vector<H> x = random_half<H>(rng, 999);
  x.push_back(H::from_float(-0.0F));
  x.push_back(H::from_float(std::numeric_limits<float>::quiet_NaN()));
  x.push_back(H::from_float(std::numeric_limits<float>::infinity()));
  const std::vector<H> dy = random_half<H>(rng, static_cast<std::int64_t>(x.size()));
  std::vector<H> y(x.size()), dx(x.size());
  relu_half<H>(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  relu_grad_half<H>(dy.data(), x.data(), dx.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float value = static_cast<float>(x[i]);
    if (std::isnan(value)) {
      EXPECT_EQ(y[i], x[i]) << "NaN propagates";
    } else {
      EXPECT_EQ(y[i], value > 0 ? x[i] : H{}) << "element " << i;  // +0 for x <= 0, -0 included
    }
    EXPECT_EQ(dx[i], value > 0 ? dy[i] : H{}) << "element " << i;
  }
}

// relu and relu_grad compare bits (sign and magnitude) instead of widened floats: on every 16-bit pattern
// (zeros of both signs, subnormals, infinities, NaNs of both signs) the result is the float formula's.
TYPED_TEST(HalfKernels, ReluAndReluGradMatchTheFloatFormulaOnEveryPattern) {
  using H = TypeParam;
  std::vector<H> x(65536);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) x[bits] = H::from_bits(static_cast<std::uint16_t>(bits));
  std::vector<H> dy(x.size(), H::from_float(0.75F)), y(x.size()), dx(x.size());
  relu_half<H>(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  relu_grad_half<H>(dy.data(), x.data(), dx.data(), static_cast<std::int64_t>(x.size()));
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const float value = static_cast<float>(x[bits]);
    ASSERT_EQ(y[bits], value <= 0.0F ? H{} : x[bits]) << "relu of 0x" << std::hex << bits;
    ASSERT_EQ(dx[bits], value > 0.0F ? dy[bits] : H{}) << "relu_grad at 0x" << std::hex << bits;
  }
  relu_grad_half<H>(dy.data(), x.data(), dy.data(), static_cast<std::int64_t>(x.size()));  // dx may alias dy
  EXPECT_EQ(dy, dx);
}

// bias_add_half is the float32 sum rounded once: bitwise the core conversions' result, on every 16-bit
// pattern of x (the vectorised loop against the scalar formula).
TYPED_TEST(HalfKernels, BiasAddIsTheFloatSumRoundedOnceOnEveryPattern) {
  using H = TypeParam;
  constexpr std::int64_t kCols = 512;
  constexpr std::int64_t kRows = 65536 / kCols;
  std::mt19937 rng(tp_test::test_seed());
  const std::vector<H> bias = random_half<H>(rng, kCols, -8, 8);
  std::vector<H> x(65536), y(x.size());
  for (std::uint32_t bits = 0; bits < 65536; ++bits) x[bits] = H::from_bits(static_cast<std::uint16_t>(bits));
  bias_add_half<H>(x.data(), bias.data(), y.data(), kRows, kCols);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const float sum = static_cast<float>(x[bits]) + static_cast<float>(bias[bits % kCols]);
    ASSERT_EQ(y[bits], H::from_float(sum)) << "x = 0x" << std::hex << bits;
  }
}

// Every 16-bit pattern widened, and every float exponent with many mantissas (both signs, the rounding edges)
// narrowed, element by element and through the span functions (F16C blocks of 8 plus tails), with MXCSR's
// flush-to-zero and denormals-are-zero off and on (the streams turn them on): the same bits as core/half.
void expect_conversions_match_core() {
  std::vector<std::uint16_t> patterns(65536);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) patterns[bits] = static_cast<std::uint16_t>(bits);
  std::vector<float> widened(patterns.size());
  detail::half_to_float(patterns.data(), widened.data(), static_cast<std::int64_t>(patterns.size()));
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto core = std::bit_cast<std::uint32_t>(half_bits_to_float(static_cast<std::uint16_t>(bits)));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(widened[bits]), core) << "float16 widen 0x" << std::hex << bits;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(detail::widen(Half::from_bits(static_cast<std::uint16_t>(bits)))), core);
  }
  detail::bfloat16_to_float(patterns.data(), widened.data(), static_cast<std::int64_t>(patterns.size()));
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(widened[bits]),
              std::bit_cast<std::uint32_t>(bfloat16_bits_to_float(static_cast<std::uint16_t>(bits))))
        << "bfloat16 widen 0x" << std::hex << bits;
  }
  std::vector<float> floats;
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 4093) {
    floats.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  }
  for (const float edge : {65504.0F, 65519.99F, 65520.0F, 0x1p-14F, 0x1.ffcp-15F, 0x1p-24F, 0x1p-25F, 0x1.8p-25F,
                           0x1p-126F, 3.4e38F, 0.0F}) {
    for (const float value :
         {edge, -edge, std::nextafter(edge, 0.0F), std::nextafter(edge, std::numeric_limits<float>::infinity())}) {
      floats.push_back(value);
      floats.push_back(-value);
    }
  }
  std::vector<std::uint16_t> narrowed(floats.size());
  detail::float_to_half(floats.data(), narrowed.data(), static_cast<std::int64_t>(floats.size()));
  for (std::size_t i = 0; i < floats.size(); ++i) {
    const std::uint16_t core = float_to_half_bits(floats[i]);
    ASSERT_EQ(narrowed[i], core) << "float16 narrow of 0x" << std::hex << std::bit_cast<std::uint32_t>(floats[i]);
    ASSERT_EQ(detail::narrow<Half>(floats[i]).bits, core);
  }
  detail::float_to_bfloat16(floats.data(), narrowed.data(), static_cast<std::int64_t>(floats.size()));
  for (std::size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(narrowed[i], float_to_bfloat16_bits(floats[i]))
        << "bfloat16 narrow of 0x" << std::hex << std::bit_cast<std::uint32_t>(floats[i]);
  }
  // Spans not aligned to their element types take the element-by-element path: the same bits.
  constexpr std::int64_t kCount = 1001;
  std::vector<unsigned char> source(4 * kCount + 1), target(4 * kCount + 1);
  std::memcpy(source.data() + 1, floats.data(), 4 * kCount);
  detail::float_to_bfloat16(source.data() + 1, target.data() + 1, kCount);
  ASSERT_EQ(std::memcmp(target.data() + 1, narrowed.data(), 2 * kCount), 0) << "unaligned bfloat16 narrow";
  detail::bfloat16_to_float(target.data() + 1, source.data() + 1, kCount);
  for (std::int64_t i = 0; i < kCount; ++i) {
    float value;
    std::memcpy(&value, source.data() + 1 + 4 * i, 4);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(value),
              std::bit_cast<std::uint32_t>(bfloat16_bits_to_float(narrowed[static_cast<std::size_t>(i)])))
        << "unaligned bfloat16 widen of element " << i;
  }
}

TEST(HalfConversions, BitExactAgainstCore) { expect_conversions_match_core(); }

#if defined(__x86_64__)
TEST(HalfConversions, BitExactWithFlushToZeroAndDenormalsAreZero) {
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040U);  // FTZ | DAZ, as the device streams run
  expect_conversions_match_core();
  _mm_setcsr(saved);
}
#endif

TYPED_TEST(HalfKernels, RejectBadSizesNamingTheKernel) {
  using H = TypeParam;
  std::vector<H> buffer(4);
  expect_invalid(
      [&] { matmul_half<H>(Transpose::no, Transpose::no, -1, 2, 2, buffer.data(), buffer.data(), buffer.data()); },
      {"matmul_half", "m"});
  expect_invalid([&] { bias_add_half<H>(buffer.data(), nullptr, buffer.data(), 2, 2); }, {"bias_add_half", "bias"});
  expect_invalid([&] { relu_half<H>(buffer.data(), buffer.data(), -3); }, {"relu_half", "n"});
}

}  // namespace
}  // namespace tp::backend::cpu
