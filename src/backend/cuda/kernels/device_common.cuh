// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the .cu files only (nvcc): storage types of the float dtypes, their exact widening and their
// round-to-nearest-even stores, the grid-stride index and the launch status.
//
// bfloat16 conversions work on the bits, exactly as backend/cpu/kernels/half_convert.hpp: widening is exact
// (a NaN gets its quiet bit), narrowing rounds to nearest even and keeps a NaN's sign and top payload bits.
// float16 uses cuda_fp16.h's round-to-nearest-even conversions.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels/geometry.cuh"
#include "backend/cuda/kernels/launch.cuh"

namespace tp::backend::cuda::kernels {

// bfloat16 storage: the 16 bits.
struct Bf16 {
  std::uint16_t bits;
};

__device__ inline float bf16_to_float(std::uint16_t value) {
  const std::uint32_t bits = value;
  const std::uint32_t quiet = (bits & 0x7FFFU) > 0x7F80U ? 0x0040U : 0U;
  return __uint_as_float((bits | quiet) << 16);
}

__device__ inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  const std::uint32_t rounded = (bits + 0x7FFFU + ((bits >> 16) & 1U)) >> 16;
  const std::uint32_t nan = (bits >> 16) | 0x0040U;
  return static_cast<std::uint16_t>((bits & 0x7FFFFFFFU) > 0x7F800000U ? nan : rounded);
}

// The compute type of a storage type: float for the 16-bit dtypes, itself otherwise.
template <typename S>
struct ComputeOf {
  using type = S;
};
template <>
struct ComputeOf<__half> {
  using type = float;
};
template <>
struct ComputeOf<Bf16> {
  using type = float;
};
template <typename S>
using Compute = typename ComputeOf<S>::type;

__device__ inline float load(const float* p, std::int64_t i) { return p[i]; }
__device__ inline double load(const double* p, std::int64_t i) { return p[i]; }
__device__ inline float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }
__device__ inline float load(const Bf16* p, std::int64_t i) { return bf16_to_float(p[i].bits); }

__device__ inline void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ inline void store(double* p, std::int64_t i, double v) { p[i] = v; }
__device__ inline void store(__half* p, std::int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ inline void store(Bf16* p, std::int64_t i, float v) { p[i].bits = float_to_bf16(v); }

// A computed value rounded to the storage type and widened back (identity for f32 and f64).
template <typename S>
__device__ inline Compute<S> round_to(Compute<S> v) {
  return v;
}
template <>
__device__ inline float round_to<__half>(float v) {
  return __half2float(__float2half_rn(v));
}
template <>
__device__ inline float round_to<Bf16>(float v) {
  return bf16_to_float(float_to_bf16(v));
}

// IEEE operations rounded to nearest even, never contracted into fused multiply-adds (nvcc contracts a * b + c
// by default): the CPU kernels' plain arithmetic, bit for bit.
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ inline double sqrt_rn(double a) { return __dsqrt_rn(a); }

// The first index of this thread and the grid's stride, for grid-stride loops over 64-bit n.
__device__ inline std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

#define TP_GRID_STRIDE(i, n) for (std::int64_t i = first_index(); i < (n); i += grid_stride())

// The type a with_* body is called for: `[&](auto* tag) { using T = TP_TYPE_OF(tag); ... }`.
#define TP_TYPE_OF(tag) std::remove_pointer_t<decltype(tag)>

// The status of the launch just made.
inline cudaError_t launched() { return cudaGetLastError(); }

// Calls `body` with a null pointer of the storage type of `dtype` among the float dtypes; cudaErrorInvalidValue
// for any other dtype (the ops never pass one).
template <typename Body>
cudaError_t with_float_storage(Dtype dtype, Body body) {
  switch (dtype) {
    case Dtype::f32: return body(static_cast<float*>(nullptr));
    case Dtype::f64: return body(static_cast<double*>(nullptr));
    case Dtype::f16: return body(static_cast<__half*>(nullptr));
    case Dtype::bf16: return body(static_cast<Bf16*>(nullptr));
    default: return cudaErrorInvalidValue;
  }
}
// The same for f32 and f64 only.
template <typename Body>
cudaError_t with_wide_float(Dtype dtype, Body body) {
  switch (dtype) {
    case Dtype::f32: return body(static_cast<float*>(nullptr));
    case Dtype::f64: return body(static_cast<double*>(nullptr));
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tp::backend::cuda::kernels
