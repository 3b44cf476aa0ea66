// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/cast.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/half_convert.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu {
namespace {

constexpr std::string_view kKernel = "cast";
constexpr std::size_t kDTypeCount = 8;

// A bool element as stored: one byte, read as (byte != 0) so that no byte pattern is UB to load.
struct BoolByte {
  std::uint8_t value;
};

// The C++ type each DType is stored as; the sizes below are tp::size_of's.
template <DType D>
struct StorageOf;
template <>
struct StorageOf<DType::f32> {
  using type = float;
};
template <>
struct StorageOf<DType::f16> {
  using type = Half;
};
template <>
struct StorageOf<DType::bf16> {
  using type = BFloat16;
};
template <>
struct StorageOf<DType::f64> {
  using type = double;
};
template <>
struct StorageOf<DType::i32> {
  using type = std::int32_t;
};
template <>
struct StorageOf<DType::i64> {
  using type = std::int64_t;
};
template <>
struct StorageOf<DType::u8> {
  using type = std::uint8_t;
};
template <>
struct StorageOf<DType::boolean> {
  using type = BoolByte;
};
template <DType D>
using Storage = typename StorageOf<D>::type;
static_assert(sizeof(Storage<DType::f16>) == 2 && sizeof(Storage<DType::bf16>) == 2 &&
              sizeof(Storage<DType::boolean>) == 1 && sizeof(Storage<DType::f32>) == 4 &&
              sizeof(Storage<DType::f64>) == 8);

// What a stored element means, in a type C++ computes with: 16-bit floats widen (exactly) to float,
// bools become bool, everything else is itself.
template <typename Stored>
auto load(Stored stored) {
  if constexpr (std::is_same_v<Stored, Half> || std::is_same_v<Stored, BFloat16>) {
    return static_cast<float>(stored);
  } else if constexpr (std::is_same_v<Stored, BoolByte>) {
    return stored.value != 0;
  } else {
    return stored;
  }
}

// `value` rounded to float by round-to-odd: truncated toward zero, and if that dropped anything, the last
// mantissa bit set. A later round-to-nearest-even to a format at least 2 bits narrower (float16: 11 bits,
// bfloat16: 8, against float's 24) then equals one correct rounding of `value` (Boldo & Melquiond, 2008).
float round_to_odd(double value) {
  const auto nearest = static_cast<float>(value);  // IEEE: beyond the float range this is +-inf
  if (std::isnan(value) || static_cast<double>(nearest) == value) return nearest;
  const float truncated =
      std::fabs(static_cast<double>(nearest)) > std::fabs(value) ? std::nextafter(nearest, 0.0F) : nearest;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(truncated) | 1U);
}

float round_to_odd(std::int64_t value) {
  // The magnitude as uint64 (well defined for INT64_MIN too).
  const std::uint64_t magnitude =
      value < 0 ? ~static_cast<std::uint64_t>(value) + 1 : static_cast<std::uint64_t>(value);
  const auto width = static_cast<int>(std::bit_width(magnitude));
  if (width <= std::numeric_limits<float>::digits) return static_cast<float>(value);  // exact
  const int shift = width - std::numeric_limits<float>::digits;
  const bool dropped = (magnitude & ((std::uint64_t{1} << shift) - 1)) != 0;
  const std::uint64_t kept = (magnitude >> shift) | (dropped ? 1U : 0U);
  const float result = std::ldexp(static_cast<float>(kept), shift);  // exact: kept < 2^24
  return value < 0 ? -result : result;
}

// A numeric value as a float that the 16-bit conversions can round once more without double rounding.
float to_float_for_16bit(float value) { return value; }
float to_float_for_16bit(double value) { return round_to_odd(value); }
float to_float_for_16bit(std::int32_t value) { return round_to_odd(static_cast<std::int64_t>(value)); }
float to_float_for_16bit(std::int64_t value) { return round_to_odd(value); }
float to_float_for_16bit(std::uint8_t value) { return static_cast<float>(value); }  // exact

template <typename Integer, typename Floating>
Integer saturate_from_floating(Floating value) {
  using Limits = std::numeric_limits<Integer>;
  if (std::isnan(value)) return 0;
  const double truncated = std::trunc(static_cast<double>(value));
  // min() is 0 or -2^k, exact in double. max() is 2^k - 1, which rounds up to 2^k for int64, so ">=" is the
  // right test for both exact and rounded limits: everything below it fits.
  if (truncated <= static_cast<double>(Limits::min())) return Limits::min();
  if (truncated >= static_cast<double>(Limits::max())) return Limits::max();
  return static_cast<Integer>(truncated);
}

template <typename Integer, typename Source>
Integer saturate_from_integer(Source value) {
  using Limits = std::numeric_limits<Integer>;
  if (std::cmp_less(value, Limits::min())) return Limits::min();
  if (std::cmp_greater(value, Limits::max())) return Limits::max();
  return static_cast<Integer>(value);
}

// One loaded value to one stored destination element, by the rules in cast.hpp.
template <typename Stored, typename Value>
Stored convert(Value value) {
  if constexpr (std::is_same_v<Stored, BoolByte>) {
    return BoolByte{static_cast<std::uint8_t>(value != Value{0} ? 1 : 0)};  // NaN != 0 holds: true
  } else if constexpr (std::is_same_v<Value, bool>) {
    return convert<Stored>(static_cast<std::uint8_t>(value ? 1 : 0));
  } else if constexpr (std::is_same_v<Stored, float> || std::is_same_v<Stored, double>) {
    return static_cast<Stored>(value);  // round to nearest even (IEEE), +-inf past the float range
  } else if constexpr (std::is_same_v<Stored, Half> || std::is_same_v<Stored, BFloat16>) {
    return Stored::from_float(to_float_for_16bit(value));
  } else if constexpr (std::is_floating_point_v<Value>) {
    return saturate_from_floating<Stored>(value);
  } else {
    return saturate_from_integer<Stored>(value);
  }
}

// The conversions between float32 and the 16-bit floats (mixed precision's per-step casts of the weights
// and the batch), split over the intra-op threads: element-wise, so the bits do not depend on the split.
void convert_in_chunks(void (*convert)(const void*, void*, std::int64_t), std::int64_t src_size, std::int64_t dst_size,
                       const void* src, void* dst, std::int64_t n) {
  parallel_for(n, kStreamingGrain, [&](std::int64_t begin, std::int64_t end) {
    convert(static_cast<const unsigned char*>(src) + begin * src_size,
            static_cast<unsigned char*>(dst) + begin * dst_size, end - begin);
  });
}

template <DType From, DType To>
void cast_elements(const void* src, void* dst, std::int64_t n) {
  using Source = Storage<From>;
  using Destination = Storage<To>;
  const auto count = static_cast<std::size_t>(n);
  if constexpr (From == To && To != DType::boolean) {
    std::memmove(dst, src, count * sizeof(Source));
  } else if constexpr (From == DType::f32 && To == DType::f16) {
    // Mixed precision's hot paths (half_convert.hpp): the same bits as convert(), vectorised.
    convert_in_chunks(detail::float_to_half, 4, 2, src, dst, n);
  } else if constexpr (From == DType::f16 && To == DType::f32) {
    convert_in_chunks(detail::half_to_float, 2, 4, src, dst, n);
  } else if constexpr (From == DType::f32 && To == DType::bf16) {
    convert_in_chunks(detail::float_to_bfloat16, 4, 2, src, dst, n);
  } else if constexpr (From == DType::bf16 && To == DType::f32) {
    convert_in_chunks(detail::bfloat16_to_float, 2, 4, src, dst, n);
  } else {
    // Element-wise memcpy: no alignment or aliasing assumptions about the buffers (it compiles to plain
    // loads and stores), and in-place casts between equal sizes read each element before overwriting it.
    const auto* in = static_cast<const unsigned char*>(src);
    auto* out = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
      Source stored;
      std::memcpy(&stored, in + i * sizeof(Source), sizeof(Source));
      const Destination result = convert<Destination>(load(stored));
      std::memcpy(out + i * sizeof(Destination), &result, sizeof(Destination));
    }
  }
}

using CastFunction = void (*)(const void*, void*, std::int64_t);
using CastRow = std::array<CastFunction, kDTypeCount>;

template <std::size_t From, std::size_t... To>
constexpr CastRow make_row(std::index_sequence<To...>) {
  return CastRow{&cast_elements<static_cast<DType>(From), static_cast<DType>(To)>...};
}

template <std::size_t... From>
constexpr std::array<CastRow, kDTypeCount> make_table(std::index_sequence<From...>) {
  return {make_row<From>(std::make_index_sequence<kDTypeCount>{})...};
}

// kCastTable[from][to], indexed by the DType enumerator values (0..7, in declaration order).
constexpr std::array<CastRow, kDTypeCount> kCastTable = make_table(std::make_index_sequence<kDTypeCount>{});

std::size_t dtype_index(std::string_view name, DType dtype) {
  const auto index = static_cast<std::size_t>(dtype);
  if (index >= kDTypeCount) {
    TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": ", name, " = ", index, " is not a valid dtype");
  }
  return index;
}

}  // namespace

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n) {
  const std::size_t from = dtype_index("src_dtype", src_dtype);
  const std::size_t to = dtype_index("dst_dtype", dst_dtype);
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "src", src, n);
  detail::check_pointer(kKernel, "dst", dst, n);
  if (n == 0) return;
  kCastTable[from][to](src, dst, n);
}

}  // namespace tp::backend::cpu
