// SPDX-License-Identifier: Apache-2.0
// ExpandableArena: accounting, growth without contiguous physical holes, trim, limits, OOM recovery, a
// randomized property test (invariants after every operation, contents never overlap or vanish) and threads.
#include "tensorpool/memory/expandable_arena.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memory/support/arena_test_options.hpp"
#include "memory/support/failing_new.hpp"
#include "memory/support/map_counting_memory.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"
#include "tensorpool/memory/virtual_memory.hpp"

namespace {

using tp::test::FailAllocations;

using tp::kKiB;
using tp::kMiB;
using tp::memory::ArenaOptions;
using tp::memory::ExpandableArena;
using tp::memory::HostVirtualMemory;
using tp::memory::SimDeviceMemory;
using tp::memory::testing::arena_options;
using tp::memory::testing::MapCountingMemory;

constexpr std::size_t kGranule = 2 * kMiB;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Writes a recognisable word at the start, the end and every 4 KiB of a block; verify reads them back.
void fill(void* ptr, std::size_t bytes, std::uint64_t seed) {
  auto* data = static_cast<unsigned char*>(ptr);
  const std::size_t words = (bytes - 1) / sizeof(std::uint64_t);  // the last byte is written on its own
  for (std::size_t word = 0; word < words; word += 512) {
    const std::uint64_t value = seed * 0x9e3779b97f4a7c15ull + word;
    std::memcpy(data + word * sizeof value, &value, sizeof value);
  }
  data[bytes - 1] = static_cast<unsigned char>(seed);
}

bool verify(const void* ptr, std::size_t bytes, std::uint64_t seed) {
  const auto* data = static_cast<const unsigned char*>(ptr);
  const std::size_t words = (bytes - 1) / sizeof(std::uint64_t);  // the last byte is written on its own
  for (std::size_t word = 0; word < words; word += 512) {
    std::uint64_t value = 0;
    std::memcpy(&value, data + word * sizeof value, sizeof value);
    if (value != seed * 0x9e3779b97f4a7c15ull + word) return false;
  }
  return data[bytes - 1] == static_cast<unsigned char>(seed);
}

TEST(ExpandableArena, AllocatesAlignedBlocksAndReportsThem) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(64 * kMiB), "arena");
  EXPECT_EQ(arena.max_alignment(), 256u);
  EXPECT_GE(arena.reserved_range_bytes(), 256 * kMiB);
  void* a = arena.allocate(100);
  void* b = arena.allocate(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 256);
  std::memset(b, 7, 1000);
  const auto blocks = arena.blocks();
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[1].offset, 256u);
  EXPECT_EQ(blocks[1].size, 1024u);
  EXPECT_EQ(blocks[1].requested, 1000u);
  EXPECT_TRUE(blocks[1].in_use);
  const auto stats = arena.stats();
  EXPECT_EQ(stats.bytes_in_use, 1280u);
  EXPECT_EQ(stats.bytes_requested, 1100u);
  EXPECT_EQ(stats.bytes_reserved, kGranule);
  EXPECT_EQ(stats.bytes_limit, 64 * kMiB);
  EXPECT_THROW((void)arena.allocate(10, 512), tp::InvalidArgument);
  arena.deallocate(a, 100);
  EXPECT_EQ(arena.blocks().size(), 2u);  // a hole before b
  arena.deallocate(b, 1000);
  EXPECT_TRUE(arena.blocks().empty());
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArena, RejectsAZeroLimit) {
  EXPECT_THROW(ExpandableArena(std::make_unique<HostVirtualMemory>(), arena_options(0)), tp::InvalidArgument);
}

TEST(ExpandableArena, CommitsTouchedGranulesAndDecommitsFreeOnes) {
  HostVirtualMemory memory;
  {
    ExpandableArena arena(memory, arena_options(64 * kMiB, 0));
    void* a = arena.allocate(3 * kMiB);  // granules 0, 1
    EXPECT_EQ(arena.committed_bytes(), 4 * kMiB);
    EXPECT_EQ(memory.committed_bytes(), 4 * kMiB);
    void* b = arena.allocate(kMiB);  // [3, 4) MiB: granule 1, already committed
    EXPECT_EQ(arena.committed_bytes(), 4 * kMiB);
    std::memset(a, 1, 3 * kMiB);
    std::memset(b, 2, kMiB);
    auto stats = arena.stats();
    EXPECT_EQ(stats.upstream_allocs, 2u);  // one physical granule each
    arena.deallocate(a, 3 * kMiB);         // granule 0 wholly free: decommitted (threshold 0)
    EXPECT_EQ(arena.committed_bytes(), 2 * kMiB);
    EXPECT_EQ(memory.committed_bytes(), 2 * kMiB);
    EXPECT_EQ(arena.stats().upstream_frees, 1u);
    arena.deallocate(b, kMiB);
    EXPECT_EQ(arena.committed_bytes(), 0u);
    stats = arena.stats();
    EXPECT_EQ(stats.peak_bytes_reserved, 4 * kMiB);
    EXPECT_EQ(stats.bytes_reserved, 0u);
    EXPECT_EQ(arena.check_invariants(), "");
    (void)arena.allocate(kMiB);  // left outstanding: the destructor gives everything back
  }
  EXPECT_EQ(memory.committed_bytes(), 0u);
}

TEST(ExpandableArena, GrowingRequestsKeepCommittedNearLive) {
  // Sizes 1, 2, 3... MiB, each freeing the previous one.
  for (const std::size_t threshold : {std::size_t{0}, ArenaOptions{}.release_threshold}) {
    SCOPED_TRACE("release_threshold " + std::to_string(threshold));
    ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(256 * kMiB, threshold));
    void* previous = nullptr;
    std::size_t previous_bytes = 0;
    std::size_t peak_live = 0;
    for (std::size_t mib = 1; mib <= 48; ++mib) {
      const std::size_t bytes = mib * kMiB;
      void* ptr = arena.allocate(bytes);
      std::memset(ptr, static_cast<int>(mib), bytes);
      const std::size_t live = bytes + previous_bytes;
      peak_live = std::max(peak_live, live);
      // Caching never lifts committed bytes above the peak of what live blocks touch.
      EXPECT_LE(arena.stats().peak_bytes_reserved, peak_live + 2 * kGranule) << mib << " MiB";
      if (threshold == 0) {
        EXPECT_LE(arena.committed_bytes(), live + 2 * kGranule) << mib << " MiB";
      }
      arena.deallocate(previous, previous_bytes);
      if (threshold == 0) {
        EXPECT_LE(arena.committed_bytes(), bytes + 2 * kGranule) << mib << " MiB";
      }
      previous = ptr;
      previous_bytes = bytes;
      ASSERT_EQ(arena.check_invariants(), "");
    }
    arena.deallocate(previous, previous_bytes);
    EXPECT_LE(arena.committed_bytes(), threshold);
  }
}

TEST(ExpandableArena, PrefersTheFreeBlockTouchingFewerFreshGranules) {
  // Holes X = [0.25, 4.75) MiB and Y = [6, 10.25) MiB; in-use blocks touch granules 0, 2 and 5 only. A
  // 4.125 MiB request fits the smaller Y, which would touch two fresh granules (3, 4); X costs one (1).
  constexpr std::size_t kQuarter = kMiB / 4;
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(64 * kMiB));
  auto* p0 = static_cast<char*>(arena.allocate(kQuarter));
  void* x = arena.allocate(4 * kMiB + 2 * kQuarter);
  (void)arena.allocate(kMiB + kQuarter);
  void* y = arena.allocate(4 * kMiB + kQuarter);
  (void)arena.allocate(kQuarter);
  arena.deallocate(x, 4 * kMiB + 2 * kQuarter);
  arena.deallocate(y, 4 * kMiB + kQuarter);
  EXPECT_EQ(arena.committed_bytes(), 3 * kGranule);
  const std::size_t bytes = 4 * kMiB + kQuarter / 2;
  EXPECT_EQ(arena.allocate(bytes), p0 + kQuarter);
  EXPECT_EQ(arena.committed_bytes(), 4 * kGranule);
  EXPECT_EQ(arena.check_invariants(), "");  // the blocks left outstanding are freed by the destructor
}

TEST(ExpandableArena, BestFitSpansSizeBinsAndShrinksHolesInPlace) {
  // Holes of 1, 3, 5 and 64 KiB (three size bins) between in-use blocks, all in one committed granule: each
  // request takes the smallest hole that holds it, the remainder staying a free block.
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(64 * kMiB));
  const std::size_t holes[] = {64 * kKiB, 1 * kKiB, 5 * kKiB, 3 * kKiB};
  std::vector<char*> hole_at;
  for (const std::size_t bytes : holes) {
    (void)arena.allocate(256);
    hole_at.push_back(static_cast<char*>(arena.allocate(bytes)));
  }
  (void)arena.allocate(256);
  for (std::size_t i = 0; i < hole_at.size(); ++i) arena.deallocate(hole_at[i], holes[i]);
  ASSERT_EQ(arena.check_invariants(), "");
  const auto largest_hole = [&arena] {
    std::size_t largest = 0;
    for (const ExpandableArena::BlockInfo& block : arena.blocks()) {
      if (!block.in_use) largest = std::max(largest, block.size);
    }
    return largest;
  };
  EXPECT_EQ(largest_hole(), 64 * kKiB);
  // The largest free block is the committed rest of the granule past the extent (fragmentation.hpp).
  const std::size_t extent = 5 * 256 + 73 * kKiB;
  EXPECT_EQ(arena.blocks().back().offset + arena.blocks().back().size, extent);
  EXPECT_EQ(arena.stats().largest_free_block, kGranule - extent);
  EXPECT_EQ(arena.allocate(2 * kKiB), hole_at[3]);             // 3 KiB hole -> 1 KiB left
  EXPECT_EQ(arena.allocate(768), hole_at[1]);                  // 1 KiB hole -> 256 B left
  EXPECT_EQ(arena.allocate(4 * kKiB), hole_at[2]);             // 5 KiB hole -> 1 KiB left
  EXPECT_EQ(arena.allocate(1 * kKiB), hole_at[2] + 4 * kKiB);  // the lower of the two 1 KiB rests
  EXPECT_EQ(arena.allocate(8 * kKiB), hole_at[0]);             // only the 64 KiB hole holds it
  EXPECT_EQ(arena.check_invariants(), "");
  EXPECT_EQ(largest_hole(), 56 * kKiB);
  EXPECT_EQ(arena.stats().largest_free_block, kGranule - extent);  // every request fit a hole
}

TEST(ExpandableArena, GrowingRequestNeedsNoContiguousPhysicalHole) {
  // 32 MiB live in 2 MiB pieces with 2 MiB holes between them: a BFC allocator at a 64 MiB limit would need
  // a new 30 MiB region; here only the touched granules cost memory.
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(64 * kMiB));
  std::vector<void*> pieces;
  for (int i = 0; i < 32; ++i) pieces.push_back(arena.allocate(kGranule));
  for (int i = 0; i < 32; i += 2) arena.deallocate(pieces[static_cast<std::size_t>(i)], kGranule);
  void* large = arena.allocate(30 * kMiB);
  std::memset(large, 9, 30 * kMiB);
  EXPECT_LE(arena.committed_bytes(), 64 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(large, 30 * kMiB);
  for (int i = 1; i < 32; i += 2) arena.deallocate(pieces[static_cast<std::size_t>(i)], kGranule);
  EXPECT_EQ(arena.stats().bytes_in_use, 0u);
}

TEST(ExpandableArena, CachesUpToTheThresholdAndTrimReleasesTheRest) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(256 * kMiB, 8 * kMiB));
  void* small = arena.allocate(kKiB);
  void* large = arena.allocate(20 * kMiB);  // granules 0..10
  arena.deallocate(large, 20 * kMiB);
  // 10 wholly free granules; the least recently freed are decommitted down to the 8 MiB threshold. A block's
  // granules are released top-down, so its low ones, where best fit places the next request, stay.
  EXPECT_EQ(arena.committed_bytes(), kGranule + 8 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
  // Reuse of cached granules makes no system call.
  const auto commits = arena.stats().upstream_allocs;
  void* again = arena.allocate(4 * kMiB);
  EXPECT_EQ(arena.stats().upstream_allocs, commits);
  arena.deallocate(again, 4 * kMiB);
  EXPECT_EQ(arena.trim(), 8 * kMiB);
  EXPECT_EQ(arena.committed_bytes(), kGranule);
  EXPECT_EQ(arena.trim(), 0u);
  arena.deallocate(small, kKiB);
  EXPECT_EQ(arena.trim(), kGranule);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

// One training-like step: 16 blocks of one granule each (32 MiB), then all freed.
void run_step(ExpandableArena& arena) {
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) {
    blocks.push_back(arena.allocate(kGranule));
    std::memset(blocks.back(), i, kGranule);
  }
  for (void* block : blocks) arena.deallocate(block, kGranule);
}

TEST(ExpandableArena, DecayKeepsWhatTheNextStepTakesAgain) {
  // Each step frees 32 MiB, eight times the threshold. With a decay window longer than a step (32 events)
  // the next step takes the cached granules again: no commit after the first step, none decommitted. Without
  // one (release_decay_events = 0, the earlier policy) every step decommits 28 MiB and commits it again.
  for (const std::uint64_t decay : {std::uint64_t{0}, std::uint64_t{1000}}) {
    SCOPED_TRACE("release_decay_events " + std::to_string(decay));
    HostVirtualMemory memory;
    ExpandableArena arena(memory, arena_options(256 * kMiB, 4 * kMiB, false, decay));
    for (int step = 0; step < 10; ++step) {
      run_step(arena);
      ASSERT_EQ(arena.check_invariants(), "");
    }
    const auto stats = arena.stats();
    EXPECT_EQ(stats.peak_bytes_reserved, 32 * kMiB);
    if (decay == 0) {
      EXPECT_EQ(stats.upstream_allocs, 16u + 9u * 14u);
      EXPECT_EQ(arena.committed_bytes(), 4 * kMiB);
    } else {
      EXPECT_EQ(stats.upstream_allocs, 16u);
      EXPECT_EQ(stats.upstream_frees, 0u);
      EXPECT_EQ(arena.committed_bytes(), 32 * kMiB);
      EXPECT_EQ(memory.committed_bytes(), 32 * kMiB);
    }
  }
}

TEST(ExpandableArena, DecayReleasesGranulesUnusedForTheWindow) {
  constexpr std::uint64_t kWindow = 1000;
  HostVirtualMemory memory;
  ExpandableArena arena(memory, arena_options(256 * kMiB, 4 * kMiB, false, kWindow));
  run_step(arena);
  EXPECT_EQ(arena.committed_bytes(), 32 * kMiB);
  // A smaller phase: 2 events per cycle, reusing one cached granule; the other 15 age.
  const auto cycle = [&arena](std::uint64_t events) {
    for (std::uint64_t event = 0; event < events; event += 2) arena.deallocate(arena.allocate(kMiB), kMiB);
  };
  // Events 33..992: granule 1, the least recently freed of the aging ones (event 18), is still in the window.
  cycle(kWindow - 40);
  EXPECT_EQ(arena.committed_bytes(), 32 * kMiB);
  EXPECT_EQ(arena.stats().upstream_frees, 0u);
  cycle(40);  // to event 1032: the window has passed for every granule the small phase did not touch
  EXPECT_EQ(arena.committed_bytes(), 4 * kMiB);  // the threshold's worth stays cached
  EXPECT_EQ(memory.committed_bytes(), 4 * kMiB);
  EXPECT_EQ(arena.stats().upstream_frees, 14u);
  EXPECT_EQ(arena.stats().peak_bytes_reserved, 32 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
  // What stays is served without a commit.
  const auto commits = arena.stats().upstream_allocs;
  void* again = arena.allocate(4 * kMiB);
  EXPECT_EQ(arena.stats().upstream_allocs, commits);
  arena.deallocate(again, 4 * kMiB);
}

TEST(ExpandableArena, TrimReleasesRecentlyCachedGranules) {
  HostVirtualMemory memory;
  ExpandableArena arena(memory, arena_options(256 * kMiB, 0, false, 1000));
  run_step(arena);
  EXPECT_EQ(arena.committed_bytes(), 32 * kMiB);  // all freed within the window
  EXPECT_EQ(arena.trim(), 32 * kMiB);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(memory.committed_bytes(), 0u);
  EXPECT_EQ(arena.stats().upstream_frees, 16u);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArena, DecayNeverPassesTheLimit) {
  // Limit 32 MiB, a window longer than the test: cached granules are taken (remapped where needed) before a
  // commit would cross the limit, so a request that needs other virtual granules is served without an OOM.
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(32 * kMiB, 0, false, 1u << 20));
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(arena.allocate(kGranule));
  for (std::size_t i = 1; i < blocks.size(); i += 2) arena.deallocate(blocks[i], kGranule);  // 8 granules cached
  EXPECT_EQ(arena.committed_bytes(), 32 * kMiB);
  void* big = arena.allocate(16 * kMiB);  // no 16 MiB hole: eight granules past the extent, all from the cache
  EXPECT_EQ(arena.committed_bytes(), 32 * kMiB);
  auto stats = arena.stats();
  EXPECT_EQ(stats.upstream_allocs, 16u);
  EXPECT_EQ(stats.num_retries, 0u);
  EXPECT_EQ(stats.num_ooms, 0u);
  EXPECT_THROW((void)arena.allocate(kGranule), tp::OutOfMemoryError);  // nothing cached, at the limit
  EXPECT_LE(arena.stats().peak_bytes_reserved, 32 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(big, 16 * kMiB);
  for (std::size_t i = 0; i < blocks.size(); i += 2) arena.deallocate(blocks[i], kGranule);
}

TEST(ExpandableArena, OutOfMemoryReportsAndLeavesTheArenaUsable) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(16 * kMiB), "expandable:test");
  void* a = arena.allocate(10 * kMiB);
  try {
    (void)arena.allocate(10 * kMiB - 100);
    FAIL() << "allocated past the limit";
  } catch (const tp::OutOfMemoryError& error) {
    const auto& report = error.report();
    EXPECT_EQ(report.allocator, "expandable:test");
    EXPECT_EQ(report.requested_bytes, 10 * kMiB - 100);
    EXPECT_EQ(report.rounded_bytes, 10 * kMiB);
    EXPECT_EQ(report.limit_bytes, 16 * kMiB);
    EXPECT_EQ(report.in_use_bytes, 10 * kMiB);
    EXPECT_EQ(report.reserved_bytes, 10 * kMiB);
    EXPECT_EQ(report.largest_free_block, 0u);  // the 10 MiB block fills its five granules
    EXPECT_FALSE(report.is_fragmentation());
    EXPECT_TRUE(contains(error.what(), "expandable:test")) << error.what();
  }
  auto stats = arena.stats();
  EXPECT_EQ(stats.num_ooms, 1u);
  EXPECT_EQ(stats.num_retries, 0u);  // the retry served nothing
  EXPECT_EQ(arena.check_invariants(), "");
  void* b = arena.allocate(6 * kMiB);  // exactly what is left
  EXPECT_EQ(arena.committed_bytes(), 16 * kMiB);
  arena.deallocate(a, 10 * kMiB);
  void* c = arena.allocate(10 * kMiB - 100);
  std::memset(c, 1, 10 * kMiB - 100);
  arena.deallocate(b, 6 * kMiB);
  arena.deallocate(c, 10 * kMiB - 100);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArena, CachingNeverRaisesThePeak) {
  // Cached granules are given back before committed bytes rise above their high-water mark.
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(64 * kMiB, 64 * kMiB));
  void* a = arena.allocate(4 * kMiB);  // granules 0, 1
  void* b = arena.allocate(256);       // granule 2
  arena.deallocate(a, 4 * kMiB);       // granules 0, 1 cached
  EXPECT_EQ(arena.committed_bytes(), 6 * kMiB);
  void* c = arena.allocate(6 * kMiB);  // at the end: granules 2..5, 3 new
  EXPECT_EQ(arena.committed_bytes(), 8 * kMiB);
  EXPECT_EQ(arena.stats().peak_bytes_reserved, 8 * kMiB);
  EXPECT_EQ(arena.stats().num_retries, 0u);
  arena.deallocate(b, 256);
  arena.deallocate(c, 6 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArena, AFreshGranuleTakesTheLeastRecentlyFreedCachedOne) {
  // Blocks freed last are the likeliest to be placed on again: a fresh granule elsewhere takes the cached
  // physical granule freed first, so the one freed last stays mapped where it was and a block placed there
  // makes no mapping call.
  MapCountingMemory memory;
  ExpandableArena arena(memory, arena_options(64 * kMiB, 64 * kMiB));
  void* a = arena.allocate(4 * kMiB);  // granules 0-1
  void* x = arena.allocate(kGranule);  // 2
  void* b = arena.allocate(kGranule);  // 3
  void* y = arena.allocate(kMiB);      // 4, the tail
  arena.deallocate(a, 4 * kMiB);       // granules 0 and 1 cached, then 3 (freed last)
  arena.deallocate(b, kGranule);
  // No hole holds it with fewer fresh granules than the extent's end (granule 4 has a user, 5 is fresh).
  void* c = arena.allocate(3 * kMiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c) - arena.base_address(), 9 * kMiB);
  const std::size_t maps_before = memory.maps;
  // The smaller hole, where b was: its physical granule is still mapped there.
  void* d = arena.allocate(kGranule);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(d) - arena.base_address(), 3 * kGranule);
  EXPECT_EQ(memory.maps, maps_before);
  EXPECT_EQ(arena.committed_bytes(), 5 * kGranule);  // c took a cached one
  EXPECT_EQ(arena.check_invariants(), "");
  for (auto [ptr, bytes] : {std::pair{x, kGranule}, {y, kMiB}, {c, 3 * kMiB}, {d, kGranule}}) {
    arena.deallocate(ptr, bytes);
  }
}

TEST(ExpandableArena, TheInUseIndexFindsEveryBlockThroughGrowthAndRandomFrees) {
  // Thousands of blocks grow the in-use index several times (some buckets fill, so entries lie past their home
  // bucket) and free in random order: every block is still found by its pointer, an unknown one is not.
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(64 * kMiB, 64 * kMiB));
  std::mt19937 random(23);
  std::vector<std::pair<void*, std::size_t>> live;
  for (std::size_t i = 0; i < 3000; ++i) {
    const std::size_t bytes = 256 * (1 + random() % 24);
    live.emplace_back(arena.allocate(bytes), bytes);
  }
  EXPECT_EQ(arena.check_invariants(), "");
  std::shuffle(live.begin(), live.end(), random);
  while (!live.empty()) {
    for (std::size_t i = 0; i < live.size(); i += 97) {
      EXPECT_EQ(arena.allocated_size(live[i].first, live[i].second), live[i].second);
    }
    for (std::size_t i = 0; i < 200 && !live.empty(); ++i) {
      arena.deallocate(live.back().first, live.back().second);
      live.pop_back();
    }
    ASSERT_EQ(arena.check_invariants(), "");
  }
  // A pointer inside the extent that no block starts at is not a block (the size asked comes back).
  void* a = arena.allocate(1024);
  void* b = arena.allocate(1024);
  EXPECT_EQ(arena.allocated_size(static_cast<char*>(a) + 256, 512), 512u);
  arena.deallocate(a, 1024);
  arena.deallocate(b, 1024);
}

TEST(ExpandableArena, CachedGranulesServeBeforeTheSourceIsAsked) {
  // Another user of the device takes what the arena's cache leaves: the request takes the cached physical
  // granule and shares the one the small block uses, so the source is never asked and nothing is retried.
  SimDeviceMemory device(16 * kMiB);
  ExpandableArena arena(device, arena_options(64 * kMiB, kGranule));
  void* x = arena.allocate(12 * kMiB);  // granules 0..5
  void* s = arena.allocate(256);        // granule 6
  arena.deallocate(x, 12 * kMiB);       // one granule (0) stays cached
  EXPECT_EQ(arena.committed_bytes(), 4 * kMiB);
  void* other = device.allocate(12 * kMiB);
  void* c = arena.allocate(3 * kMiB);
  std::memset(c, 5, 3 * kMiB);
  const auto stats = arena.stats();
  EXPECT_EQ(stats.num_retries, 0u);
  EXPECT_EQ(stats.num_ooms, 0u);
  EXPECT_LE(device.used_bytes(), 16 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(c, 3 * kMiB);
  arena.deallocate(s, 256);
  device.deallocate(other, 12 * kMiB);
}

TEST(ExpandableArena, RetriesCountOnlyRequestsTheRetryServed) {
  // num_retries: requests served only after the cache was given back; a request that fails anyway is an OOM.
  SimDeviceMemory device(16 * kMiB);
  ExpandableArena arena(device, arena_options(64 * kMiB, kGranule));
  EXPECT_THROW((void)arena.allocate(65 * kMiB), tp::OutOfMemoryError);  // larger than the limit
  auto stats = arena.stats();
  EXPECT_EQ(stats.num_ooms, 1u);
  EXPECT_EQ(stats.num_retries, 0u);
  EXPECT_THROW((void)arena.allocate(20 * kMiB), tp::OutOfMemoryError);  // larger than the source
  stats = arena.stats();
  EXPECT_EQ(stats.num_ooms, 2u);
  EXPECT_EQ(stats.num_retries, 0u);
  void* x = arena.allocate(12 * kMiB);  // granules 0..5
  void* s = arena.allocate(256);        // granule 6
  arena.deallocate(x, 12 * kMiB);       // granule 0 stays cached
  void* other = device.allocate(12 * kMiB);
  void* c = arena.allocate(3 * kMiB);  // the cached granule and a shared one: no retry needed
  stats = arena.stats();
  EXPECT_EQ(stats.num_retries, 0u);
  EXPECT_EQ(stats.num_ooms, 2u);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(c, 3 * kMiB);
  arena.deallocate(s, 256);
  device.deallocate(other, 12 * kMiB);
}

// With no room past the extent, a request a free block holds is served there at once: the full range's end
// (an invalid placement) never wins over the block, which would send the request to the retry path (every
// cached granule decommitted, then committed again).
TEST(ExpandableArena, AFullRangeLeavesFreeBlocksToServeWithoutARetry) {
  auto options = arena_options(64 * kMiB, 64 * kMiB);
  options.reserve_bytes = 8 * kMiB;
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), options);
  void* a = arena.allocate(4 * kMiB);        // granules 0 and 1
  void* s = arena.allocate(256);             // granule 2
  void* c = arena.allocate(4 * kMiB - 256);  // granules 2 and 3: the range is full
  arena.deallocate(a, 4 * kMiB);             // granules 0 and 1 stay cached
  const auto before = arena.stats();
  void* d = arena.allocate(3 * kMiB);  // granules 0 and 1 again, from the cache
  const auto after = arena.stats();
  EXPECT_EQ(d, a);
  EXPECT_EQ(after.num_retries, 0u);
  EXPECT_EQ(after.upstream_frees, before.upstream_frees) << "the cache was given back";
  EXPECT_EQ(after.upstream_allocs, before.upstream_allocs);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(d, 3 * kMiB);
  arena.deallocate(c, 4 * kMiB - 256);
  arena.deallocate(s, 256);
}

TEST(ExpandableArena, AllocateIsStronglyExceptionSafe) {
  // Every allocation inside allocate fails in turn, from the first on: a request either succeeds or throws
  // std::bad_alloc leaving the arena as it was, with no granule committed for nobody (trim() gets it back).
  // Growing the extent allocates (granule tables); a request that splits a hole allocates only where the
  // arena's node batch or in-use table must grow, so the hole is split after 1 to 40 kept blocks: some of
  // those requests must allocate.
  constexpr std::size_t kKeptBytes = 256;
  const auto exercise = [](std::size_t hole, std::size_t kept_blocks) {
    bool threw = false;
    bool served = false;
    for (long succeed = 0; !served; ++succeed) {
      EXPECT_LT(succeed, 64);
      if (succeed >= 64) break;
      HostVirtualMemory memory;
      ExpandableArena arena(memory, arena_options(64 * kMiB, 0));
      std::vector<void*> kept;
      if (hole != 0) {  // [hole | kept blocks in use]: the request splits the hole (granule 0, uncommitted)
        void* hole_ptr = arena.allocate(hole);
        for (std::size_t i = 0; i < kept_blocks; ++i) kept.push_back(arena.allocate(kKeptBytes));
        arena.deallocate(hole_ptr, hole);
      }
      const std::size_t committed = arena.committed_bytes();
      const auto blocks = arena.blocks().size();
      void* ptr = nullptr;
      try {
        FailAllocations fail(succeed);
        ptr = arena.allocate(kMiB);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      EXPECT_EQ(arena.check_invariants(), "") << "after " << succeed << " allocations";
      if (ptr == nullptr) {
        EXPECT_EQ(arena.committed_bytes(), committed) << "after " << succeed << " allocations";
        EXPECT_EQ(arena.blocks().size(), blocks);
        EXPECT_EQ(arena.trim(), 0u);
      } else {
        served = true;
        std::memset(ptr, 3, kMiB);
        EXPECT_EQ(arena.blocks().size(), blocks + 1);
        arena.deallocate(ptr, kMiB);
      }
      for (void* block : kept) arena.deallocate(block, kKeptBytes);
      EXPECT_EQ(arena.trim(), 0u);
      EXPECT_EQ(arena.check_invariants(), "");
      EXPECT_EQ(memory.committed_bytes(), 0u);
    }
    return threw;
  };
  EXPECT_TRUE(exercise(0, 0)) << "growing the extent: no allocation failed, the seam is not exercised";
  bool split_threw = false;
  for (std::size_t kept_blocks = 1; kept_blocks <= 40; ++kept_blocks) {
    SCOPED_TRACE("split a hole after " + std::to_string(kept_blocks) + " kept blocks");
    split_threw = exercise(8 * kMiB, kept_blocks) || split_threw;
  }
  EXPECT_TRUE(split_threw) << "splitting a hole: no allocation failed, the seam is not exercised";
}

TEST(ExpandableArena, DeallocateAndTrimNeverAllocate) {
  // Frees run where allocation may fail (deallocate is noexcept): with every operator new failing they
  // complete, keep every invariant and give the granules back, also after the granule table grew.
  for (const std::size_t threshold : {std::size_t{0}, 4 * kMiB}) {
    SCOPED_TRACE("release_threshold " + std::to_string(threshold));
    HostVirtualMemory memory;
    ExpandableArena arena(memory, arena_options(64 * kMiB, threshold));
    std::vector<void*> pieces;
    for (int i = 0; i < 24; ++i) pieces.push_back(arena.allocate(kGranule + 256 * static_cast<std::size_t>(i)));
    long attempted = 0;
    {
      FailAllocations fail(0);
      for (std::size_t i = 0; i < pieces.size(); i += 2) {
        arena.deallocate(pieces[i], kGranule + 256 * i);
      }
      for (std::size_t i = 1; i < pieces.size(); i += 2) {
        arena.deallocate(pieces[i], kGranule + 256 * i);
      }
      (void)arena.trim();
      attempted = FailAllocations::attempted();
    }
    EXPECT_EQ(attempted, 0);
    EXPECT_EQ(arena.check_invariants(), "");
    EXPECT_EQ(arena.committed_bytes(), 0u);
    EXPECT_EQ(memory.committed_bytes(), 0u);
    EXPECT_EQ(arena.stats().bytes_in_use, 0u);
  }
}

TEST(ExpandableArena, SourceCapacityBoundsTheArena) {
  SimDeviceMemory device(12 * kMiB, "sim:0");
  ExpandableArena arena(device, arena_options(64 * kMiB));
  void* a = arena.allocate(8 * kMiB);
  try {
    (void)arena.allocate(8 * kMiB);
    FAIL() << "allocated past the device capacity";
  } catch (const tp::OutOfMemoryError& error) {
    EXPECT_TRUE(contains(error.what(), "sim:0")) << error.what();
  }
  EXPECT_EQ(device.used_bytes(), 8 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
  void* b = arena.allocate(4 * kMiB);
  std::memset(b, 1, 4 * kMiB);
  arena.deallocate(a, 8 * kMiB);
  arena.deallocate(b, 4 * kMiB);
  arena.trim();
  EXPECT_EQ(device.used_bytes(), 0u);
}

TEST(ExpandableArenaDeathTest, UnknownPointerAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(16 * kMiB));
  int local = 0;
  EXPECT_DEATH(arena.deallocate(&local, sizeof local), "did not hand out");
  void* ptr = arena.allocate(1000);
  EXPECT_DEATH(arena.deallocate(static_cast<char*>(ptr) + 256, 10), "did not hand out");
  EXPECT_DEATH(arena.deallocate(ptr, 999), "allocated with 1000 bytes");
  arena.deallocate(ptr, 1000);
}

// Random allocate/free/trim under a tight limit: invariants after every operation, every block's contents
// intact when freed, no two live blocks overlap, committed never above the limit. With exact-size reuse
// (reuse_bytes), two requests in three take one of a few sizes, so that requests take kept blocks, and the limit
// makes the out-of-memory retry give them back.
void run_property_test(std::uint64_t seed, int operations, std::size_t reuse_bytes = 0) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  const std::size_t limit = 48 * kMiB;
  const std::size_t thresholds[] = {0, 4 * kMiB, 16 * kMiB};
  const std::uint64_t decays[] = {0, 100};  // seeds from 3 on: cached granules beyond the threshold decay
  ArenaOptions options = arena_options(limit, thresholds[seed % 3], false, decays[(seed / 3) % 2]);
  options.reuse_bytes = reuse_bytes;
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), options);
  const std::size_t repeated[] = {3 * kKiB, 24 * kKiB, 96 * kKiB, 768 * kKiB, 3 * kMiB};
  struct Live {
    std::size_t bytes;
    std::uint64_t tag;
  };
  std::map<char*, Live> live;
  std::uint64_t next_tag = 1;
  std::size_t ooms = 0;
  auto random_size = [&random, &repeated, reuse_bytes]() -> std::size_t {
    if (reuse_bytes != 0 && random() % 3 != 0) return repeated[random() % 5];
    switch (random() % 8) {
      case 0: return 1 + random() % 8 * kMiB;
      case 1:
      case 2: return 1 + random() % kMiB;
      default: return 1 + random() % (16 * kKiB);
    }
  };
  for (int op = 0; op < operations; ++op) {
    const auto choice = random() % 100;
    if (choice < 55 || live.empty()) {
      const std::size_t bytes = random_size();
      char* ptr = nullptr;
      try {
        ptr = static_cast<char*>(arena.allocate(bytes));
      } catch (const tp::OutOfMemoryError&) {
        ++ooms;
      }
      if (ptr != nullptr) {
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % 256, 0u);
        const auto after = live.lower_bound(ptr);
        if (after != live.end()) {
          ASSERT_LE(ptr + bytes, after->first) << "overlaps the next block, op " << op;
        }
        if (after != live.begin()) {
          const auto before = std::prev(after);
          ASSERT_LE(before->first + before->second.bytes, ptr) << "overlaps the previous block, op " << op;
        }
        fill(ptr, bytes, next_tag);
        live.emplace(ptr, Live{bytes, next_tag++});
      }
    } else if (choice < 99) {
      auto victim = live.begin();
      std::advance(victim, static_cast<long>(random() % live.size()));
      ASSERT_TRUE(verify(victim->first, victim->second.bytes, victim->second.tag)) << "contents lost, op " << op;
      arena.deallocate(victim->first, victim->second.bytes);
      live.erase(victim);
    } else {
      arena.trim();
    }
    ASSERT_LE(arena.committed_bytes(), limit);
    const std::string problem = arena.check_invariants();
    ASSERT_EQ(problem, "") << "op " << op;
  }
  EXPECT_GT(ooms, 0u) << "the limit was never reached: the test does not exercise the retry path";
  if (reuse_bytes != 0) {
    EXPECT_GT(arena.reuse_stats().hits, 100u);
    EXPECT_GT(arena.reuse_stats().flushes, 10u);
  }
  for (const auto& [ptr, block] : live) {
    ASSERT_TRUE(verify(ptr, block.bytes, block.tag));
    arena.deallocate(ptr, block.bytes);
  }
  EXPECT_EQ(arena.stats().bytes_in_use, 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArena, RandomOperationsKeepEveryInvariant) {
  for (const std::uint64_t seed : {1u, 2u, 3u, 4u, 5u}) run_property_test(seed, 7000);
}

TEST(ExpandableArena, RandomOperationsWithExactSizeReuseKeepEveryInvariant) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) run_property_test(seed, 6000, (seed + 1) * 2 * kMiB);
}

// The placement rule without sharing, recomputed from blocks() alone (the search without any shortcut): the
// kFitCandidates = 4 smallest free blocks that hold the request, in (size, offset) order, each at its low end
// and, unless that needs no fresh granule or the block fits exactly, at its high end when that needs fewer;
// then the extent's end; the first placement with the fewest fresh granules (ones no in-use block touches)
// wins, and one with none ends the search. The arena's early exits (a placement that reaches the least any
// placement of the size can take) and its free index must pick the same offset for every request.
std::size_t reference_offset(const std::vector<ExpandableArena::BlockInfo>& blocks, std::size_t size) {
  std::map<std::size_t, std::size_t> users;  // granule -> in-use blocks touching it
  for (const auto& block : blocks) {
    if (!block.in_use) continue;
    for (std::size_t granule = block.offset / kGranule; granule <= (block.offset + block.size - 1) / kGranule;
         ++granule) {
      ++users[granule];
    }
  }
  const auto fresh_at = [&users, size](std::size_t offset) {
    std::size_t fresh = 0;
    for (std::size_t granule = offset / kGranule; granule < (offset + size + kGranule - 1) / kGranule; ++granule) {
      if (!users.contains(granule)) ++fresh;
    }
    return fresh;
  };
  std::vector<ExpandableArena::BlockInfo> holes;
  for (const auto& block : blocks) {
    if (!block.in_use && block.size >= size) holes.push_back(block);
  }
  std::sort(holes.begin(), holes.end(),
            [](const auto& a, const auto& b) { return a.size != b.size ? a.size < b.size : a.offset < b.offset; });
  bool found = false;
  std::size_t best_offset = 0;
  std::size_t best_fresh = 0;
  for (std::size_t candidate = 0; candidate < std::min<std::size_t>(holes.size(), 4); ++candidate) {
    const auto& hole = holes[candidate];
    std::size_t offset = hole.offset;
    std::size_t fresh = fresh_at(offset);
    if (hole.size != size && fresh != 0) {
      const std::size_t high = hole.offset + hole.size - size;
      if (fresh_at(high) < fresh) {
        offset = high;
        fresh = fresh_at(high);
      }
    }
    if (!found || fresh < best_fresh) {
      found = true;
      best_offset = offset;
      best_fresh = fresh;
    }
    if (best_fresh == 0) return best_offset;
  }
  const std::size_t extent = blocks.empty() ? 0 : blocks.back().offset + blocks.back().size;
  return !found || fresh_at(extent) < best_fresh ? extent : best_offset;
}

TEST(ExpandableArena, PlacementFollowsTheBestFitRuleWithoutSharing) {
  for (const std::uint64_t seed : {11u, 12u, 13u}) {
    SimDeviceMemory device(4096 * kMiB);
    ExpandableArena arena(device, arena_options(4096 * kMiB, seed % 2 == 0 ? 64 * kMiB : 0));
    const auto base = reinterpret_cast<char*>(arena.base_address());
    std::mt19937_64 random(seed);
    std::vector<std::pair<char*, std::size_t>> live;
    std::size_t multi_granule = 0;
    for (int op = 0; op < 4000; ++op) {
      if (live.size() < 40 || (live.size() < 400 && random() % 2 == 0)) {
        // Mostly sub-granule sizes, some spanning 2-7 granules (where the early exit needs fresh granules).
        const std::size_t bytes =
            random() % 4 == 0 ? 1 + random() % (14 * kMiB) : 256 * (1 + random() % 2048) - random() % 256;
        const std::size_t size = tp::memory::round_up(bytes, 256);
        const std::size_t expected = reference_offset(arena.blocks(), size);
        auto* ptr = static_cast<char*>(arena.allocate(bytes));
        ASSERT_EQ(static_cast<std::size_t>(ptr - base), expected) << "seed " << seed << ", op " << op << ", " << size;
        if (size > 2 * kGranule) ++multi_granule;
        live.emplace_back(ptr, bytes);
      } else {
        const std::size_t victim = random() % live.size();
        arena.deallocate(live[victim].first, live[victim].second);
        live[victim] = live.back();
        live.pop_back();
      }
      if (op % 64 == 0) {
        ASSERT_EQ(arena.check_invariants(), "") << "seed " << seed << ", op " << op;
      }
    }
    EXPECT_GT(multi_granule, 100u) << "too few requests where the least fresh count is above 0";
    for (const auto& [ptr, bytes] : live) arena.deallocate(ptr, bytes);
    EXPECT_EQ(arena.check_invariants(), "");
  }
}

// Threads allocating and freeing at random on one arena (`size` draws each request), every block filled at its
// allocation and checked at its free; then no byte in use and every count balanced.
void run_threads_never_sharing_bytes(ExpandableArena& arena, int thread_count, int iterations,
                                     std::size_t (*size)(std::mt19937_64&)) {
  std::vector<std::thread> threads;
  std::vector<int> failures(static_cast<std::size_t>(thread_count), 0);
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&arena, &failures, t, iterations, size] {
      std::mt19937_64 random(static_cast<std::uint64_t>(t) + 100);
      std::vector<std::pair<void*, std::pair<std::size_t, std::uint64_t>>> held;
      for (int i = 0; i < iterations; ++i) {
        if (held.size() < 16 && random() % 3 != 0) {
          const std::size_t bytes = size(random);
          const std::uint64_t tag = static_cast<std::uint64_t>(t) * 1000000 + static_cast<std::uint64_t>(i);
          void* ptr = arena.allocate(bytes);
          fill(ptr, bytes, tag);
          held.push_back({ptr, {bytes, tag}});
        } else if (!held.empty()) {
          const std::size_t index = random() % held.size();
          auto [ptr, info] = held[index];
          if (!verify(ptr, info.first, info.second)) ++failures[static_cast<std::size_t>(t)];
          arena.deallocate(ptr, info.first);
          held[index] = held.back();
          held.pop_back();
        }
      }
      for (auto& [ptr, info] : held) {
        if (!verify(ptr, info.first, info.second)) ++failures[static_cast<std::size_t>(t)];
        arena.deallocate(ptr, info.first);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < thread_count; ++t) EXPECT_EQ(failures[static_cast<std::size_t>(t)], 0) << "thread " << t;
  EXPECT_EQ(arena.check_invariants(), "");
  const auto stats = arena.stats();
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.num_allocs, stats.num_frees);
}

TEST(ExpandableArena, ConcurrentThreadsNeverShareBytes) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(256 * kMiB, 4 * kMiB));
  run_threads_never_sharing_bytes(arena, 8, 1500, [](std::mt19937_64& random) -> std::size_t {
    return random() % 4 == 0 ? 1 + random() % (3 * kMiB) : 1 + random() % (32 * kKiB);
  });
  EXPECT_LE(arena.committed_bytes(), ArenaOptions{}.release_threshold);
}

// The same with exact-size reuse (kept blocks taken back, given back, kept again from any thread), over sizes that
// repeat.
TEST(ExpandableArena, ConcurrentThreadsNeverShareBytesWithExactSizeReuse) {
  ArenaOptions options = arena_options(256 * kMiB);
  options.reuse_bytes = 16 * kMiB;
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), options);
  run_threads_never_sharing_bytes(arena, 4, 3000, [](std::mt19937_64& random) -> std::size_t {
    return 256 * (1 + random() % 8) * (random() % 2 != 0 ? 1 : 64);
  });
  EXPECT_GT(arena.reuse_stats().hits, 0u);
}

}  // namespace
