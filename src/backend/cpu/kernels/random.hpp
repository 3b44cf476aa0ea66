// SPDX-License-Identifier: Apache-2.0
#pragma once
// Initialisers: constant fill and counter-based random numbers from Philox4x32-10 (philox.hpp).
//
// Reproducibility contract: element i of a call with (seed, offset) depends only on (seed, offset + i, the
// distribution and T), never on n, chunking or threads. So filling [0, n) in one call gives the same bytes
// as filling [0, k) and then [k, n) with offset k. Element indices are 64-bit; offset + n must not overflow.
//
// Bit layout (stable; changing it changes every seeded initialisation): the key is the seed as two 32-bit
// words {low, high}; the counter is {block low, block high, stream, 0}, with stream 0 for uniform and 1 for
// normal, so the two never reuse each other's bits.
//   uniform<float>:  4 elements per block, one word each: u = (word >> 8) * 2^-24, in [0, 1).
//   uniform<double>: 2 elements per block, two words each: u = (53 top bits of hi:lo) * 2^-53, in [0, 1).
//   normal:          2 elements per block by Box-Muller in double: u1 in (0, 1] from words 0-1, u2 in [0, 1)
//                    from words 2-3, r = sqrt(-2 ln u1), element 2p is r cos(2 pi u2), element 2p + 1 is
//                    r sin(2 pi u2); then mean + stddev * z, rounded to T.
// uniform maps u to low + (high - low) * u, computed in double and rounded to T, nudged below high if
// rounding reaches it: results lie in [low, high) when low < high, and equal low when low == high.

#include <cstdint>

namespace tp::backend::cpu {

template <typename T>
void fill(T* y, std::int64_t n, T value);

// Requires finite low <= high with a finite high - low; throws tp::InvalidArgument otherwise.
template <typename T>
void uniform(T* y, std::int64_t n, T low, T high, std::uint64_t seed, std::uint64_t offset);

// Requires finite mean and finite stddev >= 0.
template <typename T>
void normal(T* y, std::int64_t n, T mean, T stddev, std::uint64_t seed, std::uint64_t offset);

// Keras's GlorotUniform for a row-major [fan_in, fan_out] kernel: uniform in [-limit, limit) with
// limit = sqrt(6 / (fan_in + fan_out)), offset 0. Either fan == 0 means an empty kernel (nothing written).
template <typename T>
void glorot_uniform(T* y, std::int64_t fan_in, std::int64_t fan_out, std::uint64_t seed);

#define TP_CPU_RANDOM_DECLARE(T)                                                         \
  extern template void fill<T>(T*, std::int64_t, T);                                     \
  extern template void uniform<T>(T*, std::int64_t, T, T, std::uint64_t, std::uint64_t); \
  extern template void normal<T>(T*, std::int64_t, T, T, std::uint64_t, std::uint64_t);  \
  extern template void glorot_uniform<T>(T*, std::int64_t, std::int64_t, std::uint64_t);
TP_CPU_RANDOM_DECLARE(float)
TP_CPU_RANDOM_DECLARE(double)
#undef TP_CPU_RANDOM_DECLARE

}  // namespace tp::backend::cpu
