// SPDX-License-Identifier: Apache-2.0
// ExpandableArena's exact-size reuse (ArenaOptions::reuse_bytes): a freed block is kept whole and taken back by
// a request of its size; its room still counts as free; kept blocks give way before a request would take a fresh
// granule, and go back at trim, compaction and beyond reuse_bytes (the oldest first); sizes that do not repeat
// pause keeping; a double free of a kept block still aborts; the expandable stacks keep by default. Random
// operations and threads with reuse: expandable_arena_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "memory/support/arena_test_options.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/compaction.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"

namespace {

using tp::kKiB;
using tp::kMiB;
using tp::memory::ArenaOptions;
using tp::memory::ExpandableArena;
using tp::memory::HostVirtualMemory;
using tp::memory::MemoryConfig;
using tp::memory::ReuseStats;
using tp::memory::testing::arena_options;

ArenaOptions reuse_options(std::size_t limit, std::size_t reuse_bytes = 16 * kMiB) {
  ArenaOptions options = arena_options(limit);
  options.reuse_bytes = reuse_bytes;
  return options;
}

std::uintptr_t address(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }

TEST(ExpandableArenaReuse, AFreedBlockIsTakenBackByARequestOfItsExactSize) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(64 * kMiB));
  void* a = arena.allocate(100000);
  void* b = arena.allocate(50000);
  arena.deallocate(a, 100000);
  EXPECT_EQ(arena.check_invariants(), "");
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 1u);
  EXPECT_EQ(arena.reuse_stats().kept_bytes, tp::memory::round_up(100000, 256));
  // Free to callers: out of the in-use bytes, listed as free, counted in the largest free block.
  EXPECT_EQ(arena.stats().bytes_in_use, tp::memory::round_up(50000, 256));
  EXPECT_EQ(arena.stats().bytes_requested, 50000u);
  EXPECT_FALSE(arena.blocks().front().in_use);
  EXPECT_GE(arena.stats().largest_free_block, tp::memory::round_up(100000, 256));
  // Another rounded size does not take it; the same rounded size does, whatever the bytes asked.
  void* c = arena.allocate(100000 + 256);
  EXPECT_NE(c, a);
  void* again = arena.allocate(99999);
  EXPECT_EQ(again, a);
  EXPECT_EQ(arena.reuse_stats().hits, 1u);
  EXPECT_EQ(arena.stats().bytes_requested, 50000u + 100256u + 99999u);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(again, 99999);
  arena.deallocate(b, 50000);
  arena.deallocate(c, 100000 + 256);
  EXPECT_EQ(arena.stats().bytes_in_use, 0u);
  EXPECT_EQ(arena.stats().num_allocs, arena.stats().num_frees);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArenaReuse, KeptBlocksGiveWayBeforeARequestTakesAFreshGranule) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(64 * kMiB));
  // Granule 0 holds a, b (512 KiB each) and c (1 MiB); d (1.5 MiB) starts granule 1.
  void* a = arena.allocate(512 * kKiB);
  void* b = arena.allocate(512 * kKiB);
  void* c = arena.allocate(kMiB);
  void* d = arena.allocate(1536 * kKiB);
  ASSERT_EQ(address(c), address(a) + kMiB);
  arena.deallocate(a, 512 * kKiB);
  arena.deallocate(b, 512 * kKiB);
  ASSERT_EQ(arena.reuse_stats().kept_blocks, 2u);
  ASSERT_EQ(arena.committed_bytes(), 4 * kMiB);
  // 1 MiB past the extent would take a third granule; a and b, given back and merged, hold it in granule 0.
  void* e = arena.allocate(kMiB);
  EXPECT_EQ(e, a);
  EXPECT_EQ(arena.committed_bytes(), 4 * kMiB);
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 0u);
  EXPECT_EQ(arena.reuse_stats().flushes, 1u);
  EXPECT_EQ(arena.check_invariants(), "");
  for (auto [ptr, bytes] : {std::pair{c, kMiB}, {d, 1536 * kKiB}, {e, kMiB}}) arena.deallocate(ptr, bytes);
  EXPECT_EQ(arena.check_invariants(), "");
}

// A placement that commits gives kept blocks back first even when it takes no more fresh granules than its size
// must: a 7 MiB request fits exactly in a hole whose two inner granules are decommitted (threshold 0), and the kept
// block alone holding granule 4 goes back (and its granule with it) before the two are committed.
TEST(ExpandableArenaReuse, APlacementThatCommitsGivesKeptBlocksBackFirst) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(64 * kMiB));
  void* p = arena.allocate(256 * kKiB);     // [0, 256K): granule 0
  void* x = arena.allocate(7 * kMiB);       // [256K, 7.25M): granules 0-3
  void* q = arena.allocate(256 * kKiB);     // granule 3
  void* r = arena.allocate(512 * kKiB);     // up to 8 MiB
  void* kept = arena.allocate(2 * kMiB);    // granule 4, alone
  void* tail = arena.allocate(256 * kKiB);  // granule 5
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(kept) % (2 * kMiB), 0u);
  arena.deallocate(x, 7 * kMiB);  // too large to keep: granules 1 and 2 are decommitted
  arena.deallocate(kept, 2 * kMiB);
  ASSERT_EQ(arena.reuse_stats().kept_blocks, 1u);
  ASSERT_EQ(arena.committed_bytes(), 8 * kMiB);  // granules 0, 3, 4, 5
  void* again = arena.allocate(7 * kMiB);
  EXPECT_EQ(again, x);
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 0u);
  EXPECT_EQ(arena.committed_bytes(), 10 * kMiB);  // granules 0-3 and 5: granule 4 went back with the kept block
  EXPECT_EQ(arena.check_invariants(), "");
  for (auto [ptr, bytes] :
       {std::pair{p, 256 * kKiB}, {again, 7 * kMiB}, {q, 256 * kKiB}, {r, 512 * kKiB}, {tail, 256 * kKiB}}) {
    arena.deallocate(ptr, bytes);
  }
  EXPECT_EQ(arena.check_invariants(), "");
}

// Giving kept blocks back only pays when they could hold the request: with fewer kept bytes than it asks, a request
// takes a cached granule (no commit) and the kept block stays.
TEST(ExpandableArenaReuse, KeptBlocksSmallerThanTheRequestStayWhenNoGranuleIsCommitted) {
  ArenaOptions options = reuse_options(64 * kMiB);
  options.release_threshold = 16 * kMiB;
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), options);
  void* big = arena.allocate(6 * kMiB);  // above reuse_max_block: its free leaves granules 0-2 cached
  void* a = arena.allocate(256 * kKiB);
  void* b = arena.allocate(256 * kKiB);
  arena.deallocate(big, 6 * kMiB);
  arena.deallocate(a, 256 * kKiB);
  ASSERT_EQ(arena.reuse_stats().kept_blocks, 1u);
  const std::size_t committed = arena.committed_bytes();
  void* c = arena.allocate(kMiB);  // takes a cached granule
  EXPECT_EQ(arena.committed_bytes(), committed);
  EXPECT_EQ(arena.reuse_stats().flushes, 0u);
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 1u);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(c, kMiB);
  arena.deallocate(b, 256 * kKiB);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArenaReuse, TheOldestKeptBlocksGoBackBeyondReuseBytes) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(64 * kMiB, kMiB));
  std::vector<void*> blocks;
  for (int index = 0; index < 5; ++index) blocks.push_back(arena.allocate(300 * kKiB));
  void* tail = arena.allocate(kKiB);
  for (void* block : blocks) arena.deallocate(block, 300 * kKiB);
  // Three of 300 KiB fit in 1 MiB: the two freed first went back and merged into one free block.
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 3u);
  EXPECT_EQ(arena.reuse_stats().kept_bytes, 900 * kKiB);
  const auto listed = arena.blocks();
  ASSERT_GE(listed.size(), 5u);
  EXPECT_EQ(listed[0].size, 600 * kKiB);
  EXPECT_FALSE(listed[0].in_use);
  EXPECT_EQ(arena.check_invariants(), "");
  // The most recently kept block of the size comes back first.
  EXPECT_EQ(arena.allocate(300 * kKiB), blocks[4]);
  EXPECT_EQ(arena.allocate(300 * kKiB), blocks[3]);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(blocks[4], 300 * kKiB);
  arena.deallocate(blocks[3], 300 * kKiB);
  arena.deallocate(tail, kKiB);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArenaReuse, BlocksAboveTheLargestKeptSizeGoBackAtOnce) {
  ArenaOptions options = reuse_options(64 * kMiB);
  options.reuse_max_block = kMiB;
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), options);
  void* large = arena.allocate(kMiB + 256);
  void* small = arena.allocate(kMiB);
  arena.deallocate(large, kMiB + 256);
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 0u);
  arena.deallocate(small, kMiB);
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 1u);
  EXPECT_EQ(arena.check_invariants(), "");
}

// With no cached granules (threshold 0), a kept block alone holds its granule until it goes back.
TEST(ExpandableArenaReuse, TrimGivesKeptBlocksAndTheirGranulesBack) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(64 * kMiB));
  void* block = arena.allocate(kMiB);
  arena.deallocate(block, kMiB);
  EXPECT_EQ(arena.committed_bytes(), 2 * kMiB);
  arena.trim();
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 0u);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

// Lets every block move, and counts questions about blocks its owner does not hold (owned: the blocks handed out,
// followed through their moves).
class OwnerRelocator final : public tp::memory::Relocator {
 public:
  explicit OwnerRelocator(std::set<std::uintptr_t> blocks) : owned(std::move(blocks)) {}
  bool can_move(const void* ptr, std::size_t /*bytes*/) override {
    if (!owned.contains(address(ptr))) ++strangers;
    return true;
  }
  void relocated(void* from, void* to, std::size_t /*bytes*/) noexcept override {
    if (owned.erase(address(from)) == 0) ++strangers;
    owned.insert(address(to));
    moved[address(from)] = to;
  }
  std::set<std::uintptr_t> owned;
  std::map<std::uintptr_t, void*> moved;
  int strangers = 0;
};

TEST(ExpandableArenaReuse, CompactionGivesKeptBlocksBackAndNeverMovesThem) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(64 * kMiB));
  void* low = arena.allocate(kMiB);
  void* high = arena.allocate(kMiB);
  void* top = arena.allocate(3 * kMiB);
  arena.deallocate(low, kMiB);  // kept
  ASSERT_EQ(arena.reuse_stats().kept_blocks, 1u);
  OwnerRelocator relocator({address(high), address(top)});
  const tp::memory::CompactionResult result = arena.compact(relocator);
  EXPECT_GT(result.blocks_moved, 0u) << "the kept block's room, given back, is what compaction fills";
  EXPECT_EQ(relocator.strangers, 0);
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 0u);
  EXPECT_EQ(arena.check_invariants(), "");
  // Follows a block through its moves (a pass may move a moved block again).
  const auto where = [&relocator](void* ptr) {
    for (auto moved = relocator.moved.find(address(ptr)); moved != relocator.moved.end();
         moved = relocator.moved.find(address(ptr))) {
      if (moved->second == ptr) break;
      ptr = moved->second;
    }
    return ptr;
  };
  arena.deallocate(where(high), kMiB);
  arena.deallocate(where(top), 3 * kMiB);
  EXPECT_EQ(arena.stats().bytes_in_use, 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArenaReuse, SizesThatDoNotRepeatPauseKeeping) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(256 * kMiB));
  void* anchor = arena.allocate(kKiB);
  // Each size once: every free is kept, and no request ever takes a kept block.
  const std::uint64_t round = ExpandableArena::kReuseRound;
  for (std::uint64_t index = 0; index < round; ++index) {
    const std::size_t bytes = 256 * (1 + index);
    arena.deallocate(arena.allocate(bytes), bytes);
  }
  const ReuseStats stats = arena.reuse_stats();
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.pauses, 1u);
  EXPECT_TRUE(stats.paused);
  EXPECT_EQ(stats.kept_blocks, 0u);
  void* block = arena.allocate(4 * kKiB);
  arena.deallocate(block, 4 * kKiB);
  EXPECT_EQ(arena.reuse_stats().kept_blocks, 0u);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(anchor, kKiB);
}

TEST(ExpandableArenaReuse, SizesThatRepeatKeepKeeping) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(256 * kMiB));
  for (std::uint64_t index = 0; index < 2 * ExpandableArena::kReuseRound; ++index) {
    const std::size_t bytes = 256 * (1 + index % 4);
    arena.deallocate(arena.allocate(bytes), bytes);
  }
  const ReuseStats stats = arena.reuse_stats();
  EXPECT_EQ(stats.pauses, 0u);
  EXPECT_FALSE(stats.paused);
  EXPECT_GT(stats.hits, ExpandableArena::kReuseRound);
}

TEST(ExpandableArenaReuseDeathTest, FreeingAKeptBlockAgainAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), reuse_options(16 * kMiB));
  void* anchor = arena.allocate(kKiB);
  void* ptr = arena.allocate(1000);
  arena.deallocate(ptr, 1000);
  ASSERT_EQ(arena.reuse_stats().kept_blocks, 1u);
  EXPECT_DEATH(arena.deallocate(ptr, 1000), "did not hand out");
  arena.deallocate(anchor, kKiB);
}

TEST(ExpandableArenaReuse, TheExpandableStacksKeepByDefaultAndZeroTurnsItOff) {
  MemoryConfig config;
  config.allocator = tp::memory::AllocatorKind::expandable;
  config.tracking = false;
  const auto keeping = tp::memory::make_sim_device_memory_stack(config, 64 * kMiB);
  const auto* arena = dynamic_cast<const ExpandableArena*>(&keeping->allocator());
  ASSERT_NE(arena, nullptr);
  EXPECT_EQ(arena->options().reuse_bytes, MemoryConfig::kDefaultReuseBytes);
  // Through the stack: a freed block leaves the in-use bytes at once, and its request is served again.
  void* block = keeping->allocate(4096);
  keeping->deallocate(block, 4096);
  EXPECT_EQ(keeping->stats().bytes_in_use, 0u);
  EXPECT_EQ(keeping->allocate(4096), block);
  EXPECT_EQ(keeping->stats().num_allocs, 2u);
  EXPECT_EQ(keeping->stats().num_frees, 1u);
  keeping->deallocate(block, 4096);
  config.reuse_bytes = 0;
  const auto plain = tp::memory::make_sim_device_memory_stack(config, 64 * kMiB);
  EXPECT_EQ(dynamic_cast<const ExpandableArena*>(&plain->allocator())->options().reuse_bytes, 0u);
}

}  // namespace
