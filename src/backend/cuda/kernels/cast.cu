// SPDX-License-Identifier: Apache-2.0
// Casts between any two of f32, f64, f16, bf16, i32, i64, u8 and bool with backend/cpu/kernels/cast.hpp's
// rules (the OpenCL backend's cast kernels follow the same table):
// - to a float: round to nearest even (+-inf beyond the range); a source wider than float narrowed to f16 /
//   bf16 in one correct rounding (cuda_fp16's double and integer conversions, or round-to-odd to float then
//   one rounding for bfloat16, which is exact);
// - float to integer: truncation toward zero, saturating at the limits, NaN to 0; integer to integer:
//   saturating;
// - to bool: value != 0 (NaN true, -0 false), stored as 0 / 1; a bool source reads as 0 / 1.
// Equal dtypes other than bool are byte copies done by the adapter (NaN payloads kept), not kernels.
#include <limits>

#include "backend/cuda/kernels/device_common.cuh"

namespace tp::backend::cuda::kernels {
namespace {

struct Bool {
  std::uint8_t value;
};

// A source element as one of five value kinds: float (f32, f16, bf16 widened exactly), double, int32, int64,
// uint8 (u8, and bool normalised to 0 / 1).
__device__ inline float value_of(float v) { return v; }
__device__ inline double value_of(double v) { return v; }
__device__ inline float value_of(__half v) { return __half2float(v); }
__device__ inline float value_of(Bf16 v) { return bf16_to_float(v.bits); }
__device__ inline std::int32_t value_of(std::int32_t v) { return v; }
__device__ inline std::int64_t value_of(std::int64_t v) { return v; }
__device__ inline std::uint8_t value_of(std::uint8_t v) { return v; }
__device__ inline std::uint8_t value_of(Bool v) { return v.value != 0 ? 1 : 0; }

// A quiet NaN of `negative`'s sign: what the CPU's conversions give for a NaN (cuda_fp16's and the
// double-to-float conversions may return the positive canonical NaN).
__device__ inline float quiet_nan(bool negative) { return __uint_as_float(negative ? 0xFFC00000U : 0x7FC00000U); }
__device__ inline float to_float(double v) { return v != v ? quiet_nan(signbit(v)) : __double2float_rn(v); }
__device__ inline __half to_half(float v) {
  return v != v ? __ushort_as_half(static_cast<unsigned short>(signbit(v) ? 0xFE00U : 0x7E00U)) : __float2half_rn(v);
}

// `value` rounded to float by round-to-odd: truncated toward zero, the last bit set if that was inexact. A
// float16 / bfloat16 rounding of the result is then the correct rounding of `value`.
__device__ inline float round_to_odd(double value) {
  const float truncated = __double2float_rz(value);
  if (value != value) return quiet_nan(signbit(value));
  if (static_cast<double>(truncated) == value) return truncated;
  return __uint_as_float(__float_as_uint(truncated) | 1U);
}
__device__ inline float round_to_odd(std::int64_t value) {
  const float truncated = __ll2float_rz(value);  // |truncated| <= |value| < 2^63: converts back exactly
  if (static_cast<std::int64_t>(truncated) == value) return truncated;
  return __uint_as_float(__float_as_uint(truncated) | 1U);
}

// Float to integer I: truncation toward zero, saturating, NaN to 0. `above` is max(I) + 1, exact in F.
template <typename I, typename F>
__device__ inline I truncate_saturating(F v) {
  constexpr F below = static_cast<F>(std::numeric_limits<I>::min());
  constexpr F above = static_cast<F>(std::numeric_limits<I>::max()) + F{1};
  if (v != v) return I{0};
  if (v <= below) return std::numeric_limits<I>::min();
  if (v >= above) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}
// Integer to integer I, saturating.
template <typename I, typename V>
__device__ inline I clamp_integer(V v) {
  constexpr auto low = static_cast<std::int64_t>(std::numeric_limits<I>::min());
  constexpr auto high = static_cast<std::int64_t>(std::numeric_limits<I>::max());
  const auto wide = static_cast<std::int64_t>(v);
  return static_cast<I>(wide < low ? low : wide > high ? high : wide);
}

template <typename To, typename V>
__device__ inline To convert(V v) {
  constexpr bool kFloat = std::is_same_v<V, float>;
  constexpr bool kDouble = std::is_same_v<V, double>;
  constexpr bool kInt = std::is_same_v<V, std::int32_t>;
  constexpr bool kLong = std::is_same_v<V, std::int64_t>;
  if constexpr (std::is_same_v<To, float>) {
    if constexpr (kFloat) return v;
    if constexpr (kDouble) return to_float(v);
    if constexpr (kInt) return __int2float_rn(v);
    if constexpr (kLong) return __ll2float_rn(v);
    if constexpr (std::is_same_v<V, std::uint8_t>) return static_cast<float>(v);
  } else if constexpr (std::is_same_v<To, double>) {
    if constexpr (kLong)
      return __ll2double_rn(v);
    else
      return static_cast<double>(v);  // exact
  } else if constexpr (std::is_same_v<To, __half>) {
    if constexpr (kFloat) return to_half(v);
    if constexpr (kDouble) return to_half(round_to_odd(v));
    if constexpr (kInt || kLong) return __float2half_rn(round_to_odd(static_cast<std::int64_t>(v)));
    if constexpr (std::is_same_v<V, std::uint8_t>) return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Bf16>) {
    if constexpr (kFloat) return Bf16{float_to_bf16(v)};
    if constexpr (kDouble) return Bf16{float_to_bf16(round_to_odd(v))};
    if constexpr (kInt || kLong) return Bf16{float_to_bf16(round_to_odd(static_cast<std::int64_t>(v)))};
    if constexpr (std::is_same_v<V, std::uint8_t>) return Bf16{float_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, Bool>) {
    return Bool{static_cast<std::uint8_t>(v != V{0} ? 1 : 0)};
  } else {  // an integer destination
    if constexpr (kFloat || kDouble)
      return truncate_saturating<To>(v);
    else
      return clamp_integer<To>(v);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* x, To* out, std::int64_t n) {
  TP_GRID_STRIDE(i, n) { out[i] = convert<To>(value_of(x[i])); }
}

template <typename Body>
cudaError_t with_storage(Dtype dtype, Body body) {
  switch (dtype) {
    case Dtype::f32: return body(static_cast<float*>(nullptr));
    case Dtype::f64: return body(static_cast<double*>(nullptr));
    case Dtype::f16: return body(static_cast<__half*>(nullptr));
    case Dtype::bf16: return body(static_cast<Bf16*>(nullptr));
    case Dtype::i32: return body(static_cast<std::int32_t*>(nullptr));
    case Dtype::i64: return body(static_cast<std::int64_t*>(nullptr));
    case Dtype::u8: return body(static_cast<std::uint8_t*>(nullptr));
    case Dtype::boolean: return body(static_cast<Bool*>(nullptr));
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_cast(Dtype from, Dtype to, const void* x, void* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_storage(from, [&](auto* source_tag) {
    using From = TP_TYPE_OF(source_tag);
    return with_storage(to, [&](auto* target_tag) {
      using To = TP_TYPE_OF(target_tag);
      cast_kernel<From, To>
          <<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const From*>(x), static_cast<To*>(out), n);
      return launched();
    });
  });
}

}  // namespace tp::backend::cuda::kernels
