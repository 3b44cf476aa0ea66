// SPDX-License-Identifier: Apache-2.0
#pragma once
// Philox4x32 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
// counter-based generator behind TensorFlow's and JAX's stateless random ops. It is a keyed bijection of a
// 128-bit counter: output = philox(counter, key), with no state, so element i of a random tensor can be
// computed from (key, i) alone, in any order, on any number of threads.
//
// Each round multiplies two counter words by fixed constants, takes the 64-bit products' high and low
// halves, and mixes them with the other two words and the key; between rounds the key is bumped by the Weyl
// constants (golden ratio and sqrt(3) - 1, in 32-bit fixed point). Ten rounds is the standard strength
// (Philox4x32-10); it matches the Random123 known-answer vectors (tests/backend/cpu/cpu_philox_test.cpp).

#include <array>
#include <cstdint>

namespace tp::backend::cpu {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

inline constexpr int kPhiloxRounds = 10;

namespace detail {

inline constexpr std::uint32_t kPhiloxMultiplier0 = 0xD2511F53U;
inline constexpr std::uint32_t kPhiloxMultiplier1 = 0xCD9E8D57U;
inline constexpr std::uint32_t kPhiloxWeyl0 = 0x9E3779B9U;
inline constexpr std::uint32_t kPhiloxWeyl1 = 0xBB67AE85U;

constexpr PhiloxCounter philox_round(const PhiloxCounter& counter, const PhiloxKey& key) {
  const std::uint64_t product0 = std::uint64_t{kPhiloxMultiplier0} * counter[0];
  const std::uint64_t product1 = std::uint64_t{kPhiloxMultiplier1} * counter[2];
  const auto high0 = static_cast<std::uint32_t>(product0 >> 32);
  const auto low0 = static_cast<std::uint32_t>(product0);
  const auto high1 = static_cast<std::uint32_t>(product1 >> 32);
  const auto low1 = static_cast<std::uint32_t>(product1);
  return {high1 ^ counter[1] ^ key[0], low1, high0 ^ counter[3] ^ key[1], low0};
}

}  // namespace detail

// Philox4x32 with `Rounds` rounds (7 and 10 have published known answers; use the default).
template <int Rounds = kPhiloxRounds>
constexpr PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key) {
  static_assert(Rounds >= 1);
  for (int round = 0; round < Rounds; ++round) {
    if (round != 0) {  // key schedule: bumped before every round but the first
      key[0] += detail::kPhiloxWeyl0;
      key[1] += detail::kPhiloxWeyl1;
    }
    counter = detail::philox_round(counter, key);
  }
  return counter;
}

}  // namespace tp::backend::cpu
