// SPDX-License-Identifier: Apache-2.0
// Every tensor op on every backend of this process (cpu:0, sim:0, opencl:0, ...: backend_params.hpp), through
// the public tp::ops API: the same cases and the same per-dtype tolerances (conformance_support.hpp) against
// float64 references computed on the host (host_reference.hpp), so a new backend inherits the whole suite.
// A float64 case on a device without float64 is skipped, saying why, only on the tp::DeviceError that
// reports it. TP_TEST_SEED=<n> replays a failure with other inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backend/support/backend_params.hpp"
#include "backend/support/conformance_support.hpp"
#include "backend/support/host_reference.hpp"
#include "ops/peer_sum.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/ops/broadcast.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/elementwise.hpp"
#include "tensorpool/ops/finite.hpp"
#include "tensorpool/ops/init.hpp"
#include "tensorpool/ops/linalg.hpp"
#include "tensorpool/ops/metrics.hpp"
#include "tensorpool/ops/nn.hpp"
#include "tensorpool/ops/optimizer.hpp"
#include "tensorpool/ops/reduce.hpp"

namespace tp::backend::testing {
namespace {

using Values = std::vector<double>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

#define TRACE_SEED(seed) SCOPED_TRACE(::testing::Message() << "seed " << (seed) << " (rerun with TP_TEST_SEED)")

std::size_t to_size(std::int64_t value) { return static_cast<std::size_t>(value); }

std::string label(std::string_view what, DType dtype) { return std::string(what) + " " + std::string(name_of(dtype)); }

// Each value moved 0.5 further from zero: divisors and scales with no cancellation.
Values away_from_zero(Values values, DType dtype) {
  for (double& value : values) value = representable(value + std::copysign(0.5, value), dtype);
  return values;
}

// Small integers (as doubles): many exact ties for argmax and correct_count.
Values small_integers(std::size_t count, std::uint32_t seed, int high) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int> distribution(0, high);
  Values values(count);
  for (double& value : values) value = distribution(engine);
  return values;
}

// The first index of the largest of `count` values at `first`, `first + stride`, ...
std::int64_t first_argmax(const double* first, std::int64_t count, std::int64_t stride) {
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < count; ++i) {
    if (first[i * stride] > first[best * stride]) best = i;
  }
  return best;
}

class KernelConformance : public ::testing::TestWithParam<std::string> {
 protected:
  device::Device& device() const { return device::DeviceManager::instance().device(GetParam()); }
  Tensor make(const Values& values, const Shape& shape, DType dtype) const {
    return upload(values, shape, dtype, device());
  }

  // Runs a float64 case; a device that reports it has no float64 (says_no_float64) skips it.
  template <typename Body>
  void run_float64(Body body) {
    try {
      body();
    } catch (const DeviceError& error) {
      if (!says_no_float64(error)) throw;
      try {
        device().synchronize();  // drops a kept copy of the same report
      } catch (const DeviceError& kept) {
        if (!says_no_float64(kept)) throw;
      }
      GTEST_SKIP() << GetParam() << " has no float64: " << error.what();
    }
  }

  // A task error nobody synchronised on belongs to the test that left it.
  void TearDown() override {
    try {
      device().synchronize();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "a task error was left on " << GetParam() << ": " << error.what();
    }
  }

  void check_binary(DType dtype);
  void check_scale(DType dtype);
  void check_add_scaled(DType dtype);
  void check_sum_across_peers(DType dtype);
  void check_broadcast_axis(DType dtype);
  void check_scale_rows(DType dtype);
  void check_casts(bool with_float64);
  void check_all_finite(DType dtype);
  void check_fill(DType dtype);
  void check_uniform(DType dtype, std::size_t count);
  void check_normal(DType dtype, std::size_t count);
  void check_glorot_uniform(DType dtype, std::int64_t fan_in, std::int64_t fan_out);
  void check_matmul(DType dtype, const std::vector<std::array<std::int64_t, 3>>& sizes);
  void check_correct_count(DType dtype);
  void check_bias(DType dtype);
  void check_relu(DType dtype);
  void check_softmax(DType dtype);
  void check_cross_entropy_from_logits(DType dtype);
  void check_cross_entropy_from_probabilities(DType dtype);
  void check_sgd(DType dtype);
  void check_adam(DType dtype);
  void check_reduce(DType dtype);
  void check_argmax(DType dtype);
};

// ---- the host references themselves ----

TEST(KernelConformanceReference, PhiloxMatchesTheRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, 0), (PhiloxWords{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffffffffffffULL),
            (PhiloxWords{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0x299f31d0a4093822ULL),
            (PhiloxWords{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(KernelConformanceReference, SixteenBitRoundingIsToNearestEven) {
  EXPECT_EQ(round_to_format(1.0L, kFloat16), 0x3C00);
  EXPECT_EQ(round_to_format(65504.0L, kFloat16), 0x7BFF);
  EXPECT_EQ(round_to_format(65519.99L, kFloat16), 0x7BFF);
  EXPECT_EQ(round_to_format(65520.0L, kFloat16), 0x7C00);
  EXPECT_EQ(round_to_format(0x1p-24L, kFloat16), 0x0001);
  EXPECT_EQ(round_to_format(0x1p-25L, kFloat16), 0x0000);         // tie: to the even 0
  EXPECT_EQ(round_to_format(0x1.8p-24L, kFloat16), 0x0002);       // tie: to the even 2 ulps
  EXPECT_EQ(round_to_format(1.0L + 0x1p-11L, kFloat16), 0x3C00);  // tie: to the even 1
  EXPECT_EQ(round_to_format(1.0L + 0x3p-11L, kFloat16), 0x3C02);  // tie: to the even 1 + 2^-9
  EXPECT_EQ(round_to_format(-0.0L, kFloat16), 0x8000);
  EXPECT_EQ(round_to_format(0x1.ffcp-15L, kFloat16), 0x0400);  // rounds up into the least normal
  EXPECT_EQ(round_to_format(1.0L, kBFloat16), 0x3F80);
  EXPECT_EQ(round_to_format(1.0L + 0x1p-8L, kBFloat16), 0x3F80);
  EXPECT_EQ(round_to_format(0x1.ffp127L, kBFloat16), 0x7F80);  // tie above the largest finite: Inf
  EXPECT_EQ(round_to_format(0x1p-133L, kBFloat16), 0x0001);
  EXPECT_EQ(value_of_format(0x7BFF, kFloat16), 65504.0L);
  EXPECT_EQ(value_of_format(0x0001, kFloat16), 0x1p-24L);
  EXPECT_EQ(value_of_format(0xC000, kBFloat16), -2.0L);
  EXPECT_TRUE(std::isnan(value_of_format(0x7E00, kFloat16)));
}

// ---- elementwise arithmetic ----

void KernelConformance::check_binary(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const Shape shape{3, 7, 13};
  const std::int64_t cols = 13;
  const Values x = random_values(dtype, to_size(shape.num_elements()), seed, -2, 2);
  const Tensor tx = make(x, shape, dtype);
  struct Operand {
    const char* broadcast;
    Shape shape;
    Values values;
  };
  const Operand operands[] = {
      {"same shape", shape, away_from_zero(random_values(dtype, x.size(), seed + 1, -1.5, 1.5), dtype)},
      {"row", Shape{cols}, away_from_zero(random_values(dtype, to_size(cols), seed + 2, -1.5, 1.5), dtype)},
      {"scalar", Shape{}, away_from_zero(random_values(dtype, 1, seed + 3, -1.5, 1.5), dtype)},
  };
  for (const Operand& y : operands) {
    const Tensor ty = make(y.values, y.shape, dtype);
    for (const ops::Arithmetic op :
         {ops::Arithmetic::add, ops::Arithmetic::sub, ops::Arithmetic::mul, ops::Arithmetic::div}) {
      Values expected(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double b = y.values.size() == 1 ? y.values[0] : y.values[i % y.values.size()];
        switch (op) {
          case ops::Arithmetic::add: expected[i] = x[i] + b; break;
          case ops::Arithmetic::sub: expected[i] = x[i] - b; break;
          case ops::Arithmetic::mul: expected[i] = x[i] * b; break;
          case ops::Arithmetic::div: expected[i] = x[i] / b; break;
        }
      }
      const Tensor out = ops::binary(op, tx, ty);
      ASSERT_EQ(out.shape(), shape);
      ASSERT_EQ(out.dtype(), dtype);
      const char* names[] = {"add", "sub", "mul", "div"};
      expect_close(label(std::string(names[static_cast<int>(op)]) + " (" + y.broadcast + ")", dtype), download(out),
                   expected, tolerance_of(dtype));
    }
  }
}
TEST_P(KernelConformance, BinaryF32) { check_binary(DType::f32); }
TEST_P(KernelConformance, BinaryF64) {
  run_float64([&] { check_binary(DType::f64); });
}

void KernelConformance::check_scale(DType dtype) {
  const Values x = random_values(dtype, 1001, test_seed(), -3, 3);
  const Tensor tx = make(x, Shape{7, 143}, dtype);
  for (const double alpha : {-1.5, 0.1, 0.0, 3.0}) {
    Values expected(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) expected[i] = alpha * x[i];
    expect_close(label("scale by " + std::to_string(alpha), dtype), download(ops::scale(tx, alpha)), expected,
                 tolerance_of(dtype));
  }
}
TEST_P(KernelConformance, ScaleF32) { check_scale(DType::f32); }
TEST_P(KernelConformance, ScaleF64) {
  run_float64([&] { check_scale(DType::f64); });
}

void KernelConformance::check_add_scaled(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const std::size_t count = 1027;
  const Values x = random_values(dtype, count, seed, -2, 2);
  Values y = random_values(dtype, count, seed + 1, -2, 2);
  const Tensor tx = make(x, Shape{static_cast<std::int64_t>(count)}, dtype);
  const Tensor ty = make(y, Shape{static_cast<std::int64_t>(count)}, dtype);
  for (const double alpha : {0.75, -2.0}) {
    for (std::size_t i = 0; i < count; ++i) y[i] = y[i] + alpha * x[i];
    ops::add_scaled(ty, alpha, tx);
    const Values got = download(ty);
    expect_close(label("add_scaled by " + std::to_string(alpha), dtype), got, y, tolerance_of(dtype));
    y = got;  // the next step starts from what the device holds
  }
}
TEST_P(KernelConformance, AddScaledF32) { check_add_scaled(DType::f32); }
TEST_P(KernelConformance, AddScaledF16) { check_add_scaled(DType::f16); }
TEST_P(KernelConformance, AddScaledBF16) { check_add_scaled(DType::bf16); }
TEST_P(KernelConformance, AddScaledF64) {
  run_float64([&] { check_add_scaled(DType::f64); });
}

// ops::sum_across_peers, the mirrored strategy's direct all-reduce (16-bit gradients under mixed precision),
// with every tensor on the one device (which reaches itself): three inputs added left to right, each addition
// rounded once to the dtype, into the first input in place and into a second output, which holds the same
// bits.
void KernelConformance::check_sum_across_peers(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const std::size_t count = 1027;
  const Shape shape{static_cast<std::int64_t>(count)};
  const Values a = random_values(dtype, count, seed, -2, 2);
  const Values b = random_values(dtype, count, seed + 1, -2, 2);
  const Values c = random_values(dtype, count, seed + 2, -2, 2);
  const Tensor ta = make(a, shape, dtype);
  const Tensor other = make(Values(count, 0.0), shape, dtype);
  const std::vector<Tensor> inputs{ta, make(b, shape, dtype), make(c, shape, dtype)};
  const std::vector<Tensor> outputs{ta, other};
  ops::sum_across_peers(outputs, inputs);
  Values expected(count);
  for (std::size_t i = 0; i < count; ++i) {
    expected[i] = representable(representable(a[i] + b[i], dtype) + c[i], dtype);
  }
  const Values got = download(ta);
  expect_close(label("sum_across_peers", dtype), got, expected, tolerance_of(dtype));
  EXPECT_EQ(download(other), got) << "every output holds the same values";
}
TEST_P(KernelConformance, SumAcrossPeersF32) { check_sum_across_peers(DType::f32); }
TEST_P(KernelConformance, SumAcrossPeersF16) { check_sum_across_peers(DType::f16); }
TEST_P(KernelConformance, SumAcrossPeersBF16) { check_sum_across_peers(DType::bf16); }
TEST_P(KernelConformance, SumAcrossPeersF64) {
  run_float64([&] { check_sum_across_peers(DType::f64); });
}

// ---- broadcasts ----

void KernelConformance::check_broadcast_axis(DType dtype) {
  const Values x = random_values(dtype, 12, test_seed(), -4, 4);
  const Tensor tx = make(x, Shape{3, 4}, dtype);
  const std::int64_t size = 5;
  for (const std::int64_t axis : {0, 1, 2, -1, -3}) {
    const std::int64_t position = axis < 0 ? axis + 3 : axis;
    const std::int64_t inner = position == 0 ? 12 : (position == 1 ? 4 : 1);
    const std::int64_t outer = 12 / inner;
    for (const ops::BroadcastMode mode : {ops::BroadcastMode::copy, ops::BroadcastMode::mean}) {
      const bool mean = mode == ops::BroadcastMode::mean;
      Values expected(to_size(12 * size));
      for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t a = 0; a < size; ++a) {
          for (std::int64_t i = 0; i < inner; ++i) {
            const double value = x[to_size(o * inner + i)];
            expected[to_size((o * size + a) * inner + i)] = mean ? value / static_cast<double>(size) : value;
          }
        }
      }
      const Tensor out = ops::broadcast_axis(tx, axis, size, mode);
      std::vector<std::int64_t> dims = {3, 4};
      dims.insert(dims.begin() + position, size);
      ASSERT_EQ(out.shape(), Shape(dims)) << "axis " << axis;
      expect_close(label("broadcast_axis " + std::to_string(axis) + (mean ? " mean" : " copy"), dtype), download(out),
                   expected, tolerance_of(dtype));
    }
  }
  const Tensor scalar = make({3.0}, Shape{}, dtype);
  expect_close(label("broadcast_axis of a scalar", dtype),
               download(ops::broadcast_axis(scalar, -1, 6, ops::BroadcastMode::mean)), Values(6, 0.5),
               tolerance_of(dtype));
}
TEST_P(KernelConformance, BroadcastAxisF32) { check_broadcast_axis(DType::f32); }
TEST_P(KernelConformance, BroadcastAxisF64) {
  run_float64([&] { check_broadcast_axis(DType::f64); });
}

void KernelConformance::check_scale_rows(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const std::int64_t rows = 9, cols = 11;
  const Values x = random_values(dtype, to_size(rows * cols), seed, -2, 2);
  const Values s = random_values(dtype, to_size(rows), seed + 1, -3, 3);
  Values expected(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) expected[to_size(r * cols + c)] = x[to_size(r * cols + c)] * s[to_size(r)];
  }
  const Tensor tx = make(x, Shape{rows, cols}, dtype);
  const Tensor ts = make(s, Shape{rows}, dtype);
  expect_close(label("scale_rows", dtype), download(ops::scale_rows(tx, ts)), expected, tolerance_of(dtype));
  ops::scale_rows_into(tx, ts, tx);  // in place
  expect_close(label("scale_rows in place", dtype), download(tx), expected, tolerance_of(dtype));
}
TEST_P(KernelConformance, ScaleRowsF32) { check_scale_rows(DType::f32); }
TEST_P(KernelConformance, ScaleRowsF64) {
  run_float64([&] { check_scale_rows(DType::f64); });
}

// ---- casts ----

// Source values of each dtype: the rounding, truncation and saturation edges of every target, then random
// ones. A bool source is its raw bytes (2 and 255 are true too).
std::vector<long double> cast_sources(DType dtype, std::uint32_t seed) {
  const long double inf = std::numeric_limits<long double>::infinity();
  const long double nan = std::numeric_limits<long double>::quiet_NaN();
  std::vector<long double> values;
  const auto random_reals = [&](double low, double high, std::size_t count) {
    for (const double value : random_values(dtype, count, seed++, low, high)) values.push_back(value);
  };
  switch (dtype) {
    case DType::f64:
      values = {1.0L + 0x1p-11L + 0x1p-40L,  // just above a float16 tie: a float step first would round it to even
                1.0L + 0x1p-24L + 0x1p-60L,  // just above a float32 tie
                1.0L + 0x1p-24L,
                1e300L,
                -1e300L,
                0x1p-1074L,
                4e9L,
                -4e9L,
                9.3e18L,
                -9.3e18L,
                0x1p63L,
                -0x1p63L};
      [[fallthrough]];
    case DType::f32:
      for (const long double value : {0.0L,
                                      -0.0L,
                                      1.0L,
                                      -1.0L,
                                      0.5L,
                                      -0.5L,
                                      1.5L,
                                      -1.5L,
                                      2.5L,
                                      -2.5L,
                                      0x1.fffffep-1L,
                                      65504.0L,
                                      65519.99609375L,
                                      65520.0L,
                                      -65520.0L,
                                      1.0L + 0x1p-11L,
                                      1.0L + 0x3p-11L,
                                      1.0L + 0x1p-11L + 0x1p-23L,
                                      0x1p-24L,
                                      0x1p-25L,
                                      0x1.8p-25L,
                                      0x1.ffcp-15L,
                                      1.0L + 0x1p-8L,
                                      1.0L + 0x3p-8L,
                                      1.0L + 0x1p-8L + 0x1p-23L,
                                      0x1.fffffep127L,
                                      0x1.fep127L,
                                      0x1.ffp127L,
                                      0x1p-149L,
                                      0x1p-130L,
                                      255.5L,
                                      256.0L,
                                      -1e-3L,
                                      2147483520.0L,
                                      0x1p31L,
                                      -2147483904.0L,
                                      1e19L,
                                      -1e19L,
                                      inf,
                                      -inf,
                                      nan}) {
        values.push_back(value);
      }
      random_reals(-70000, 70000, 64);
      random_reals(-2, 2, 64);
      break;
    case DType::f16:
      values = {0.0L,     -0.0L,           1.0L,    -1.5L,  2.5L,   65504.0L, -65504.0L, 0x1p-24L,
                0x1p-14L, 1.0L + 0x1p-10L, 1024.5L, 255.0L, 256.0L, inf,      -inf,      nan};
      random_reals(-65504, 65504, 64);
      random_reals(-2, 2, 64);
      break;
    case DType::bf16:
      values = {0.0L,    -0.0L,    1.0L, -1.5L,   0x1.fep127L,    -0x1.fep127L, 0x1p-133L, 256.0L,
                0x1p31L, -0x1p31L, 3e9L, 0x1p63L, 1.0L + 0x1p-7L, inf,          -inf,      nan};
      random_reals(-1e6, 1e6, 64);
      random_reals(-2, 2, 64);
      break;
    case DType::i32:
      values = {0,
                1,
                -1,
                2049,
                2051,
                65519,
                65520,
                -65520,
                16777217,
                16777219,
                255,
                256,
                -7,
                300,
                std::numeric_limits<std::int32_t>::max(),
                std::numeric_limits<std::int32_t>::min()};
      break;
    case DType::i64:
      values = {0,
                1,
                -1,
                255,
                256,
                0x1p24L + 1,
                0x1p53L + 1,
                0x1p62L + 0x1p38L + 1 /* a float tie plus 1 */,
                5e9L,
                -5e9L,
                0x1p31L,
                -0x1p31L - 1,
                static_cast<long double>(std::numeric_limits<std::int64_t>::max()),
                static_cast<long double>(std::numeric_limits<std::int64_t>::min())};
      break;
    case DType::u8: values = {0, 1, 2, 127, 128, 200, 255}; break;
    case DType::boolean: values = {0, 1, 2, 255, 0}; break;
  }
  // What the tensor will hold (e.g. 255.5 in float16 is 255.5; 3e9 in bfloat16 rounds).
  for (long double& value : values) {
    unsigned char bytes[8];
    encode_element(value, dtype, bytes);
    value = decode_element(bytes, dtype);
  }
  return values;
}

// Whether `value` of `dtype` is a float32 or float64 denormal (bfloat16 shares float32's exponent range).
bool is_denormal(long double value, DType dtype) {
  const long double magnitude = std::fabs(value);
  const int least_normal_exponent = dtype == DType::f64 ? -1022 : -126;
  return (dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f64) && magnitude > 0 &&
         magnitude < std::ldexp(1.0L, least_normal_exponent);
}

std::string show(long double value) {
  std::ostringstream text;
  text << std::setprecision(21) << value;
  return text.str();
}

void KernelConformance::check_casts(bool with_float64) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                          DType::i32, DType::i64, DType::u8,  DType::boolean};
  for (const DType from : dtypes) {
    const std::vector<long double> sources = cast_sources(from, seed);
    const auto count = static_cast<std::int64_t>(sources.size());
    const Tensor x = upload_exact(sources, Shape{count}, from, device());
    const std::vector<unsigned char> source_bytes = encode(sources, from);
    for (const DType to : dtypes) {
      if ((from == DType::f64 || to == DType::f64) != with_float64) continue;
      const Tensor out = ops::cast(x, to);
      ASSERT_EQ(out.dtype(), to);
      ASSERT_EQ(out.shape(), x.shape());
      const std::vector<unsigned char> got = read_bytes(out);
      const std::size_t width = size_of(to);
      int mismatches = 0;
      for (std::size_t i = 0; i < sources.size(); ++i) {
        const long double actual = decode_element(got.data() + i * width, to);
        // Whether the element is what casting `source` gives.
        const auto matches = [&](long double source) {
          const long double expected = reference_cast(source, to);
          if (from == to && to != DType::boolean) {  // a byte copy, NaN payloads too
            return std::memcmp(got.data() + i * width, source_bytes.data() + i * width, width) == 0;
          }
          if (std::isnan(expected)) return std::isnan(actual) && std::signbit(actual) == std::signbit(expected);
          unsigned char expected_bytes[8];
          encode_element(expected, to, expected_bytes);
          if (std::memcmp(got.data() + i * width, expected_bytes, width) == 0) return true;
          // A denormal result may be flushed to a zero of its sign (flush-to-zero).
          encode_element(std::copysign(0.0L, expected), to, expected_bytes);
          return is_denormal(expected, to) && std::memcmp(got.data() + i * width, expected_bytes, width) == 0;
        };
        const long double source = from == DType::boolean ? (sources[i] != 0 ? 1 : 0) : sources[i];
        // Streams compute with denormals-are-zero and flush-to-zero (device/denormals.hpp; OpenCL devices may
        // flush too): a float32 / float64 denormal source may be read as a zero of its sign.
        const bool ok = matches(source) || (is_denormal(source, from) && matches(std::copysign(0.0L, source)));
        const long double expected = reference_cast(source, to);
        if (!ok && mismatches++ < 4) {
          ADD_FAILURE() << "cast " << name_of(from) << " -> " << name_of(to) << " of " << show(sources[i]) << " gave "
                        << show(actual) << ", expected " << show(expected);
        }
      }
      EXPECT_EQ(mismatches, 0) << "cast " << name_of(from) << " -> " << name_of(to) << ": " << mismatches << " of "
                               << sources.size() << " wrong";
    }
  }
}
TEST_P(KernelConformance, CastBetweenDtypes) { check_casts(false); }
TEST_P(KernelConformance, CastToAndFromF64) {
  run_float64([&] { check_casts(true); });
}

// ---- all_finite and fill ----

void KernelConformance::check_all_finite(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  for (const std::size_t count : {std::size_t{1000}, std::size_t{100003}}) {
    Values values = random_values(dtype, count, seed, -100, 100);
    values[count / 3] = dtype == DType::f16 ? 65504 : 1e30;  // large but finite
    const auto verdict = [&](const Values& contents) {
      const Values got = download(ops::all_finite(make(contents, Shape{static_cast<std::int64_t>(count)}, dtype)));
      return got.size() == 1 ? got[0] : kNaN;
    };
    EXPECT_EQ(verdict(values), 1.0) << label("all finite", dtype) << " of " << count;
    for (const std::size_t where : {std::size_t{0}, count / 2 + 1, count - 1}) {
      for (const double bad : {kInf, -kInf, kNaN}) {
        Values with_bad = values;
        with_bad[where] = bad;
        EXPECT_EQ(verdict(with_bad), 0.0)
            << label("all_finite", dtype) << " with " << bad << " at " << where << " of " << count;
      }
    }
  }
  const Tensor out = make({-1.0}, Shape{}, DType::f32);
  ops::all_finite_into(make({1, 2, 3, 4}, Shape{2, 2}, dtype), out);
  EXPECT_EQ(download(out), Values{1.0}) << "all_finite_into";
}
TEST_P(KernelConformance, AllFiniteF32) { check_all_finite(DType::f32); }
TEST_P(KernelConformance, AllFiniteF16) { check_all_finite(DType::f16); }
TEST_P(KernelConformance, AllFiniteBF16) { check_all_finite(DType::bf16); }
TEST_P(KernelConformance, AllFiniteF64) {
  run_float64([&] { check_all_finite(DType::f64); });
}

void KernelConformance::check_fill(DType dtype) {
  for (const std::int64_t count : {1, 1001}) {
    const Tensor out = Tensor::empty(Shape{count}, dtype, device());
    for (const double value : {0.25, -3.5, 0.0}) {
      ops::fill(out, value);
      EXPECT_EQ(download(out), Values(to_size(count), value)) << label("fill", dtype) << " " << value;
    }
  }
}
TEST_P(KernelConformance, FillF32) { check_fill(DType::f32); }
TEST_P(KernelConformance, FillF64) {
  run_float64([&] { check_fill(DType::f64); });
}

// ---- initialisers: Philox streams, statistics, determinism, and equality with cpu:0 ----

// Mean and variance of `values`.
std::pair<double, double> moments(const Values& values) {
  double sum = 0;
  for (const double value : values) sum += value;
  const double mean = sum / static_cast<double>(values.size());
  double squares = 0;
  for (const double value : values) squares += (value - mean) * (value - mean);
  return {mean, squares / static_cast<double>(values.size())};
}

// Five standard errors of a sample variance of `count` uniform values, relative to the true variance (the
// fourth central moment of a uniform is 9/5 of its variance squared).
double uniform_variance_error(std::size_t count) { return 5 * std::sqrt(0.8 / static_cast<double>(count)); }

device::Device& cpu0() { return device::DeviceManager::instance().device("cpu:0"); }

void KernelConformance::check_uniform(DType dtype, std::size_t count) {
  const double low = -2, high = 3;
  const std::uint64_t seed = 42;
  const auto n = static_cast<std::int64_t>(count);
  const auto draw = [&](device::Device& where, std::uint64_t key, std::uint64_t offset, std::int64_t size) {
    const Tensor out = Tensor::empty(Shape{size}, dtype, where);
    ops::uniform(out, low, high, key, offset);
    return download(out);
  };
  const Values values = draw(device(), seed, 0, n);
  for (const double value : values) {
    ASSERT_TRUE(value >= low && value < high) << label("uniform", dtype) << " gave " << value;
  }
  const auto [mean, variance] = moments(values);
  const double width = high - low;
  EXPECT_NEAR(mean, (low + high) / 2, 5 * width / std::sqrt(12.0 * static_cast<double>(count))) << "uniform mean";
  EXPECT_NEAR(variance, width * width / 12, uniform_variance_error(count) * width * width / 12) << "uniform variance";
  EXPECT_EQ(draw(device(), seed, 0, n), values) << "the same seed twice";
  const Values other = draw(device(), seed + 1, 0, n);
  std::size_t equal = 0;
  for (std::size_t i = 0; i < count; ++i) equal += other[i] == values[i] ? 1 : 0;
  EXPECT_LT(equal, count / 100) << "another seed gives other values";
  EXPECT_EQ(draw(device(), seed, 1001, n - 1001), Values(values.begin() + 1001, values.end()))
      << "element i depends only on (seed, offset + i)";
  expect_close(label("uniform against the Philox reference", dtype), values,
               reference_uniform(dtype, count, low, high, seed), tolerance_of(dtype));
  expect_close(label("uniform against cpu:0", dtype), values, draw(cpu0(), seed, 0, n), tolerance_of(dtype));
}
TEST_P(KernelConformance, UniformF32) { check_uniform(DType::f32, 100003); }
TEST_P(KernelConformance, UniformF64) {
  run_float64([&] { check_uniform(DType::f64, 20001); });
}

void KernelConformance::check_normal(DType dtype, std::size_t count) {
  const double mean = 1, stddev = 2;
  const std::uint64_t seed = 7;
  const auto n = static_cast<std::int64_t>(count);
  const auto draw = [&](device::Device& where, std::uint64_t key, std::uint64_t offset, std::int64_t size) {
    const Tensor out = Tensor::empty(Shape{size}, dtype, where);
    ops::normal(out, mean, stddev, key, offset);
    return download(out);
  };
  const Values values = draw(device(), seed, 0, n);
  const auto [sample_mean, variance] = moments(values);
  EXPECT_NEAR(sample_mean, mean, 5 * stddev / std::sqrt(static_cast<double>(count))) << "normal mean";
  EXPECT_NEAR(std::sqrt(variance), stddev, 5 * stddev / std::sqrt(2.0 * static_cast<double>(count))) << "normal stddev";
  std::size_t within_one = 0;
  for (const double value : values) within_one += std::fabs(value - mean) < stddev ? 1 : 0;
  EXPECT_NEAR(static_cast<double>(within_one) / static_cast<double>(count), 0.6827, 0.02) << "normal within 1 sigma";
  EXPECT_EQ(draw(device(), seed, 0, n), values) << "the same seed twice";
  EXPECT_EQ(draw(device(), seed, 1001, n - 1001), Values(values.begin() + 1001, values.end()))
      << "element i depends only on (seed, offset + i)";
  expect_close(label("normal against the Philox reference", dtype), values,
               reference_normal(dtype, count, mean, stddev, seed), tolerance_of(dtype));
  expect_close(label("normal against cpu:0", dtype), values, draw(cpu0(), seed, 0, n), tolerance_of(dtype));
}
TEST_P(KernelConformance, NormalF32) { check_normal(DType::f32, 100003); }
TEST_P(KernelConformance, NormalF64) {
  run_float64([&] { check_normal(DType::f64, 20001); });
}

void KernelConformance::check_glorot_uniform(DType dtype, std::int64_t fan_in, std::int64_t fan_out) {
  const std::uint64_t seed = 1234;
  const auto draw = [&](device::Device& where) {
    const Tensor out = Tensor::empty(Shape{fan_in, fan_out}, dtype, where);
    ops::glorot_uniform(out, seed);
    return download(out);
  };
  const Values values = draw(device());
  const double limit = glorot_limit(fan_in, fan_out);
  for (const double value : values) ASSERT_LE(std::fabs(value), limit) << label("glorot_uniform", dtype);
  const auto [mean, variance] = moments(values);
  const auto count = static_cast<double>(values.size());
  EXPECT_NEAR(mean, 0, 5 * limit / std::sqrt(3 * count)) << "glorot mean";
  EXPECT_NEAR(variance, limit * limit / 3, uniform_variance_error(values.size()) * limit * limit / 3)
      << "glorot variance";
  EXPECT_EQ(draw(device()), values) << "the same seed twice";
  expect_close(label("glorot_uniform against the Philox reference", dtype), values,
               reference_uniform(dtype, values.size(), -limit, limit, seed), tolerance_of(dtype));
  expect_close(label("glorot_uniform against cpu:0", dtype), values, draw(cpu0()), tolerance_of(dtype));
}
TEST_P(KernelConformance, GlorotUniformF32) { check_glorot_uniform(DType::f32, 784, 512); }
TEST_P(KernelConformance, GlorotUniformF64) {
  run_float64([&] { check_glorot_uniform(DType::f64, 256, 128); });
}

// ---- matmul ----

void KernelConformance::check_matmul(DType dtype, const std::vector<std::array<std::int64_t, 3>>& sizes) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  for (const auto& [m, k, n] : sizes) {
    const Values a = random_values(dtype, to_size(m * k), seed, -1, 1);
    const Values b = random_values(dtype, to_size(k * n), seed + 1, -1, 1);
    const MatmulReference reference = reference_matmul(a, b, m, k, n);
    for (const bool transpose_a : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        const Tensor ta = transpose_a ? make(transposed(a, m, k), Shape{k, m}, dtype) : make(a, Shape{m, k}, dtype);
        const Tensor tb = transpose_b ? make(transposed(b, k, n), Shape{n, k}, dtype) : make(b, Shape{k, n}, dtype);
        const ops::MatmulOptions options{.transpose_a = transpose_a, .transpose_b = transpose_b};
        Tensor out;
        if (transpose_a == transpose_b) {
          out = ops::matmul(ta, tb, options);
        } else {  // into a buffer full of NaN: the product overwrites it (it is not beta * C + ...)
          out = make(Values(to_size(m * n), kNaN), Shape{m, n}, dtype);
          ops::matmul_into(ta, tb, out, options);
        }
        ASSERT_EQ(out.shape(), (Shape{m, n}));
        std::ostringstream what;
        what << "matmul " << m << "x" << k << "x" << n << (transpose_a ? " A^T" : " A")
             << (transpose_b ? " B^T" : " B");
        expect_close(label(what.str(), dtype), download(out), reference.product, tolerance_of(dtype),
                     &reference.magnitude);
      }
    }
  }
}
TEST_P(KernelConformance, MatmulF32) {
  check_matmul(DType::f32, {{7, 13, 5}, {1, 1, 1}, {33, 65, 17}, {128, 784, 512}});
}
TEST_P(KernelConformance, MatmulF16) { check_matmul(DType::f16, {{7, 13, 5}, {1, 1, 1}, {64, 96, 40}}); }
TEST_P(KernelConformance, MatmulBF16) { check_matmul(DType::bf16, {{7, 13, 5}, {1, 1, 1}, {64, 96, 40}}); }
TEST_P(KernelConformance, MatmulF64) {
  run_float64([&] { check_matmul(DType::f64, {{7, 13, 5}, {1, 1, 1}, {33, 65, 17}}); });
}

// ---- metrics ----

void KernelConformance::check_correct_count(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const std::int64_t rows = 50, cols = 7;
  const Values predictions = small_integers(to_size(rows * cols), seed, 3);
  Values labels = small_integers(to_size(rows), seed + 1, static_cast<int>(cols - 1));
  double expected = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t best = first_argmax(predictions.data() + r * cols, cols, 1);
    if (r % 2 == 0) labels[to_size(r)] = static_cast<double>(best);  // half the rows right, ties included
    expected += labels[to_size(r)] == static_cast<double>(best) ? 1 : 0;
  }
  const Tensor scores = make(predictions, Shape{rows, cols}, dtype);
  for (const DType label_dtype : {DType::i32, DType::i64}) {
    const Tensor count = ops::correct_count(scores, make(labels, Shape{rows}, label_dtype));
    ASSERT_EQ(count.dtype(), DType::f32);
    ASSERT_EQ(count.shape(), Shape{});
    EXPECT_EQ(download(count), Values{expected})
        << label("correct_count", dtype) << " with " << label_dtype << " labels";
  }
}
TEST_P(KernelConformance, CorrectCountF32) { check_correct_count(DType::f32); }
TEST_P(KernelConformance, CorrectCountF64) {
  run_float64([&] { check_correct_count(DType::f64); });
}

// ---- the MLP's ops ----

void KernelConformance::check_bias(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const std::int64_t rows = 37, cols = 19;
  const Values x = random_values(dtype, to_size(rows * cols), seed, -2, 2);
  const Values bias = random_values(dtype, to_size(cols), seed + 1, -2, 2);
  Values expected(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) expected[i] = x[i] + bias[i % to_size(cols)];
  const Tensor out = ops::bias_add(make(x, Shape{rows, cols}, dtype), make(bias, Shape{cols}, dtype));
  ASSERT_EQ(out.dtype(), dtype);
  expect_close(label("bias_add", dtype), download(out), expected, tolerance_of(dtype));

  const std::int64_t grad_rows = 300;
  const Values dy = random_values(dtype, to_size(grad_rows * cols), seed + 2, -2, 2);
  Values sums(to_size(cols), 0.0), magnitudes(to_size(cols), 0.0);
  for (std::size_t i = 0; i < dy.size(); ++i) {
    sums[i % to_size(cols)] += dy[i];
    magnitudes[i % to_size(cols)] += std::fabs(dy[i]);
  }
  const Tensor dbias = ops::bias_add_grad(make(dy, Shape{grad_rows, cols}, dtype));
  ASSERT_EQ(dbias.shape(), Shape{cols});
  expect_close(label("bias_add_grad", dtype), download(dbias), sums, tolerance_of(dtype), &magnitudes);
}
TEST_P(KernelConformance, BiasAddAndGradF32) { check_bias(DType::f32); }
TEST_P(KernelConformance, BiasAddAndGradF16) { check_bias(DType::f16); }
TEST_P(KernelConformance, BiasAddAndGradBF16) { check_bias(DType::bf16); }
TEST_P(KernelConformance, BiasAddAndGradF64) {
  run_float64([&] { check_bias(DType::f64); });
}

void KernelConformance::check_relu(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const Shape shape{17, 61};
  Values x = random_values(dtype, to_size(shape.num_elements()), seed, -1, 1);
  for (std::size_t i = 0; i < x.size(); i += 7) x[i] = 0;  // relu'(0) is 0, as TensorFlow
  const Values dy = random_values(dtype, x.size(), seed + 1, -1, 1);
  Values y(x.size()), dx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    y[i] = x[i] > 0 ? x[i] : 0;
    dx[i] = x[i] > 0 ? dy[i] : 0;
  }
  const Tensor tx = make(x, shape, dtype);
  expect_close(label("relu", dtype), download(ops::relu(tx)), y, Tolerance{});
  expect_close(label("relu_grad", dtype), download(ops::relu_grad(make(dy, shape, dtype), tx)), dx, Tolerance{});
}
TEST_P(KernelConformance, ReluAndGradF32) { check_relu(DType::f32); }
TEST_P(KernelConformance, ReluAndGradF16) { check_relu(DType::f16); }
TEST_P(KernelConformance, ReluAndGradBF16) { check_relu(DType::bf16); }
TEST_P(KernelConformance, ReluAndGradF64) {
  run_float64([&] { check_relu(DType::f64); });
}

// Row r of `logits` [rows, cols]: its maximum and log(sum(exp(x - max))).
struct RowShift {
  double max, log_sum;
};
RowShift row_shift(const Values& logits, std::int64_t r, std::int64_t cols) {
  const double* row = logits.data() + r * cols;
  const double max = *std::max_element(row, row + cols);
  double sum = 0;
  for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(row[c] - max);
  return {max, std::log(sum)};
}

// Random logits, one row moved up by 100: exp of it overflows float unless the row's max is taken out first.
Values test_logits(DType dtype, std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  Values logits = random_values(dtype, to_size(rows * cols), seed, -4, 4);
  if (rows > 1) {
    for (std::int64_t c = 0; c < cols; ++c)
      logits[to_size(cols + c)] = representable(logits[to_size(cols + c)] + 100, dtype);
  }
  return logits;
}

void KernelConformance::check_softmax(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const std::vector<std::pair<std::int64_t, std::int64_t>> sizes = {{6, 10}, {2, 1000}, {3, 1}};
  for (const auto& [rows, cols] : sizes) {
    const Values logits = test_logits(dtype, rows, cols, seed);
    Values probabilities(logits.size()), log_probabilities(logits.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      const RowShift shift = row_shift(logits, r, cols);
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::size_t i = to_size(r * cols + c);
        log_probabilities[i] = logits[i] - shift.max - shift.log_sum;
        probabilities[i] = std::exp(log_probabilities[i]);
      }
    }
    const Tensor x = make(logits, Shape{rows, cols}, dtype);
    const std::string size = " of [" + std::to_string(rows) + "," + std::to_string(cols) + "]";
    expect_close(label("softmax" + size, dtype), download(ops::softmax(x)), probabilities, tolerance_of(dtype));
    expect_close(label("log_softmax" + size, dtype), download(ops::log_softmax(x)), log_probabilities,
                 tolerance_of(dtype));
  }
}
TEST_P(KernelConformance, SoftmaxAndLogSoftmaxF32) { check_softmax(DType::f32); }
TEST_P(KernelConformance, SoftmaxAndLogSoftmaxF64) {
  run_float64([&] { check_softmax(DType::f64); });
}

void KernelConformance::check_cross_entropy_from_logits(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const std::int64_t rows = 9, cols = 11;
  const Values logits = test_logits(dtype, rows, cols, seed);
  const Values labels = small_integers(to_size(rows), seed + 1, static_cast<int>(cols - 1));
  Values loss(to_size(rows)), loss_scale(to_size(rows)), gradient(logits.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const RowShift shift = row_shift(logits, r, cols);
    const auto label_index = static_cast<std::int64_t>(labels[to_size(r)]);
    const double picked = logits[to_size(r * cols + label_index)];
    loss[to_size(r)] = shift.log_sum - (picked - shift.max);
    loss_scale[to_size(r)] = std::fabs(shift.max + shift.log_sum) + std::fabs(picked);
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t i = to_size(r * cols + c);
      gradient[i] = std::exp(logits[i] - shift.max - shift.log_sum) - (c == label_index ? 1.0 : 0.0);
    }
  }
  const Tensor x = make(logits, Shape{rows, cols}, dtype);
  for (const DType label_dtype : {DType::i32, DType::i64}) {
    const ops::CrossEntropy result = ops::sparse_cross_entropy(x, make(labels, Shape{rows}, label_dtype));
    const std::string what = " from logits, " + std::string(name_of(label_dtype)) + " labels";
    expect_close(label("cross-entropy loss" + what, dtype), download(result.loss), loss, tolerance_of(dtype),
                 &loss_scale);
    expect_close(label("cross-entropy gradient" + what, dtype), download(result.gradient), gradient,
                 tolerance_of(dtype));
  }
}
TEST_P(KernelConformance, CrossEntropyFromLogitsF32) { check_cross_entropy_from_logits(DType::f32); }
TEST_P(KernelConformance, CrossEntropyFromLogitsF64) {
  run_float64([&] { check_cross_entropy_from_logits(DType::f64); });
}

void KernelConformance::check_cross_entropy_from_probabilities(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const std::int64_t rows = 8, cols = 6;
  const Values logits = random_values(DType::f64, to_size(rows * cols), seed, -2, 2);
  Values probabilities(logits.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const RowShift shift = row_shift(logits, r, cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t i = to_size(r * cols + c);
      probabilities[i] = representable(std::exp(logits[i] - shift.max - shift.log_sum), dtype);
    }
  }
  Values labels = small_integers(to_size(rows), seed + 1, static_cast<int>(cols - 1));
  // Row 1: probabilities 0 and 1 (both outside the clip [1e-7, 1 - 1e-7]), the label on the 0. Row 2: the
  // label's probability 1e-9, clipped up.
  for (std::int64_t c = 0; c < cols; ++c) probabilities[to_size(cols + c)] = c == 1 ? 1.0 : (c == 0 ? 0.0 : 0.125);
  labels[1] = 0;
  labels[2] = 3;
  probabilities[to_size(2 * cols + 3)] = representable(1e-9, dtype);

  constexpr double kLow = 1e-7, kHigh = 1.0 - 1e-7;
  Values loss(to_size(rows)), loss_scale(to_size(rows)), gradient(probabilities.size()),
      gradient_scale(gradient.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto label_index = static_cast<std::int64_t>(labels[to_size(r)]);
    double clipped_sum = 0;
    for (std::int64_t c = 0; c < cols; ++c)
      clipped_sum += std::clamp(probabilities[to_size(r * cols + c)], kLow, kHigh);
    const double picked = std::clamp(probabilities[to_size(r * cols + label_index)], kLow, kHigh);
    loss[to_size(r)] = std::log(clipped_sum) - std::log(picked);
    loss_scale[to_size(r)] = std::fabs(std::log(clipped_sum)) + std::fabs(std::log(picked));
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t i = to_size(r * cols + c);
      const double p = probabilities[i];
      const double own = c == label_index ? 1.0 / p : 0.0;
      const bool inside = p >= kLow && p <= kHigh;  // the clip passes gradient only inside its range
      gradient[i] = inside ? 1.0 / clipped_sum - own : 0.0;
      gradient_scale[i] = inside ? 1.0 / clipped_sum + own : 0.0;
    }
  }
  const Tensor x = make(probabilities, Shape{rows, cols}, dtype);
  for (const DType label_dtype : {DType::i32, DType::i64}) {
    const ops::CrossEntropy result =
        ops::sparse_cross_entropy(x, make(labels, Shape{rows}, label_dtype), ops::CrossEntropyInput::probabilities);
    const std::string what = " from probabilities, " + std::string(name_of(label_dtype)) + " labels";
    expect_close(label("cross-entropy loss" + what, dtype), download(result.loss), loss, tolerance_of(dtype),
                 &loss_scale);
    expect_close(label("cross-entropy gradient" + what, dtype), download(result.gradient), gradient,
                 tolerance_of(dtype), &gradient_scale);
  }
}
TEST_P(KernelConformance, CrossEntropyFromProbabilitiesF32) { check_cross_entropy_from_probabilities(DType::f32); }
TEST_P(KernelConformance, CrossEntropyFromProbabilitiesF64) {
  run_float64([&] { check_cross_entropy_from_probabilities(DType::f64); });
}

// ---- optimizers ----

// Keras' SGD on float64 copies of the slots, with gradient g * factor.
void reference_sgd(Values& param, Values& velocity, const Values& grad, double factor, const ops::SgdOptions& options,
                   bool has_velocity) {
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double g = grad[i] * factor;
    if (!has_velocity) {
      param[i] -= options.learning_rate * g;
      continue;
    }
    velocity[i] = options.momentum * velocity[i] - options.learning_rate * g;
    param[i] += options.nesterov ? options.momentum * velocity[i] - options.learning_rate * g : velocity[i];
  }
}

void KernelConformance::check_sgd(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const Shape shape{5, 7};
  const std::size_t count = to_size(shape.num_elements());
  const Tolerance tolerance = tolerance_of(dtype);
  struct Config {
    const char* name;
    ops::SgdOptions options;
    bool has_velocity;
  };
  const Config configs[] = {{"plain", {.learning_rate = 0.1}, false},
                            {"momentum", {.learning_rate = 0.1, .momentum = 0.9}, true},
                            {"nesterov", {.learning_rate = 0.1, .momentum = 0.9, .nesterov = true}, true}};
  for (const Config& config : configs) {
    SCOPED_TRACE(label(std::string("sgd ") + config.name, dtype));
    Values param = random_values(dtype, count, seed, -1, 1);
    Values velocity = random_values(dtype, count, seed + 1, -0.1, 0.1);
    const Tensor tparam = make(param, shape, dtype);
    const Tensor tvelocity = config.has_velocity ? make(velocity, shape, dtype) : Tensor{};
    for (std::uint32_t step = 0; step < 2; ++step) {
      const Values grad = random_values(dtype, count, seed + 2 + step, -1, 1);
      ops::sgd_update(tparam, make(grad, shape, dtype), tvelocity, config.options);
      reference_sgd(param, velocity, grad, 1.0, config.options, config.has_velocity);
      expect_close("param", download(tparam), param, tolerance);
      if (config.has_velocity) expect_close("velocity", download(tvelocity), velocity, tolerance);
      param = download(tparam);  // each step starts from what the device holds
      if (config.has_velocity) velocity = download(tvelocity);
    }
    // The conditional form: flag 0 leaves every slot bitwise as it was; 2 doubles the gradient.
    const Values grad = random_values(dtype, count, seed + 9, -1, 1);
    const Tensor tgrad = make(grad, shape, dtype);
    ops::sgd_update_if(make({0.0}, Shape{}, DType::f32), tparam, tgrad, tvelocity, config.options);
    EXPECT_EQ(download(tparam), param) << "apply 0 changed the parameter";
    if (config.has_velocity) {
      EXPECT_EQ(download(tvelocity), velocity) << "apply 0 changed the velocity";
    }
    ops::sgd_update_if(make({2.0}, Shape{}, DType::f32), tparam, tgrad, tvelocity, config.options);
    reference_sgd(param, velocity, grad, 2.0, config.options, config.has_velocity);
    expect_close("param after apply 2", download(tparam), param, tolerance);
    if (config.has_velocity) expect_close("velocity after apply 2", download(tvelocity), velocity, tolerance);
  }
}
TEST_P(KernelConformance, SgdF32) { check_sgd(DType::f32); }
TEST_P(KernelConformance, SgdF64) {
  run_float64([&] { check_sgd(DType::f64); });
}

// Keras' Adam in float64, with gradient g * factor, at step `step`.
void reference_adam(Values& param, Values& m, Values& v, const Values& grad, double factor, std::int64_t step,
                    const ops::AdamOptions& options) {
  const auto t = static_cast<double>(step);
  const double alpha =
      options.learning_rate * std::sqrt(1 - std::pow(options.beta2, t)) / (1 - std::pow(options.beta1, t));
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double g = grad[i] * factor;
    m[i] += (g - m[i]) * (1 - options.beta1);
    v[i] += (g * g - v[i]) * (1 - options.beta2);
    param[i] -= m[i] * alpha / (std::sqrt(v[i]) + options.epsilon);
  }
}

void KernelConformance::check_adam(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const Shape shape{6, 9};
  const std::size_t count = to_size(shape.num_elements());
  const Tolerance tolerance = tolerance_of(dtype);
  const ops::AdamOptions options{.learning_rate = 0.01};
  Values param = random_values(dtype, count, seed, -1, 1);
  Values m = random_values(dtype, count, seed + 1, -0.1, 0.1);
  Values v = random_values(dtype, count, seed + 2, 0, 0.01);
  const Tensor tparam = make(param, shape, dtype), tm = make(m, shape, dtype), tv = make(v, shape, dtype);
  const auto check = [&](const std::string& when) {
    expect_close(label("adam param " + when, dtype), download(tparam), param, tolerance);
    expect_close(label("adam m " + when, dtype), download(tm), m, tolerance);
    expect_close(label("adam v " + when, dtype), download(tv), v, tolerance);
    param = download(tparam);  // the next step starts from what the device holds
    m = download(tm);
    v = download(tv);
  };
  for (std::int64_t step = 1; step <= 3; ++step) {
    const Values grad = random_values(dtype, count, seed + 3 + static_cast<std::uint32_t>(step), -1, 1);
    ops::adam_update(tparam, make(grad, shape, dtype), tm, tv, step, options);
    reference_adam(param, m, v, grad, 1.0, step, options);
    check("at step " + std::to_string(step));
  }
  const Values grad = random_values(dtype, count, seed + 9, -1, 1);
  const Tensor tgrad = make(grad, shape, dtype);
  ops::adam_update_if(make({0.0}, Shape{}, DType::f32), tparam, tgrad, tm, tv, 4, options);
  EXPECT_EQ(download(tparam), param) << "apply 0 changed the parameter";
  EXPECT_EQ(download(tm), m) << "apply 0 changed m";
  EXPECT_EQ(download(tv), v) << "apply 0 changed v";
  ops::adam_update_if(make({2.0}, Shape{}, DType::f32), tparam, tgrad, tm, tv, 4, options);
  reference_adam(param, m, v, grad, 2.0, 4, options);
  check("after apply 2");
}
TEST_P(KernelConformance, AdamF32) { check_adam(DType::f32); }
TEST_P(KernelConformance, AdamF64) {
  run_float64([&] { check_adam(DType::f64); });
}

// Mixed precision: a float32 parameter takes a float16 / bfloat16 gradient still multiplied by the loss scale,
// unscaled by the flag 1 / scale as it is read.
TEST_P(KernelConformance, OptimizersTake16BitGradients) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const Shape shape{4, 8};
  const std::size_t count = to_size(shape.num_elements());
  const double loss_scale = 1024;
  const Tolerance tolerance = tolerance_of(DType::f32);
  for (const DType grad_dtype : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(label("gradient", grad_dtype));
    Values grad = random_values(grad_dtype, count, seed, -1, 1);
    for (double& value : grad) value *= loss_scale;  // exact: a power of two
    const Tensor tgrad = make(grad, shape, grad_dtype);
    const Tensor flag = make({1.0 / loss_scale}, Shape{}, DType::f32);

    const ops::SgdOptions sgd{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true};
    Values param = random_values(DType::f32, count, seed + 1, -1, 1), velocity(count, 0.0);
    const Tensor tparam = make(param, shape, DType::f32), tvelocity = make(velocity, shape, DType::f32);
    ops::sgd_update_if(flag, tparam, tgrad, tvelocity, sgd);
    reference_sgd(param, velocity, grad, 1.0 / loss_scale, sgd, true);
    expect_close("sgd param", download(tparam), param, tolerance);
    expect_close("sgd velocity", download(tvelocity), velocity, tolerance);
    const Values plain_start = download(tparam);
    ops::sgd_update(tparam, tgrad, Tensor{}, {.learning_rate = 1e-4});  // no flag: the gradient as it is
    Values plain = plain_start, unused;
    reference_sgd(plain, unused, grad, 1.0, {.learning_rate = 1e-4}, false);
    expect_close("sgd without a flag", download(tparam), plain, tolerance);

    const ops::AdamOptions adam{.learning_rate = 0.01};
    Values adam_param = random_values(DType::f32, count, seed + 2, -1, 1), m(count, 0.0), v(count, 0.0);
    const Tensor tadam = make(adam_param, shape, DType::f32), tm = make(m, shape, DType::f32),
                 tv = make(v, shape, DType::f32);
    ops::adam_update_if(flag, tadam, tgrad, tm, tv, 1, adam);
    reference_adam(adam_param, m, v, grad, 1.0 / loss_scale, 1, adam);
    expect_close("adam param", download(tadam), adam_param, tolerance);
    expect_close("adam m", download(tm), m, tolerance);
    expect_close("adam v", download(tv), v, tolerance);
  }
}

// ---- reductions ----

// x viewed [outer, axis, inner] around `axis` of `dims`.
struct Split {
  std::int64_t outer = 1, axis = 1, inner = 1;
  std::vector<std::int64_t> kept;
};
Split split(const std::vector<std::int64_t>& dims, std::int64_t axis) {
  const auto rank = static_cast<std::int64_t>(dims.size());
  if (axis < 0) axis += rank;
  Split result;
  for (std::int64_t d = 0; d < rank; ++d) {
    if (d < axis) result.outer *= dims[to_size(d)];
    if (d == axis) result.axis = dims[to_size(d)];
    if (d > axis) result.inner *= dims[to_size(d)];
    if (d != axis) result.kept.push_back(dims[to_size(d)]);
  }
  return result;
}

const std::vector<std::vector<std::int64_t>> kReduceShapes = {{67, 129}, {5, 33, 7}, {2, 5000}};

void KernelConformance::check_reduce(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  for (const std::vector<std::int64_t>& dims : kReduceShapes) {
    const Shape shape(dims);
    const Values x = random_values(dtype, to_size(shape.num_elements()), seed, -2, 2);
    const Tensor tx = make(x, shape, dtype);
    const auto rank = static_cast<std::int64_t>(dims.size());
    for (std::int64_t axis = -1; axis < rank; ++axis) {
      const Split s = split(dims, axis);
      const std::size_t out_count = to_size(s.outer * s.inner);
      Values sum(out_count, 0.0), magnitude(out_count, 0.0), max(out_count, -kInf);
      for (std::int64_t o = 0; o < s.outer; ++o) {
        for (std::int64_t a = 0; a < s.axis; ++a) {
          for (std::int64_t i = 0; i < s.inner; ++i) {
            const double value = x[to_size((o * s.axis + a) * s.inner + i)];
            const std::size_t j = to_size(o * s.inner + i);
            sum[j] += value;
            magnitude[j] += std::fabs(value);
            max[j] = std::max(max[j], value);
          }
        }
      }
      Values mean = sum, mean_magnitude = magnitude;
      for (std::size_t j = 0; j < out_count; ++j) {
        mean[j] /= static_cast<double>(s.axis);
        mean_magnitude[j] /= static_cast<double>(s.axis);
      }
      std::ostringstream what;
      what << " of " << shape << " over axis " << axis;
      const Tensor summed = ops::reduce_sum(tx, axis);
      ASSERT_EQ(summed.shape(), Shape(s.kept)) << what.str();
      expect_close(label("sum" + what.str(), dtype), download(summed), sum, tolerance_of(dtype), &magnitude);
      expect_close(label("mean" + what.str(), dtype), download(ops::reduce_mean(tx, axis)), mean, tolerance_of(dtype),
                   &mean_magnitude);
      expect_close(label("max" + what.str(), dtype), download(ops::reduce_max(tx, axis)), max, Tolerance{});
    }
  }
}
TEST_P(KernelConformance, ReduceSumMeanMaxF32) { check_reduce(DType::f32); }
TEST_P(KernelConformance, ReduceSumMeanMaxF64) {
  run_float64([&] { check_reduce(DType::f64); });
}

void KernelConformance::check_argmax(DType dtype) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  for (const std::vector<std::int64_t>& dims : kReduceShapes) {
    const Shape shape(dims);
    const Values x = small_integers(to_size(shape.num_elements()), seed, 4);  // ties: the first index wins
    const Tensor tx = make(x, shape, dtype);
    const auto rank = static_cast<std::int64_t>(dims.size());
    for (std::int64_t axis = -1; axis < rank; ++axis) {
      const Split s = split(dims, axis);
      Values expected(to_size(s.outer * s.inner));
      for (std::int64_t o = 0; o < s.outer; ++o) {
        for (std::int64_t i = 0; i < s.inner; ++i) {
          expected[to_size(o * s.inner + i)] =
              static_cast<double>(first_argmax(x.data() + o * s.axis * s.inner + i, s.axis, s.inner));
        }
      }
      const Tensor out = ops::argmax(tx, axis);
      ASSERT_EQ(out.dtype(), DType::i64);
      ASSERT_EQ(out.shape(), Shape(s.kept));
      std::ostringstream what;
      what << "argmax of " << shape << " over axis " << axis;
      expect_close(label(what.str(), dtype), download(out), expected, Tolerance{});
    }
  }
}
TEST_P(KernelConformance, ArgMaxF32) { check_argmax(DType::f32); }
TEST_P(KernelConformance, ArgMaxF64) {
  run_float64([&] { check_argmax(DType::f64); });
}

// ---- tensors at offsets inside a larger buffer (the executor's planned views), and empty tensors ----

// Every operand a slice of a larger tensor, at byte offsets no alignment rule would pick; the rows around
// each output slice must keep their contents.
TEST_P(KernelConformance, OperandsAtOddOffsetsInsideLargerBuffers) {
  const std::uint32_t seed = test_seed();
  TRACE_SEED(seed);
  const Tolerance tolerance = tolerance_of(DType::f32);
  const std::int64_t rows = 5, cols = 7, n = 3;
  const Values x_all = random_values(DType::f32, to_size((rows + 2) * cols), seed, -2, 2);
  const Values y_all = random_values(DType::f32, to_size((rows + 3) * cols), seed + 1, -2, 2);
  const Values w_all = random_values(DType::f32, to_size((cols + 2) * n), seed + 2, -1, 1);
  const Tensor x = make(x_all, Shape{rows + 2, cols}, DType::f32).slice(1, 1 + rows);  // 28 bytes in
  const Tensor y = make(y_all, Shape{rows + 3, cols}, DType::f32).slice(3, 3 + rows);
  const Tensor w = make(w_all, Shape{cols + 2, n}, DType::f32).slice(2, 2 + cols);
  const Values xv(x_all.begin() + cols, x_all.begin() + (1 + rows) * cols);
  const Values yv(y_all.begin() + 3 * cols, y_all.begin() + (3 + rows) * cols);
  const Values wv(w_all.begin() + 2 * n, w_all.begin() + (2 + cols) * n);
  const double sentinel = -7.25;
  // An output slice of rows [1, 1 + out_rows) of a sentinel-filled [out_rows + 2, out_cols] tensor.
  const auto output = [&](std::int64_t out_rows, std::int64_t out_cols, DType dtype) {
    const Tensor whole =
        make(Values(to_size((out_rows + 2) * out_cols), sentinel), Shape{out_rows + 2, out_cols}, dtype);
    return std::pair{whole, whole.slice(1, 1 + out_rows)};
  };
  const auto check_around = [&](const std::string& what, const Tensor& whole, std::int64_t out_cols) {
    const Values all = download(whole);
    const std::size_t edge = to_size(out_cols);
    EXPECT_EQ(Values(all.begin(), all.begin() + edge), Values(edge, sentinel)) << what << " wrote before its slice";
    EXPECT_EQ(Values(all.end() - edge, all.end()), Values(edge, sentinel)) << what << " wrote after its slice";
  };

  auto [sum_whole, sum] = output(rows, cols, DType::f32);
  ops::binary_into(ops::Arithmetic::add, x, y, sum);
  Values expected(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) expected[i] = xv[i] + yv[i];
  expect_close("add of slices", download(sum), expected, tolerance);
  check_around("add", sum_whole, cols);

  auto [product_whole, product] = output(rows, n, DType::f32);
  ops::matmul_into(x, w, product);
  const MatmulReference reference = reference_matmul(xv, wv, rows, cols, n);
  expect_close("matmul of slices", download(product), reference.product, tolerance, &reference.magnitude);
  check_around("matmul", product_whole, n);

  auto [softmax_whole, softmax] = output(rows, cols, DType::f32);
  ops::softmax_into(x, softmax);
  Values probabilities(xv.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const RowShift shift = row_shift(xv, r, cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      probabilities[to_size(r * cols + c)] = std::exp(xv[to_size(r * cols + c)] - shift.max - shift.log_sum);
    }
  }
  expect_close("softmax of a slice", download(softmax), probabilities, tolerance);
  check_around("softmax", softmax_whole, cols);

  auto [half_whole, half] = output(rows, cols, DType::f16);
  ops::cast_into(x, half);
  Values rounded(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) rounded[i] = representable(xv[i], DType::f16);
  expect_close("cast of a slice", download(half), rounded, Tolerance{});
  check_around("cast", half_whole, cols);

  auto [sums_whole, sums] = output(1, cols, DType::f32);
  ops::reduce_into(x, 0, ops::Reduction::sum, sums.reshape(Shape{cols}));
  Values column_sums(to_size(cols), 0.0), magnitudes(to_size(cols), 0.0);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    column_sums[i % to_size(cols)] += xv[i];
    magnitudes[i % to_size(cols)] += std::fabs(xv[i]);
  }
  expect_close("reduce_sum into a slice", download(sums), column_sums, tolerance, &magnitudes);
  check_around("reduce_sum", sums_whole, cols);

  // The parameter slice moves; the rows around it stay.
  auto [param_whole, param] = output(rows, cols, DType::f32);
  ops::sgd_update(param, y, Tensor{}, {.learning_rate = 0.5});
  Values updated(yv.size());
  for (std::size_t i = 0; i < yv.size(); ++i) updated[i] = sentinel - 0.5 * yv[i];
  expect_close("sgd on a slice", download(param), updated, tolerance);
  check_around("sgd", param_whole, cols);

  // A non-finite value just outside the slice is not the slice's.
  Values poisoned = x_all;
  poisoned[0] = kNaN;
  poisoned[poisoned.size() - 1] = kInf;
  const Tensor inner = make(poisoned, Shape{rows + 2, cols}, DType::f32).slice(1, 1 + rows);
  EXPECT_EQ(download(ops::all_finite(inner)), Values{1.0}) << "all_finite read outside its slice";
}

// Empty tensors run and give the documented results: a sum over an empty axis is 0, its mean NaN; a product
// with an empty inner dimension is 0.
TEST_P(KernelConformance, EmptyTensors) {
  const DType f32 = DType::f32;
  const Tensor empty_rows = Tensor::empty(Shape{0, 3}, f32, device());
  ops::fill(empty_rows, 1.0);
  EXPECT_EQ(ops::add(empty_rows, make({1, 2, 3}, Shape{3}, f32)).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::relu(empty_rows).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::softmax(empty_rows).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::cast(empty_rows, DType::f16).shape(), (Shape{0, 3}));
  EXPECT_EQ(download(ops::all_finite(empty_rows)), Values{1.0});
  EXPECT_EQ(download(ops::reduce_sum(empty_rows, 0)), Values(3, 0.0));
  const Tensor empty_axis = Tensor::empty(Shape{4, 0}, f32, device());
  EXPECT_EQ(download(ops::reduce_sum(empty_axis, 1)), Values(4, 0.0));
  for (const double mean : download(ops::reduce_mean(empty_axis, 1))) EXPECT_TRUE(std::isnan(mean)) << mean;
  const Tensor product = make(Values(6, kNaN), Shape{2, 3}, f32);
  ops::matmul_into(Tensor::empty(Shape{2, 0}, f32, device()), Tensor::empty(Shape{0, 3}, f32, device()), product);
  EXPECT_EQ(download(product), Values(6, 0.0));
  device().synchronize();
}

// ---- errors ----

// A label outside [0, classes) is a task error (tp::InvalidArgument) at the next synchronisation.
TEST_P(KernelConformance, BadLabelsAreTaskErrors) {
  const Tensor predictions = make(random_values(DType::f32, 12, test_seed()), Shape{4, 3}, DType::f32);
  const Tensor too_big = make({0, 1, 3, 2}, Shape{4}, DType::i64);
  expect_invalid(
      [&] {
        (void)download(ops::correct_count(predictions, too_big));
        device().synchronize();
      },
      {"row 2", "label 3"});
  const Tensor negative = make({0, -1, 2, 2}, Shape{4}, DType::i32);
  expect_invalid(
      [&] {
        (void)download(ops::sparse_cross_entropy(predictions, negative).loss);
        device().synchronize();
      },
      {"row 1", "label -1"});
  EXPECT_EQ(download(ops::correct_count(predictions, make({0, 1, 2, 2}, Shape{4}, DType::i32))).size(), 1U)
      << "the device works after the error";
  // Several checks in flight (a device checks them after the fact, with work enqueued behind them): the bad
  // batch's error is the one reported, not hidden by the good checks around it, and work behind it is safe.
  const Tensor good = make({0, 1, 2, 2}, Shape{4}, DType::i32);
  expect_invalid(
      [&] {
        (void)ops::correct_count(predictions, good);
        (void)ops::sparse_cross_entropy(predictions, too_big);
        (void)ops::correct_count(predictions, good);
        (void)ops::sparse_cross_entropy(predictions, good);
        device().synchronize();
      },
      {"row 2", "label 3"});
  EXPECT_EQ(download(ops::correct_count(predictions, good)).size(), 1U) << "the device works after the error";
}

// Bad arguments are refused before any kernel runs, with tp::InvalidArgument naming the op, on every backend.
TEST_P(KernelConformance, InvalidArgumentsAreRefusedNamingTheOp) {
  const DType f32 = DType::f32;
  const Tensor a = make(random_values(f32, 6, test_seed()), Shape{2, 3}, f32);
  const Tensor a64 = make(Values(6, 1.0), Shape{2, 3}, DType::f64);
  const Tensor a16 = make(Values(6, 1.0), Shape{2, 3}, DType::f16);
  const Tensor ints = make(Values(6, 1.0), Shape{2, 3}, DType::i32);
  const Tensor vector2 = make({1, 2}, Shape{2}, f32);
  const Tensor vector3 = make({1, 2, 3}, Shape{3}, f32);

  expect_invalid([&] { (void)ops::add(a, a64); }, {"Add", "float64"});
  expect_invalid([&] { (void)ops::mul(ints, ints); }, {"Mul", "int32"});
  expect_invalid([&] { (void)ops::sub(a, vector2); }, {"Sub", "[2,3]", "[2]"});
  expect_invalid(
      [&] {
        ops::binary_into(ops::Arithmetic::div, a, a, Tensor::empty(Shape{3, 2}, f32, device()));
      },
      {"Div", "[3,2]"});
  expect_invalid([&] { (void)ops::scale(ints, 2.0); }, {"Scale", "int32"});
  expect_invalid([&] { ops::add_scaled(a, 1.0, a64); }, {"AddScaled"});
  expect_invalid([&] { ops::add_scaled(a, 1.0, vector3); }, {"AddScaled", "[3]"});
  expect_invalid([&] { (void)ops::broadcast_axis(a, 3, 2); }, {"BroadcastAxis", "axis"});
  expect_invalid([&] { (void)ops::scale_rows(a, vector3); }, {"ScaleRows", "[3]"});
  expect_invalid([&] { ops::cast_into(a, Tensor::empty(Shape{3, 2}, DType::f16, device())); }, {"Cast", "[3,2]"});
  expect_invalid([&] { (void)ops::all_finite(ints); }, {"AllFinite", "int32"});
  expect_invalid([&] { ops::all_finite_into(a, Tensor::empty(Shape{}, DType::f64, device())); }, {"AllFinite"});
  expect_invalid([&] { ops::fill(ints, 1.0); }, {"Fill", "int32"});
  expect_invalid([&] { ops::uniform(a, 1.0, 0.0, 7); }, {"Uniform"});
  expect_invalid([&] { ops::normal(a, 0.0, -1.0, 7); }, {"Normal"});
  expect_invalid([&] { ops::glorot_uniform(vector3, 7); }, {"GlorotUniform", "rank"});
  expect_invalid([&] { (void)ops::matmul(a, a); }, {"MatMul", "inner"});
  expect_invalid([&] { (void)ops::matmul(a, a16, {.transpose_b = true}); }, {"MatMul", "float16"});
  expect_invalid([&] { (void)ops::matmul(vector3, a); }, {"MatMul", "rank"});
  expect_invalid(
      [&] {
        ops::matmul_into(a, a, Tensor::empty(Shape{2, 2}, f32, device()), {.transpose_a = true});
      },
      {"MatMul", "[2,2]"});
  expect_invalid([&] { (void)ops::correct_count(a, a); }, {"CorrectCount", "labels"});
  expect_invalid([&] { (void)ops::correct_count(a, make({0, 1, 2}, Shape{3}, DType::i32)); }, {"CorrectCount"});
  expect_invalid([&] { (void)ops::bias_add(a, vector2); }, {"BiasAdd", "bias"});
  expect_invalid([&] { (void)ops::bias_add_grad(vector3); }, {"BiasAddGrad", "rank"});
  expect_invalid([&] { (void)ops::relu(ints); }, {"Relu", "int32"});
  expect_invalid([&] { (void)ops::relu_grad(a, a16); }, {"ReluGrad"});
  expect_invalid([&] { (void)ops::softmax(Tensor::empty(Shape{2, 2, 2}, f32, device())); }, {"Softmax", "rank"});
  expect_invalid([&] { (void)ops::log_softmax(a16); }, {"LogSoftmax", "float16"});
  expect_invalid([&] { (void)ops::sparse_cross_entropy(a, vector2); }, {"SparseCrossEntropy", "labels"});
  expect_invalid(
      [&] {
        (void)ops::sparse_cross_entropy(a, make({0, 1, 2}, Shape{3}, DType::i64));
      },
      {"SparseCrossEntropy", "labels"});
  expect_invalid([&] { (void)ops::reduce_sum(a, 2); }, {"Sum", "axis"});
  expect_invalid([&] { (void)ops::reduce_max(ints, 0); }, {"Max", "int32"});
  expect_invalid([&] { ops::reduce_into(a, 0, ops::Reduction::mean, vector2); }, {"Mean", "[2]"});
  expect_invalid([&] { ops::argmax_into(a, 0, Tensor::empty(Shape{3}, f32, device())); }, {"ArgMax", "int64"});
  expect_invalid([&] { ops::sgd_update(a, a, Tensor{}, {.momentum = 0.9}); }, {"SgdUpdate", "velocity"});
  expect_invalid([&] { ops::sgd_update(a, a64, Tensor{}, {}); }, {"SgdUpdate", "grad"});
  expect_invalid([&] { ops::sgd_update(a64, a16, Tensor{}, {}); }, {"SgdUpdate", "grad"});
  expect_invalid([&] { ops::sgd_update_if(vector2, a, a, Tensor{}, {}); }, {"SgdUpdate", "apply"});
  expect_invalid([&] { ops::adam_update(a, a, a, a, 0, {}); }, {"AdamUpdate", "step"});
  expect_invalid([&] { ops::adam_update(a, a, a64, a, 1, {}); }, {"AdamUpdate", "m"});
  expect_invalid([&] { ops::adam_update_if(make({1}, Shape{}, DType::f64), a, a, a, a, 1, {}); },
                 {"AdamUpdate", "float32 scalar"});

  // Mixed devices: every op names both.
  device::Device* other = other_device(device());
  if (other == nullptr) return;
  const std::string here = device().name(), there = other->name();
  const Tensor far = upload(random_values(f32, 6, test_seed()), Shape{2, 3}, f32, *other);
  const Tensor far_scalar = upload({1.0}, Shape{}, f32, *other);
  expect_invalid([&] { (void)ops::add(a, far); }, {"Add", here, there});
  expect_invalid([&] { (void)ops::matmul(a, far, {.transpose_b = true}); }, {"MatMul", here, there});
  expect_invalid([&] { (void)ops::bias_add(far, vector3); }, {"BiasAdd", here, there});
  expect_invalid([&] { ops::cast_into(a, Tensor::empty(Shape{2, 3}, DType::f16, *other)); }, {"Cast", here, there});
  expect_invalid([&] { ops::relu_into(a, far); }, {"Relu", here, there});
  expect_invalid(
      [&] {
        (void)ops::sparse_cross_entropy(a, upload({0, 1}, Shape{2}, DType::i32, *other));
      },
      {"SparseCrossEntropy", here, there});
  expect_invalid([&] { ops::sgd_update(a, far, Tensor{}, {}); }, {"SgdUpdate", here, there});
  expect_invalid([&] { ops::sgd_update_if(far_scalar, a, a, Tensor{}, {}); }, {"SgdUpdate", "apply"});
  expect_invalid([&] { ops::adam_update(a, a, a, far, 1, {}); }, {"AdamUpdate", here, there});
  expect_invalid(
      [&] {
        ops::reduce_into(a, 0, ops::Reduction::sum, upload({0, 0, 0}, Shape{3}, f32, *other));
      },
      {"Sum", here, there});
}

INSTANTIATE_TEST_SUITE_P(Backends, KernelConformance, ::testing::ValuesIn(backend_devices()), backend_test_name);

}  // namespace
}  // namespace tp::backend::testing
