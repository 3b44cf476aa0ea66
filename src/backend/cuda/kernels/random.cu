// SPDX-License-Identifier: Apache-2.0
// The seeded initialisers: Philox4x32-10 streams keyed and laid out as backend/cpu/kernels/random.hpp
// (philox.cuh), so a seed gives the same values on every backend: bit for bit for uniform (exact arithmetic in
// double, rounded once), within float tolerance for normal (the device's log / sin / cos). Element i of a
// launch is element offset + i of the stream.
#include "backend/cuda/kernels/device_common.cuh"
#include "backend/cuda/kernels/philox.cuh"

namespace tp::backend::cuda::kernels {
namespace {

// low + (high - low) * unit in double, rounded once to T; nudged below high if rounding reached it.
template <typename T>
__global__ void uniform_kernel(T* out, T low, T high, std::uint64_t seed, std::uint64_t offset, std::int64_t n) {
  const double width = __dsub_rn(static_cast<double>(high), static_cast<double>(low));
  TP_GRID_STRIDE(i, n) {
    const std::uint64_t index = offset + static_cast<std::uint64_t>(i);
    const double unit = sizeof(T) == sizeof(float) ? philox_unit_f32(seed, index) : philox_unit_f64(seed, index);
    auto value = static_cast<T>(__dadd_rn(static_cast<double>(low), __dmul_rn(width, unit)));
    if (value >= high && low < high) {  // rounding reached the open end: the value just below high, in T
      if constexpr (sizeof(T) == sizeof(float)) {
        value = nextafterf(high, low);
      } else {
        value = nextafter(high, low);
      }
    }
    out[i] = value;
  }
}

// Box-Muller in double: u1 = 1 - unit(w0, w1) in (0, 1], u2 = unit(w2, w3); element 2p is r cos(2 pi u2), 2p + 1
// is r sin(2 pi u2), r = sqrt(-2 ln u1); then mean + stddev * z, rounded once to T.
template <typename T>
__global__ void normal_kernel(T* out, T mean, T stddev, std::uint64_t seed, std::uint64_t offset, std::int64_t n) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  TP_GRID_STRIDE(i, n) {
    const std::uint64_t index = offset + static_cast<std::uint64_t>(i);
    const PhiloxWords words = philox_block(seed, 1U, index, 2);
    const double u1 = __dsub_rn(1.0, philox_unit_double(words.w[0], words.w[1]));
    const double u2 = philox_unit_double(words.w[2], words.w[3]);
    const double radius = sqrt(__dmul_rn(-2.0, log(u1)));
    const double angle = __dmul_rn(kTwoPi, u2);
    const double z = __dmul_rn(radius, index % 2 == 0 ? cos(angle) : sin(angle));
    out[i] = static_cast<T>(__dadd_rn(static_cast<double>(mean), __dmul_rn(static_cast<double>(stddev), z)));
  }
}

}  // namespace

cudaError_t launch_random(Dtype dtype, int distribution, void* out, double a, double b, std::uint64_t seed,
                          std::uint64_t offset, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    if (distribution == 0) {
      uniform_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<T>(a),
                                                                 static_cast<T>(b), seed, offset, n);
    } else {
      normal_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<T>(a),
                                                                static_cast<T>(b), seed, offset, n);
    }
    return launched();
  });
}

}  // namespace tp::backend::cuda::kernels
