// SPDX-License-Identifier: Apache-2.0
#pragma once
// Philox4x32-10 and the random streams' bit layout of backend/cpu/kernels/philox.hpp and random.hpp, as
// functions callable on the device and the host (the host tests compare them with the CPU's, bit for bit).
// Plain C++ with __host__ __device__ under nvcc.

#include <cstdint>

#if defined(__CUDACC__)
#define TP_CUDA_HOST_DEVICE __host__ __device__
#else
#define TP_CUDA_HOST_DEVICE
#endif

namespace tp::backend::cuda::kernels {

struct PhiloxWords {
  std::uint32_t w[4];
};

// Philox4x32 with 10 rounds: counter {c0, c1, c2, c3}, key {k0, k1}; the key is bumped by the Weyl constants
// before every round but the first.
TP_CUDA_HOST_DEVICE inline PhiloxWords philox4x32_10(PhiloxWords counter, std::uint32_t key0, std::uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round != 0) {
      key0 += 0x9E3779B9U;
      key1 += 0xBB67AE85U;
    }
    const std::uint64_t product0 = std::uint64_t{0xD2511F53U} * counter.w[0];
    const std::uint64_t product1 = std::uint64_t{0xCD9E8D57U} * counter.w[2];
    const auto high0 = static_cast<std::uint32_t>(product0 >> 32);
    const auto low0 = static_cast<std::uint32_t>(product0);
    const auto high1 = static_cast<std::uint32_t>(product1 >> 32);
    const auto low1 = static_cast<std::uint32_t>(product1);
    counter = PhiloxWords{{high1 ^ counter.w[1] ^ key0, low1, high0 ^ counter.w[3] ^ key1, low0}};
  }
  return counter;
}

// The block holding element `index` of stream `stream` (0 uniform, 1 normal) with `per_block` elements a block:
// counter {block low, block high, stream, 0}, key {seed low, seed high}.
TP_CUDA_HOST_DEVICE inline PhiloxWords philox_block(std::uint64_t seed, std::uint32_t stream, std::uint64_t index,
                                                    std::uint64_t per_block) {
  const std::uint64_t block = index / per_block;
  return philox4x32_10(
      PhiloxWords{{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), stream, 0U}},
      static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// The 53 top bits of high:low as a double in [0, 1).
TP_CUDA_HOST_DEVICE inline double philox_unit_double(std::uint32_t high, std::uint32_t low) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(high) << 32) | low;
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// uniform<float>'s unit value of element `index`: 4 elements a block, (word >> 8) * 2^-24.
TP_CUDA_HOST_DEVICE inline double philox_unit_f32(std::uint64_t seed, std::uint64_t index) {
  const PhiloxWords words = philox_block(seed, 0U, index, 4);
  return static_cast<double>(words.w[index % 4] >> 8) * 0x1.0p-24;
}

// uniform<double>'s unit value of element `index`: 2 elements a block, two words each.
TP_CUDA_HOST_DEVICE inline double philox_unit_f64(std::uint64_t seed, std::uint64_t index) {
  const PhiloxWords words = philox_block(seed, 0U, index, 2);
  const std::uint64_t lane = index % 2;
  return philox_unit_double(words.w[2 * lane], words.w[2 * lane + 1]);
}

}  // namespace tp::backend::cuda::kernels
