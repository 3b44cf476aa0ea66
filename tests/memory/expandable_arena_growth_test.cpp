// SPDX-License-Identifier: Apache-2.0
// Reclaim before growing (issue 23, growth_pressure.hpp): a trace whose holes would make the arena grow past
// 1.05 x live stays within it when the arena compacts before growing (every byte of every block checked at its
// free, so every moved byte is checked); evacuation moves one block per granule it frees and never a pinned one;
// random operations keep every invariant and byte while blocks are evacuated and slide; a trace that only grows
// never compacts; a thread cache on the growth hook gives its blocks back before the arena grows; bad options are
// refused naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/replay.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"
#include "tensorpool/memory/thread_cache_adaptor.hpp"
#include "tensorpool/memory/trace.hpp"

namespace {

using tp::kMiB;
using tp::memory::MemoryConfig;
using tp::memory::ReplayResult;
using tp::memory::SimDeviceMemory;
using tp::memory::Trace;
using tp::memory::TraceAction;
using tp::memory::TraceEvent;

constexpr std::size_t kGranule = SimDeviceMemory::kGranularity;
constexpr std::size_t kSmall = kMiB - 4096;  // two per granule

// Events on one thread, each allocation at a pointer of its own.
class TraceBuilder {
 public:
  std::uintptr_t allocate(std::size_t bytes) {
    const std::uintptr_t pointer = next_pointer_;
    next_pointer_ += 0x10000000;
    events_.push_back(TraceEvent{0, 0, TraceAction::allocate, pointer, bytes, 0});
    sizes_.push_back(bytes);
    pointers_.push_back(pointer);
    return pointer;
  }
  void free(std::size_t allocation) {
    events_.push_back(TraceEvent{0, 0, TraceAction::free, pointers_[allocation], sizes_[allocation], 0});
  }
  Trace build() const { return Trace("growth_test", events_); }

 private:
  std::vector<TraceEvent> events_;
  std::vector<std::size_t> sizes_;
  std::vector<std::uintptr_t> pointers_;
  std::uintptr_t next_pointer_ = 0x10000000;
};

// 64 small blocks pin 32 granules; every other one goes; then 40 MiB of large blocks arrive (the peak of live
// bytes), which no hole holds. Without moving, the arena grows past the holes: 104 MiB for 72 MiB live.
Trace holes_then_large_blocks() {
  TraceBuilder builder;
  for (int index = 0; index < 64; ++index) builder.allocate(kSmall);
  for (std::size_t index = 1; index < 64; index += 2) builder.free(index);
  for (int index = 0; index < 5; ++index) builder.allocate(8 * kMiB);
  for (std::size_t index = 0; index < 64; index += 2) builder.free(index);
  for (std::size_t index = 64; index < 69; ++index) builder.free(index);
  return builder.build();
}

MemoryConfig expandable_config(bool compact_before_growth) {
  MemoryConfig config = tp::memory::replay_memory_config(tp::memory::ReplayAllocator::expandable);
  config.compact_before_growth = compact_before_growth;
  return config;
}

ReplayResult replay_on(const Trace& trace, const MemoryConfig& config) {
  const auto stack = tp::memory::make_sim_device_memory_stack(config, 256 * kMiB);
  tp::memory::ReplayOptions options;
  options.compact = tp::memory::compactable_arena(*stack);
  options.check_contents = true;  // every byte of every block, checked at its free
  EXPECT_NE(options.compact, nullptr);
  const ReplayResult result = tp::memory::replay(trace, *stack, options);
  EXPECT_EQ(options.compact->check_invariants(), "");
  return result;
}

double bound(const ReplayResult& result) {
  return 1.05 * static_cast<double>(result.peak_live_bytes) + static_cast<double>(kGranule);
}

TEST(ExpandableArenaGrowth, CompactingBeforeGrowthKeepsATraceWithinTheSlack) {
  const Trace trace = holes_then_large_blocks();
  const ReplayResult without = replay_on(trace, expandable_config(false));
  EXPECT_GT(static_cast<double>(without.peak_reserved_bytes), bound(without)) << "the trace fragments the arena";
  EXPECT_EQ(without.compaction.before_growth, 0u);

  const ReplayResult with = replay_on(trace, expandable_config(true));
  EXPECT_EQ(with.oom_count, 0u);
  EXPECT_LE(static_cast<double>(with.peak_reserved_bytes), bound(with))
      << "reserved " << with.peak_reserved_bytes << " for " << with.peak_live_bytes << " live";
  // Evacuation frees granules for the first large blocks; once no granule is cheap to empty, sliding packs
  // the rest.
  EXPECT_GE(with.compaction.before_growth, 2u);
  EXPECT_GE(with.compaction.blocks_moved, 16u);
  EXPECT_GE(with.compaction.granules_freed, 15u);
  EXPECT_EQ(with.compaction.compactions, 0u) << "nothing was refused";
}

// Eight granules each keep one 256 KiB block of eight, eight others lack one: before each large block grows the
// arena, evacuation moves a sparse granule's block into a dense granule's hole, one block per granule freed, and
// nothing slides (sliding would copy every block above the first hole).
TEST(ExpandableArenaGrowth, EvacuationMovesOneBlockPerGranuleItFrees) {
  constexpr std::size_t kBlock = kGranule / 8;
  TraceBuilder builder;
  for (int index = 0; index < 128; ++index) builder.allocate(kBlock);
  for (std::size_t granule = 0; granule < 8; ++granule) {
    for (std::size_t block = 1; block < 8; ++block) builder.free(granule * 8 + block);
  }
  for (std::size_t granule = 8; granule < 16; ++granule) builder.free(granule * 8);  // not the tail: it is cut off
  for (int index = 0; index < 3; ++index) builder.allocate(8 * kMiB);
  const Trace trace = builder.build();

  const ReplayResult without = replay_on(trace, expandable_config(false));
  EXPECT_EQ(without.peak_reserved_bytes, 56 * kMiB) << "the large blocks grow past the holes";

  const ReplayResult with = replay_on(trace, expandable_config(true));
  EXPECT_EQ(with.oom_count, 0u);
  EXPECT_EQ(with.peak_live_bytes, 40 * kMiB);
  EXPECT_EQ(with.peak_reserved_bytes, 40 * kMiB) << "the third large block grows the arena by itself only";
  EXPECT_EQ(with.compaction.before_growth, 2u);
  EXPECT_EQ(with.compaction.blocks_moved, 8u);
  EXPECT_EQ(with.compaction.bytes_copied, 8 * kBlock);
  EXPECT_EQ(with.compaction.granules_freed, 8u);
}

// A trace that only grows leaves nothing free inside the reservation: growth never compacts.
TEST(ExpandableArenaGrowth, ATraceThatOnlyGrowsNeverCompacts) {
  TraceBuilder builder;
  for (int index = 0; index < 60; ++index) builder.allocate(3 * kMiB + 512 * static_cast<std::size_t>(index));
  for (std::size_t index = 0; index < 60; ++index) builder.free(index);
  const ReplayResult result = replay_on(builder.build(), expandable_config(true));
  EXPECT_GT(result.compaction.growth_requests, 30u);
  EXPECT_EQ(result.compaction.before_growth, 0u);
  EXPECT_EQ(result.compaction.blocks_moved, 0u);
}

// Blocks a thread cache keeps stay allocated in the arena: a cache composed over the arena by hand (no
// MemoryStack builds one there) that sets the growth hook to its flush gives them back before the arena grows.
TEST(ExpandableArenaGrowth, AThreadCacheOnTheGrowthHookGivesItsBlocksBackBeforeTheArenaGrows) {
  for (const bool flush : {false, true}) {
    SCOPED_TRACE(flush ? "flush before growth" : "no flush");
    tp::memory::ArenaOptions options;
    options.limit_bytes = 64 * kMiB;
    auto owned = std::make_unique<tp::memory::ExpandableArena>(std::make_unique<SimDeviceMemory>(64 * kMiB), options);
    tp::memory::ExpandableArena& arena = *owned;
    tp::memory::ThreadCacheAdaptor cache(std::move(owned));
    if (flush) arena.set_growth_hook([&cache] { return cache.flush() != 0; });
    std::vector<void*> blocks;
    for (int index = 0; index < 4; ++index) blocks.push_back(cache.allocate(512 * 1024));
    for (void* block : blocks) cache.deallocate(block, 512 * 1024);
    ASSERT_EQ(cache.cached_blocks(), 4u) << "the four blocks fill one granule, cached";
    void* large = cache.allocate(2 * kMiB);  // bypasses the cache: the arena must find a granule
    EXPECT_EQ(cache.cached_blocks(), flush ? 0u : 4u);
    EXPECT_EQ(arena.stats().peak_bytes_reserved, flush ? kGranule : 2 * kGranule);
    EXPECT_EQ(arena.growth_pressure_stats().hooks_released, flush ? 1u : 0u);
    EXPECT_EQ(arena.growth_pressure_stats().growth_avoided, flush ? 1u : 0u);
    cache.deallocate(large, 2 * kMiB);
    EXPECT_EQ(arena.check_invariants(), "");
  }
}

// The arena's blocks by pointer, each filled with bytes of its own; every block may move.
class MovableBlocks final : public tp::memory::Relocator {
 public:
  void* add(tp::memory::ExpandableArena& arena, std::size_t bytes, unsigned char seed) {
    void* ptr = arena.allocate(bytes);
    std::vector<unsigned char> contents(bytes);
    for (std::size_t index = 0; index < bytes; ++index) contents[index] = static_cast<unsigned char>(seed + index * 13);
    std::memcpy(ptr, contents.data(), bytes);
    blocks_.emplace(ptr, std::move(contents));
    return ptr;
  }
  void remove_at(tp::memory::ExpandableArena& arena, std::size_t position) {
    auto found = std::next(blocks_.begin(), static_cast<std::ptrdiff_t>(position));
    arena.deallocate(found->first, found->second.size());
    blocks_.erase(found);
  }
  void remove(tp::memory::ExpandableArena& arena, void* ptr) {
    const auto found = blocks_.find(ptr);
    ASSERT_NE(found, blocks_.end());
    remove_at(arena, static_cast<std::size_t>(std::distance(blocks_.begin(), found)));
  }
  // A pinned block may never move (its owner cannot update every pointer to it).
  void pin(const void* ptr) { pinned_.insert(ptr); }
  bool can_move(const void* ptr, std::size_t /*bytes*/) override { return pinned_.count(ptr) == 0; }
  void relocated(void* from, void* to, std::size_t bytes) noexcept override {
    auto node = blocks_.extract(from);
    EXPECT_FALSE(node.empty());
    EXPECT_EQ(node.mapped().size(), bytes);
    node.key() = to;
    blocks_.insert(std::move(node));
    ++moves_;
  }
  std::size_t size() const { return blocks_.size(); }
  bool holds(void* ptr) const { return blocks_.count(ptr) != 0; }  // a block of it starts at ptr now
  std::size_t moves() const { return moves_; }
  // "" when every block holds its bytes.
  std::string check() const {
    for (const auto& [ptr, contents] : blocks_) {
      if (std::memcmp(ptr, contents.data(), contents.size()) != 0) {
        return "a block of " + std::to_string(contents.size()) + " bytes lost its bytes";
      }
    }
    return "";
  }

 private:
  std::map<void*, std::vector<unsigned char>> blocks_;
  std::set<const void*> pinned_;
  std::size_t moves_ = 0;
};

// Random allocations and frees with compaction before every growth the slack allows (slack 0), by evacuation
// and by sliding: the invariants hold after every operation, every byte of every block after every 25 and at
// the end.
TEST(ExpandableArenaGrowth, EvacuatingAndSlidingKeepInvariantsAndBytesUnderRandomOperations) {
  for (const std::uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    SimDeviceMemory device(96 * kMiB);
    tp::memory::ArenaOptions options;
    options.limit_bytes = 96 * kMiB;
    options.release_threshold = 0;
    options.release_decay_events = 0;
    options.compact_before_growth = true;
    options.compaction_slack = 0.0;
    tp::memory::ExpandableArena arena(device, options);
    MovableBlocks blocks;
    arena.set_relocator(&blocks);
    std::mt19937 random(seed);
    std::uniform_int_distribution<std::size_t> size_of(1, 3 * kMiB);
    for (int step = 0; step < 600; ++step) {
      const bool grow = blocks.size() < 8 || (blocks.size() < 32 && random() % 2 == 0);
      if (grow) {
        blocks.add(arena, size_of(random), static_cast<unsigned char>(step));
      } else {
        blocks.remove_at(arena, random() % blocks.size());
      }
      ASSERT_EQ(arena.check_invariants(), "") << "after step " << step;
      if (step % 25 == 0) {
        ASSERT_EQ(blocks.check(), "") << "after step " << step;
      }
    }
    EXPECT_EQ(blocks.check(), "");
    const tp::memory::GrowthPressureStats growth = arena.growth_pressure_stats();
    EXPECT_GT(growth.evacuations, 0u) << "no granule was evacuated";
    EXPECT_GT(growth.compactions, growth.evacuations) << "nothing slid";
    EXPECT_EQ(growth.blocks_moved, blocks.moves());
    EXPECT_GT(blocks.moves(), 0u);
    EXPECT_EQ(arena.stats().num_compactions, growth.compactions) << "the stats count every compaction that moved";
    EXPECT_EQ(arena.stats().bytes_compacted, growth.bytes_copied + growth.bytes_remapped);
    arena.set_relocator(nullptr);
    while (blocks.size() != 0) blocks.remove_at(arena, 0);
    EXPECT_EQ(arena.check_invariants(), "");
  }
}

// The layout of EvacuationMovesOneBlockPerGranuleItFrees on the arena itself, with the one block left in each of
// the first four sparse granules pinned: evacuation empties the other four sparse granules (one move each) and
// never touches a pinned block, which keeps its address and bytes.
TEST(ExpandableArenaGrowth, EvacuationLeavesPinnedBlocksWhereTheyAre) {
  constexpr std::size_t kBlock = kGranule / 8;
  SimDeviceMemory device(96 * kMiB);
  tp::memory::ArenaOptions options;
  options.limit_bytes = 96 * kMiB;
  options.compact_before_growth = true;
  tp::memory::ExpandableArena arena(device, options);
  MovableBlocks blocks;
  arena.set_relocator(&blocks);
  std::vector<void*> placed;
  for (int index = 0; index < 128; ++index)
    placed.push_back(blocks.add(arena, kBlock, static_cast<unsigned char>(index)));
  for (std::size_t granule = 0; granule < 8; ++granule) {
    for (std::size_t block = 1; block < 8; ++block) blocks.remove(arena, placed[granule * 8 + block]);
  }
  for (std::size_t granule = 8; granule < 16; ++granule) blocks.remove(arena, placed[granule * 8]);
  for (std::size_t granule = 0; granule < 4; ++granule) blocks.pin(placed[granule * 8]);

  blocks.add(arena, 8 * kMiB, 200);
  EXPECT_EQ(arena.check_invariants(), "");
  EXPECT_EQ(blocks.check(), "");
  const tp::memory::GrowthPressureStats growth = arena.growth_pressure_stats();
  EXPECT_EQ(growth.evacuations, 1u);
  EXPECT_EQ(growth.blocks_moved, 4u);
  EXPECT_EQ(blocks.moves(), 4u);
  EXPECT_EQ(arena.committed_bytes(), 32 * kMiB) << "the large block took the four emptied granules";
  for (std::size_t granule = 0; granule < 4; ++granule) {
    EXPECT_TRUE(blocks.holds(placed[granule * 8])) << "the pinned block of granule " << granule << " moved";
  }
  arena.set_relocator(nullptr);
  while (blocks.size() != 0) blocks.remove_at(arena, 0);
  EXPECT_EQ(arena.check_invariants(), "");
}

// A hook that breaks its promise not to throw: the exception reaches the caller (not swallowed), the arena's
// lock is taken back before the caller's guard releases it, and the arena serves the next request.
TEST(ExpandableArenaGrowth, AHookThatThrowsLeavesTheArenaUsable) {
  SimDeviceMemory device(32 * kMiB);
  tp::memory::ArenaOptions options;
  options.limit_bytes = 32 * kMiB;
  tp::memory::ExpandableArena arena(device, options);
  bool armed = true;
  arena.set_growth_hook([&armed]() -> bool {
    if (armed) throw std::runtime_error("hook failed");
    return false;
  });
  EXPECT_THROW(static_cast<void>(arena.allocate(kGranule)), std::runtime_error);
  armed = false;
  void* block = arena.allocate(kGranule);
  EXPECT_NE(block, nullptr);
  arena.deallocate(block, kGranule);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ExpandableArenaGrowth, RejectsBadOptionsNamingThem) {
  const auto refused = [](const tp::memory::ArenaOptions& options, const std::string& named) {
    SimDeviceMemory device(64 * kMiB);
    try {
      tp::memory::ExpandableArena arena(device, options);
      ADD_FAILURE() << "accepted options naming " << named;
    } catch (const tp::InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(named), std::string::npos) << error.what();
    }
  };
  for (const double slack : {-0.01, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    tp::memory::ArenaOptions options;
    options.limit_bytes = 64 * kMiB;
    options.compaction_slack = slack;
    refused(options, "compaction_slack");
    MemoryConfig config = expandable_config(true);
    config.compaction_slack = slack;
    EXPECT_THROW(
        {
          try {
            config.validate();
          } catch (const tp::InvalidArgument& error) {
            EXPECT_NE(std::string(error.what()).find("compaction_slack"), std::string::npos) << error.what();
            throw;
          }
        },
        tp::InvalidArgument);
  }
  tp::memory::ArenaOptions shared;
  shared.limit_bytes = 64 * kMiB;
  shared.share_granules = true;
  shared.compact_before_growth = true;
  refused(shared, "compact_before_growth");
  MemoryConfig config = expandable_config(true);
  config.share_granules = true;
  try {
    config.validate();
    ADD_FAILURE() << "compact_before_growth with share_granules accepted";
  } catch (const tp::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("compact_before_growth"), std::string::npos) << error.what();
  }
}

}  // namespace
