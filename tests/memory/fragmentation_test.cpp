// SPDX-License-Identifier: Apache-2.0
// Fragmentation, defined once (fragmentation.hpp): the function's edge cases (nothing free, one free block,
// shattered free memory, a largest block above the free bytes, rounding), its text, and every allocator of a
// stack (bfc, expandable, system) reporting a largest free block under that definition: a piece of the free
// bytes, nonzero while anything is free (so never 100%), the whole of them when they are one block; the
// out-of-memory report reads the same figures as stats() for the same state.
#include "tensorpool/memory/fragmentation.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace {

using tp::kKiB;
using tp::kMiB;
using tp::memory::AllocatorKind;
using tp::memory::Fragmentation;
using tp::memory::GrowthPolicy;
using tp::memory::measure_fragmentation;
using tp::memory::MemoryConfig;
using tp::memory::MemoryStack;
using tp::memory::MemoryStats;

static_assert(measure_fragmentation(0, 0, 0, 0).external == 0.0, "nothing reserved is not fragmented");
static_assert(measure_fragmentation(4 * kMiB, kMiB, 3 * kMiB, kMiB).external == 0.0, "one free block is 0");

TEST(Fragmentation, NothingFreeIsNoFragmentation) {
  const Fragmentation empty = measure_fragmentation(0, 0, 0, 0);
  EXPECT_EQ(empty.free_bytes, 0u);
  EXPECT_EQ(empty.largest_free_block, 0u);
  EXPECT_EQ(empty.external, 0.0);
  EXPECT_EQ(empty.internal_bytes, 0u);

  const Fragmentation full = measure_fragmentation(4 * kMiB, 4 * kMiB, 0, 3 * kMiB);
  EXPECT_EQ(full.free_bytes, 0u);
  EXPECT_EQ(full.external, 0.0);
  EXPECT_EQ(full.internal_bytes, kMiB);

  // A layer counting more in use than it reserved (a source reserves nothing beyond what it hands out).
  const Fragmentation over = measure_fragmentation(kMiB, 2 * kMiB, 5 * kMiB, 2 * kMiB);
  EXPECT_EQ(over.free_bytes, 0u);
  EXPECT_EQ(over.largest_free_block, 0u);
  EXPECT_EQ(over.external, 0.0);
}

TEST(Fragmentation, OneFreeBlockIsZero) {
  const Fragmentation one = measure_fragmentation(10 * kMiB, 3 * kMiB, 7 * kMiB, 3 * kMiB);
  EXPECT_EQ(one.free_bytes, 7 * kMiB);
  EXPECT_EQ(one.largest_free_block, 7 * kMiB);
  EXPECT_EQ(one.external, 0.0);
}

TEST(Fragmentation, ShatteredFreeMemoryIsNearOneButNeverOne) {
  // 1 MiB free as 1024 slivers of 1 KiB.
  const Fragmentation shattered = measure_fragmentation(2 * kMiB, kMiB, kKiB, kMiB);
  EXPECT_DOUBLE_EQ(shattered.external, 1.0 - 1.0 / 1024.0);
  EXPECT_GT(shattered.external, 0.99);
  EXPECT_LT(shattered.external, 1.0);
  // Half of the free bytes in the largest block: 50%; a quarter: 75%.
  EXPECT_DOUBLE_EQ(measure_fragmentation(6 * kMiB, 2 * kMiB, 2 * kMiB, 0).external, 0.5);
  EXPECT_DOUBLE_EQ(measure_fragmentation(6 * kMiB, 2 * kMiB, kMiB, 0).external, 0.75);
}

TEST(Fragmentation, ALargestBlockAboveTheFreeBytesReadsAsTheFreeBytes) {
  // A layer reporting what its source could still give (100 MiB) holds only 2 MiB free.
  const Fragmentation headroom = measure_fragmentation(6 * kMiB, 4 * kMiB, 100 * kMiB, 4 * kMiB);
  EXPECT_EQ(headroom.largest_free_block, 2 * kMiB);
  EXPECT_EQ(headroom.external, 0.0);
}

TEST(Fragmentation, InternalIsTheBytesInUseBeyondTheRequests) {
  EXPECT_EQ(measure_fragmentation(8 * kMiB, 5 * kMiB, 3 * kMiB, 4 * kMiB).internal_bytes, kMiB);
  EXPECT_EQ(measure_fragmentation(8 * kMiB, 5 * kMiB, 3 * kMiB, 5 * kMiB).internal_bytes, 0u);
  EXPECT_EQ(measure_fragmentation(8 * kMiB, 5 * kMiB, 3 * kMiB, 6 * kMiB).internal_bytes, 0u) << "never wraps";
  EXPECT_FALSE(measure_fragmentation(8 * kMiB, 5 * kMiB, 3 * kMiB, std::nullopt).internal_bytes.has_value());
}

TEST(Fragmentation, TheTextGivesBothFigures) {
  EXPECT_EQ(describe(measure_fragmentation(6 * kMiB, 2 * kMiB, kMiB, 2 * kMiB - 1536)),
            "fragmentation 75.0% external (largest free block 1.00 MiB of 4.00 MiB reserved and free), "
            "1.50 KiB internal (rounding)");
  EXPECT_EQ(describe(measure_fragmentation(2 * kMiB, 2 * kMiB, 0, 2 * kMiB)),
            "fragmentation 0.0% external (nothing reserved is free), 0 B internal (rounding)");
  EXPECT_EQ(describe(measure_fragmentation(2 * kMiB, kMiB, kMiB, std::nullopt)),
            "fragmentation 0.0% external (largest free block 1.00 MiB of 1.00 MiB reserved and free)");
}

// The expandable arena holds committed granules past its extent once the tail block is freed (cached) and the
// rest of the tail's last granule: free memory in one block, which read as 100% when only free blocks
// counted (the main job's summary printed "fragmentation 100.0%").
TEST(Fragmentation, AnExpandableArenaWithItsFreeMemoryInOneBlockReadsZero) {
  tp::memory::ArenaOptions options;
  options.limit_bytes = 64 * kMiB;
  tp::memory::HostVirtualMemory memory;
  const std::size_t granule = memory.granularity();
  ASSERT_GT(granule, kMiB);
  tp::memory::ExpandableArena arena(memory, options);
  void* kept = arena.allocate(kMiB);
  MemoryStats stats = arena.stats();
  EXPECT_EQ(stats.bytes_reserved, granule);
  EXPECT_EQ(stats.largest_free_block, granule - kMiB) << "the rest of the tail's granule";
  EXPECT_EQ(stats.fragmentation(), 0.0);

  void* tail = arena.allocate(5 * kMiB);
  arena.deallocate(tail, 5 * kMiB);  // the extent shrinks to `kept`; its granules stay committed (cached)
  stats = arena.stats();
  ASSERT_GT(stats.free_bytes(), granule - kMiB);
  EXPECT_EQ(stats.largest_free_block, stats.free_bytes());
  EXPECT_EQ(stats.fragmentation(), 0.0);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(kept, kMiB);
}

std::string label(AllocatorKind kind) { return std::string(tp::memory::to_string(kind)); }

class EveryAllocator : public ::testing::TestWithParam<AllocatorKind> {
 protected:
  // Preallocated, BFC's memory is one region, so what it has free can be one block.
  std::unique_ptr<MemoryStack> make(GrowthPolicy policy = GrowthPolicy::preallocate) const {
    MemoryConfig config;
    config.device = "sim:0";
    config.allocator = GetParam();
    config.policy = policy;
    config.limit_bytes = 32 * kMiB;
    return tp::memory::make_sim_device_memory_stack(config, 64 * kMiB);
  }
};

// The definition's premise for one stack state: the largest free block is a piece of the free bytes, and
// some piece exists while anything is free.
void expect_a_piece_of_the_free_bytes(const MemoryStats& stats, const std::string& where) {
  EXPECT_LE(stats.largest_free_block, stats.free_bytes()) << where;
  if (stats.free_bytes() > 0) {
    EXPECT_GT(stats.largest_free_block, 0u) << where;
    EXPECT_LT(stats.fragmentation(), 1.0) << where;
  }
}

TEST_P(EveryAllocator, FreeMemoryInOneBlockIsNotFragmented) {
  auto stack = make();
  void* kept = stack->allocate(kMiB);
  void* freed = stack->allocate(3 * kMiB);
  stack->deallocate(freed, 3 * kMiB);
  const MemoryStats stats = stack->stats();
  expect_a_piece_of_the_free_bytes(stats, label(GetParam()));
  EXPECT_EQ(stats.largest_free_block, stats.free_bytes());
  EXPECT_EQ(stats.fragmentation(), 0.0);
  stack->deallocate(kept, kMiB);
}

TEST_P(EveryAllocator, HolesBetweenLiveBlocksAreFragmentationNeverAllOfIt) {
  auto stack = make();
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(stack->allocate(512 * kKiB));
  for (std::size_t i = 0; i < blocks.size(); i += 2) stack->deallocate(blocks[i], 512 * kKiB);
  const MemoryStats stats = stack->stats();
  expect_a_piece_of_the_free_bytes(stats, label(GetParam()));
  if (GetParam() != AllocatorKind::system) {  // the system allocator holds nothing free
    EXPECT_GT(stats.fragmentation(), 0.0) << "eight 512 KiB holes between live blocks";
  }
  for (std::size_t i = 1; i < blocks.size(); i += 2) stack->deallocate(blocks[i], 512 * kKiB);
}

TEST_P(EveryAllocator, EveryStateOfARandomTraceReportsAPieceOfTheFreeBytes) {
  constexpr unsigned kSeed = 20231203;
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  std::mt19937 random(kSeed);
  std::uniform_int_distribution<std::size_t> size(1, kMiB);
  auto stack = make(GrowthPolicy::grow);  // BFC in several regions, the arena committing and releasing
  std::vector<std::pair<void*, std::size_t>> live;
  for (int step = 0; step < 600; ++step) {
    if (!live.empty() && (live.size() > 24 || random() % 3 == 0)) {
      const std::size_t index = random() % live.size();
      stack->deallocate(live[index].first, live[index].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
    } else {
      const std::size_t bytes = size(random);
      try {
        live.emplace_back(stack->allocate(bytes), bytes);
      } catch (const tp::OutOfMemoryError&) {  // a full stack is a state like any other
      }
    }
    expect_a_piece_of_the_free_bytes(stack->stats(), label(GetParam()) + " step " + std::to_string(step));
    if (::testing::Test::HasFailure()) break;
  }
  for (const auto& [ptr, bytes] : live) stack->deallocate(ptr, bytes);
}

// The out-of-memory report reads the stack's state as stats() does: same free bytes, largest free block,
// external and internal fragmentation, and the same text.
TEST_P(EveryAllocator, TheOutOfMemoryReportReadsAsStatsForTheSameState) {
  auto stack = make();
  std::vector<void*> blocks;
  for (int i = 0; i < 12; ++i) blocks.push_back(stack->allocate(kMiB - 1000));
  for (std::size_t i = 0; i < blocks.size(); i += 3) stack->deallocate(blocks[i], kMiB - 1000);
  try {
    (void)stack->allocate(40 * kMiB);
    FAIL() << "40 MiB fit under a 32 MiB limit";
  } catch (const tp::OutOfMemoryError& error) {
    const Fragmentation stats = stack->stats().fragmentation_detail();
    const Fragmentation report = error.report().fragmentation();
    EXPECT_EQ(report.free_bytes, stats.free_bytes);
    EXPECT_EQ(report.largest_free_block, stats.largest_free_block);
    EXPECT_EQ(report.external, stats.external);
    EXPECT_EQ(report.internal_bytes, stats.internal_bytes);
    EXPECT_GT(stats.internal_bytes.value_or(0), 0u) << "requests of 1 MiB - 1000 bytes are rounded";
    const std::string text = error.what();
    EXPECT_NE(text.find(describe(stats)), std::string::npos) << text << "\nlacks\n" << describe(stats);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i % 3 != 0) stack->deallocate(blocks[i], kMiB - 1000);
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, EveryAllocator,
                         ::testing::Values(AllocatorKind::bfc, AllocatorKind::expandable, AllocatorKind::system),
                         [](const ::testing::TestParamInfo<AllocatorKind>& param_info) {
                           return label(param_info.param);
                         });

}  // namespace
