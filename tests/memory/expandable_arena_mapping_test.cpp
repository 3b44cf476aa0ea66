// SPDX-License-Identifier: Apache-2.0
// ExpandableArena without granule sharing: which cached physical granule a granule that needs one takes, as seen
// in the mapping calls (each a system call on the host) the arena makes.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "memory/support/arena_test_options.hpp"
#include "memory/support/map_counting_memory.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/expandable_arena.hpp"

namespace {

using tp::kMiB;
using tp::memory::ExpandableArena;
using tp::memory::testing::arena_options;
using tp::memory::testing::MapCountingMemory;

constexpr std::size_t kGranule = 2 * kMiB;

std::size_t offset_of(const ExpandableArena& arena, const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) - arena.base_address();
}

TEST(ExpandableArenaMapping, AGranuleLeavesTheCachedOneALaterGranuleOfItsBlockClaims) {
  // A block over granules 0 and 1: granule 0 has no mapping (trimmed), granule 1 still maps the least recently
  // freed cached granule. Granule 0 takes the other cached one, so granule 1 keeps its mapping: one call, where
  // taking the least recently freed for granule 0 would make granule 1 map the other (two).
  MapCountingMemory memory;
  ExpandableArena arena(memory, arena_options(64 * kMiB, 64 * kMiB, false, std::uint64_t{1} << 20));
  void* x = arena.allocate(kGranule);  // granule 0
  void* y = arena.allocate(kGranule);  // 1
  void* k = arena.allocate(kGranule);  // 2
  void* t = arena.allocate(kMiB);      // 3, the tail
  arena.deallocate(x, kGranule);
  EXPECT_EQ(arena.trim(), kGranule);  // granule 0 unmapped, its physical granule released
  arena.deallocate(y, kGranule);      // cached first: the least recently freed
  arena.deallocate(k, kGranule);
  const std::size_t maps_before = memory.maps;
  // The hole [0, 6 MiB) at its low end and the extent's end both take two fresh granules: the hole wins.
  void* b = arena.allocate(2 * kGranule);
  EXPECT_EQ(offset_of(arena, b), 0U);
  EXPECT_EQ(memory.maps - maps_before, 1U);
  EXPECT_EQ(arena.committed_bytes(), 3 * kGranule);  // no new granule: both cached ones serve
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(b, 2 * kGranule);
  arena.deallocate(t, kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArenaMapping, AGranuleTakesTheCachedOneMappedAtFewerGranules) {
  // Two cached granules: the least recently freed is mapped at granules 0 and 2, the other at granule 1 alone. A
  // granule with no mapping takes the one mapped once, so a block placed at granule 0 again finds its mapping
  // there: no call. The least recently freed would have left granules 0 and 2 both to remap.
  MapCountingMemory memory;
  ExpandableArena arena(memory, arena_options(64 * kMiB, 64 * kMiB, false, std::uint64_t{1} << 20));
  void* a0 = arena.allocate(kGranule);  // granule 0
  void* a1 = arena.allocate(kGranule);  // 1
  void* a2 = arena.allocate(kGranule);  // 2
  void* a3 = arena.allocate(kGranule);  // 3
  void* t = arena.allocate(kMiB);       // 4, the tail
  arena.deallocate(a0, kGranule);
  EXPECT_EQ(arena.trim(), kGranule);  // granule 0 unmapped
  arena.deallocate(a2, kGranule);
  // The lower of the two equal holes: granule 0 takes the cached granule still mapped at granule 2.
  void* c = arena.allocate(kGranule);
  EXPECT_EQ(offset_of(arena, c), 0U);
  arena.deallocate(c, kGranule);   // cached first: mapped at granules 0 and 2
  arena.deallocate(a1, kGranule);  // then the one mapped at granule 1; the hole is [0, 6 MiB)
  // The extent's end takes one fresh granule (5, never mapped), the hole two.
  void* d = arena.allocate(3 * kMiB);
  EXPECT_EQ(offset_of(arena, d), 9 * kMiB);
  const std::size_t maps_before = memory.maps;
  void* e = arena.allocate(kGranule);  // the hole's low end, granule 0
  EXPECT_EQ(offset_of(arena, e), 0U);
  EXPECT_EQ(memory.maps, maps_before);
  EXPECT_EQ(arena.committed_bytes(), 4 * kGranule);  // d took a cached granule
  EXPECT_EQ(arena.check_invariants(), "");
  for (auto [ptr, bytes] : {std::pair{a3, kGranule}, {t, kMiB}, {d, 3 * kMiB}, {e, kGranule}}) {
    arena.deallocate(ptr, bytes);
  }
  EXPECT_EQ(arena.check_invariants(), "");
}

}  // namespace
