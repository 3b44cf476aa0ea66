// SPDX-License-Identifier: Apache-2.0
// Philox4x32 against the known-answer vectors of the Random123 distribution (tests/kat_vectors of
// github.com/DEShawResearch/random123; columns: counter[4], key[2] -> output[4]), for 10 rounds (the
// generator the initialisers use) and 7 rounds (which pins down the key schedule round by round).

#include "backend/cpu/kernels/philox.hpp"

#include <gtest/gtest.h>

#include <set>

namespace {

using tp::backend::cpu::philox4x32;
using tp::backend::cpu::PhiloxCounter;
using tp::backend::cpu::PhiloxKey;

struct KnownAnswer {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};

constexpr KnownAnswer kTenRounds[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

constexpr KnownAnswer kSevenRounds[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
};

// The generator is constexpr: the first vector is checked at compile time as well.
static_assert(philox4x32(kTenRounds[0].counter, kTenRounds[0].key) == kTenRounds[0].expected);

TEST(Philox, MatchesRandom123KnownAnswersForTenRounds) {
  for (const KnownAnswer& answer : kTenRounds) {
    EXPECT_EQ(philox4x32(answer.counter, answer.key), answer.expected) << std::hex << answer.counter[0];
    EXPECT_EQ(philox4x32<10>(answer.counter, answer.key), answer.expected);
  }
}

TEST(Philox, MatchesRandom123KnownAnswersForSevenRounds) {
  for (const KnownAnswer& answer : kSevenRounds) {
    EXPECT_EQ(philox4x32<7>(answer.counter, answer.key), answer.expected) << std::hex << answer.counter[0];
  }
}

TEST(Philox, DistinctCountersAndKeysGiveDistinctBlocks) {
  // A bijection of the counter for a fixed key: consecutive counters never collide.
  std::set<PhiloxCounter> seen;
  for (std::uint32_t i = 0; i < 4096; ++i) seen.insert(philox4x32({i, 0, 0, 0}, {1, 2}));
  EXPECT_EQ(seen.size(), 4096U);
  EXPECT_NE(philox4x32({0, 0, 0, 0}, {1, 0}), philox4x32({0, 0, 0, 0}, {0, 1}));
}

}  // namespace
