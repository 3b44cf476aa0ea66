// SPDX-License-Identifier: Apache-2.0
// Reclaim before growing (issue 23, growth_pressure.hpp): a trace whose holes would make the arena grow past
// 1.05 x live stays within it when the arena compacts before growing (every byte of every block checked at its
// free, so every moved byte is checked); a trace that only grows never compacts; the thread caches give their
// blocks back before the arena grows; bad options are refused naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/replay.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"
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
  // One compaction packs the small blocks; the large blocks that follow grow the arena by what they need only.
  EXPECT_EQ(with.compaction.before_growth, 1u);
  EXPECT_GE(with.compaction.blocks_moved, 16u);
  EXPECT_GE(with.compaction.granules_freed, 15u);
  EXPECT_EQ(with.compaction.compactions, 0u) << "nothing was refused";
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

// Blocks a thread cache keeps stay allocated in the arena: before it grows, the caches give them back.
TEST(ExpandableArenaGrowth, TheThreadCachesGiveTheirBlocksBackBeforeTheArenaGrows) {
  for (const bool flush : {false, true}) {
    SCOPED_TRACE(flush ? "flush before growth" : "no flush");
    MemoryConfig config = expandable_config(false);
    config.flush_caches_before_growth = flush;
    const auto stack = tp::memory::make_sim_device_memory_stack(config, 64 * kMiB);
    ASSERT_NE(stack->thread_cache(), nullptr);
    std::vector<void*> blocks;
    for (int index = 0; index < 4; ++index) blocks.push_back(stack->allocate(512 * 1024));
    for (void* block : blocks) stack->deallocate(block, 512 * 1024);
    ASSERT_EQ(stack->thread_cache()->cached_blocks(), 4u) << "the four blocks fill one granule, cached";
    void* large = stack->allocate(2 * kMiB);  // bypasses the caches: the arena must find a granule
    const auto* arena = dynamic_cast<const tp::memory::ExpandableArena*>(&stack->allocator());
    ASSERT_NE(arena, nullptr);
    EXPECT_EQ(stack->thread_cache()->cached_blocks(), flush ? 0u : 4u);
    EXPECT_EQ(stack->stats().peak_bytes_reserved, flush ? kGranule : 2 * kGranule);
    EXPECT_EQ(arena->growth_pressure_stats().hooks_released, flush ? 1u : 0u);
    EXPECT_EQ(arena->growth_pressure_stats().growth_avoided, flush ? 1u : 0u);
    stack->deallocate(large, 2 * kMiB);
    EXPECT_EQ(arena->check_invariants(), "");
  }
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
