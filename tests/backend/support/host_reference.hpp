// SPDX-License-Identifier: Apache-2.0
#pragma once
// Float64 (and long double) references computed on the host from the ops' documented semantics, never by
// our kernels: the Philox-4x32-10 streams of the initialisers (ops/init.hpp, with the bit layout that
// backend/cpu/kernels/random.hpp fixes), the casts of ops/cast.hpp, and matrix products with the magnitude
// sums the tolerances scale with.

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

#include "backend/support/conformance_support.hpp"
#include "tensorpool/core/dtype.hpp"

namespace tp::backend::testing {

using PhiloxWords = std::array<std::uint32_t, 4>;

// Philox4x32-10 (Salmon et al., SC 2011) with the Random123 constants; checked against its known answers in
// the suite.
inline PhiloxWords philox4x32_10(PhiloxWords counter, std::uint64_t seed) {
  auto key0 = static_cast<std::uint32_t>(seed);
  auto key1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round != 0) {
      key0 += 0x9E3779B9U;
      key1 += 0xBB67AE85U;
    }
    const std::uint64_t product0 = std::uint64_t{0xD2511F53U} * counter[0];
    const std::uint64_t product1 = std::uint64_t{0xCD9E8D57U} * counter[2];
    counter = {static_cast<std::uint32_t>(product1 >> 32) ^ counter[1] ^ key0, static_cast<std::uint32_t>(product1),
               static_cast<std::uint32_t>(product0 >> 32) ^ counter[3] ^ key1, static_cast<std::uint32_t>(product0)};
  }
  return counter;
}

// Block `block` of stream `stream` (0: uniform, 1: normal) under `seed`.
inline PhiloxWords philox_block(std::uint64_t seed, std::uint32_t stream, std::uint64_t block) {
  return philox4x32_10({static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), stream, 0}, seed);
}

// The 53 top bits of high:low as a double in [0, 1).
inline double unit_of(std::uint32_t high, std::uint32_t low) {
  return static_cast<double>(((static_cast<std::uint64_t>(high) << 32) | low) >> 11) * 0x1.0p-53;
}

// Elements offset .. offset + count - 1 of uniform(low, high, seed) in `dtype` (f32: four elements per block,
// 24 bits each; f64: two per block, 53 bits each), each low + (high - low) u in double, rounded to the dtype and
// kept below high.
inline std::vector<double> reference_uniform(DType dtype, std::size_t count, double low, double high,
                                             std::uint64_t seed, std::uint64_t offset = 0) {
  const bool single = dtype == DType::f32;
  const double low_t = representable(low, dtype);
  const double high_t = representable(high, dtype);
  const double width = high_t - low_t;
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t index = offset + i;
    const std::uint64_t per_block = single ? 4 : 2;
    const PhiloxWords words = philox_block(seed, 0, index / per_block);
    const std::uint64_t lane = index % per_block;
    const double unit =
        single ? static_cast<double>(words[lane] >> 8) * 0x1.0p-24 : unit_of(words[2 * lane], words[2 * lane + 1]);
    double value = representable(low_t + width * unit, dtype);
    if (value >= high_t && low_t < high_t) {
      value = single ? static_cast<double>(std::nextafter(static_cast<float>(high_t), static_cast<float>(low_t)))
                     : std::nextafter(high_t, low_t);
    }
    values[i] = value;
  }
  return values;
}

// Elements of normal(mean, stddev, seed): Box-Muller in double over blocks of two elements, u1 in (0, 1] from
// words 0-1 and u2 in [0, 1) from words 2-3; even elements take the cosine, odd ones the sine.
inline std::vector<double> reference_normal(DType dtype, std::size_t count, double mean, double stddev,
                                            std::uint64_t seed, std::uint64_t offset = 0) {
  const double mean_t = representable(mean, dtype);
  const double stddev_t = representable(stddev, dtype);
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t index = offset + i;
    const PhiloxWords words = philox_block(seed, 1, index / 2);
    const double u1 = 1.0 - unit_of(words[0], words[1]);
    const double u2 = unit_of(words[2], words[3]);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    const double z = index % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle);
    values[i] = representable(mean_t + stddev_t * z, dtype);
  }
  return values;
}

// Keras' GlorotUniform bound for a [fan_in, fan_out] kernel.
inline double glorot_limit(std::int64_t fan_in, std::int64_t fan_out) {
  return std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
}

// ops/cast.hpp's conversion of one exact source value (a bool source already normalised to 0 / 1) to `to`:
// bool is value != 0 (NaN too); to an integer truncates toward zero, saturates, NaN -> 0; to a float rounds to
// nearest even once from the exact value.
inline long double reference_cast(long double value, DType to) {
  const auto saturate = [&](long double low, long double high) -> long double {
    if (std::isnan(value)) return 0;
    return std::clamp(std::trunc(value), low, high);
  };
  switch (to) {
    case DType::boolean: return value != 0 ? 1 : 0;
    case DType::u8: return saturate(0, 255);
    case DType::i32:
      return saturate(std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max());
    case DType::i64:
      return saturate(static_cast<long double>(std::numeric_limits<std::int64_t>::min()),
                      static_cast<long double>(std::numeric_limits<std::int64_t>::max()));
    case DType::f32: return static_cast<float>(value);
    case DType::f64: return static_cast<double>(value);
    case DType::f16: return value_of_format(round_to_format(value, kFloat16), kFloat16);
    case DType::bf16: return value_of_format(round_to_format(value, kBFloat16), kBFloat16);
  }
  return 0;
}

// out[m, n] = a[m, k] b[k, n] in double (row-major, untransposed), and the magnitude sums |a| |b| per element.
struct MatmulReference {
  std::vector<double> product;
  std::vector<double> magnitude;
};

inline MatmulReference reference_matmul(const std::vector<double>& a, const std::vector<double>& b, std::int64_t m,
                                        std::int64_t k, std::int64_t n) {
  MatmulReference result{std::vector<double>(static_cast<std::size_t>(m * n), 0.0),
                         std::vector<double>(static_cast<std::size_t>(m * n), 0.0)};
  for (std::int64_t i = 0; i < m; ++i) {
    double* product = result.product.data() + i * n;
    double* magnitude = result.magnitude.data() + i * n;
    for (std::int64_t inner = 0; inner < k; ++inner) {
      const double left = a[static_cast<std::size_t>(i * k + inner)];
      const double* right = b.data() + inner * n;
      for (std::int64_t j = 0; j < n; ++j) {
        product[j] += left * right[j];
        magnitude[j] += std::fabs(left * right[j]);
      }
    }
  }
  return result;
}

// The [rows, cols] row-major matrix stored transposed ([cols, rows]).
inline std::vector<double> transposed(const std::vector<double>& matrix, std::int64_t rows, std::int64_t cols) {
  std::vector<double> result(matrix.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      result[static_cast<std::size_t>(c * rows + r)] = matrix[static_cast<std::size_t>(r * cols + c)];
    }
  }
  return result;
}

}  // namespace tp::backend::testing
