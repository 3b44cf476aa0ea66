// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/random.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string_view>
#include <type_traits>

#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/philox.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {
namespace {

enum class Stream : std::uint32_t { uniform = 0, normal = 1 };

// Produces the Philox block holding element `index` (blocks of `per_block` elements), computing each block
// once while consecutive elements fall into it.
class BlockSource {
 public:
  BlockSource(std::uint64_t seed, Stream stream, std::uint64_t per_block)
      : key_{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)},
        stream_(static_cast<std::uint32_t>(stream)),
        per_block_(per_block) {}

  // The block of `index`; its lane is index % per_block.
  const PhiloxCounter& block_of(std::uint64_t index) {
    const std::uint64_t block = index / per_block_;
    if (!valid_ || block != block_) {
      words_ =
          philox4x32({static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), stream_, 0}, key_);
      block_ = block;
      valid_ = true;
    }
    return words_;
  }

 private:
  const PhiloxKey key_;
  const std::uint32_t stream_;
  const std::uint64_t per_block_;
  std::uint64_t block_ = 0;
  bool valid_ = false;  // words_ holds block_'s output
  PhiloxCounter words_{};
};

// The 53 top bits of hi:lo, as a double in [0, 1).
double unit_double(std::uint32_t high, std::uint32_t low) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(high) << 32) | low;
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

void check_range(std::string_view kernel, std::int64_t n, std::uint64_t offset) {
  detail::check_size(kernel, "n", n);
  if (offset > std::numeric_limits<std::uint64_t>::max() - static_cast<std::uint64_t>(n)) {
    TP_THROW(InvalidArgument, detail::kComponent, kernel, ": offset ", offset, " + n ", n,
             " overflows the 64-bit element index");
  }
}

}  // namespace

template <typename T>
void fill(T* y, std::int64_t n, T value) {
  detail::check_size("fill", "n", n);
  detail::check_pointer("fill", "y", y, n);
  std::fill(y, y + n, value);
}

template <typename T>
void uniform(T* y, std::int64_t n, T low, T high, std::uint64_t seed, std::uint64_t offset) {
  constexpr std::string_view kKernel = "uniform";
  check_range(kKernel, n, offset);
  detail::check_pointer(kKernel, "y", y, n);
  // The width is formed in double: always finite for float bounds; for double it must be checked.
  const double width = static_cast<double>(high) - static_cast<double>(low);
  if (!std::isfinite(low) || !std::isfinite(high) || !(low <= high) || !std::isfinite(width)) {
    TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": range [low = ", low, ", high = ", high,
             ") must be finite with low <= high and a finite width");
  }
  constexpr std::uint64_t kPerBlock = std::is_same_v<T, float> ? 4 : 2;
  BlockSource source(seed, Stream::uniform, kPerBlock);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t index = offset + static_cast<std::uint64_t>(i);
    const PhiloxCounter& words = source.block_of(index);
    const std::uint64_t lane = index % kPerBlock;
    double unit = 0;
    if constexpr (std::is_same_v<T, float>) {
      unit = static_cast<double>(words[lane] >> 8) * 0x1.0p-24;
    } else {
      unit = unit_double(words[2 * lane], words[2 * lane + 1]);
    }
    auto value = static_cast<T>(static_cast<double>(low) + width * unit);
    if (value >= high && low < high) value = std::nextafter(high, low);  // rounding reached the open end
    y[i] = value;
  }
}

template <typename T>
void normal(T* y, std::int64_t n, T mean, T stddev, std::uint64_t seed, std::uint64_t offset) {
  constexpr std::string_view kKernel = "normal";
  check_range(kKernel, n, offset);
  detail::check_pointer(kKernel, "y", y, n);
  if (!std::isfinite(mean) || !std::isfinite(stddev) || stddev < 0) {
    TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": mean = ", mean, ", stddev = ", stddev,
             " must be finite with stddev >= 0");
  }
  BlockSource source(seed, Stream::normal, 2);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t index = offset + static_cast<std::uint64_t>(i);
    const PhiloxCounter& words = source.block_of(index);
    const double u1 = 1.0 - unit_double(words[0], words[1]);  // (0, 1]: log(u1) is finite
    const double u2 = unit_double(words[2], words[3]);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    const double z = index % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle);
    y[i] = static_cast<T>(static_cast<double>(mean) + static_cast<double>(stddev) * z);
  }
}

template <typename T>
void glorot_uniform(T* y, std::int64_t fan_in, std::int64_t fan_out, std::uint64_t seed) {
  constexpr std::string_view kKernel = "glorot_uniform";
  detail::check_size(kKernel, "fan_in", fan_in);
  detail::check_size(kKernel, "fan_out", fan_out);
  const std::int64_t n = detail::checked_product(kKernel, fan_in, fan_out);
  if (n == 0) return;  // also keeps 6 / (0 + 0) out of the limit
  const double limit = std::sqrt(6.0 / (static_cast<double>(fan_in) + static_cast<double>(fan_out)));
  uniform(y, n, static_cast<T>(-limit), static_cast<T>(limit), seed, 0);
}

#define TP_CPU_RANDOM_INSTANTIATE(T)                                              \
  template void fill<T>(T*, std::int64_t, T);                                     \
  template void uniform<T>(T*, std::int64_t, T, T, std::uint64_t, std::uint64_t); \
  template void normal<T>(T*, std::int64_t, T, T, std::uint64_t, std::uint64_t);  \
  template void glorot_uniform<T>(T*, std::int64_t, std::int64_t, std::uint64_t);
TP_CPU_RANDOM_INSTANTIATE(float)
TP_CPU_RANDOM_INSTANTIATE(double)

}  // namespace tp::backend::cpu
