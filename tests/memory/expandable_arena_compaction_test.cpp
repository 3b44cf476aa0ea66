// SPDX-License-Identifier: Apache-2.0
// Compaction (issue 23): ExpandableArena::compact moves only what the relocator lets move, keeps every
// invariant and every byte, remaps whole granules; the fragmenting trace runs out of memory under bfc and the
// expandable arena with free memory available, and replays without an OOM at the same capacity once the
// replay compacts (contents checked after every move).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "memory/support/failing_new.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/compaction.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/replay.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace {

using tp::kMiB;
using tp::memory::ArenaOptions;
using tp::memory::CompactionResult;
using tp::memory::ExpandableArena;
using tp::memory::ReplayAllocator;
using tp::memory::SimDeviceMemory;

constexpr std::size_t kGranule = SimDeviceMemory::kGranularity;
constexpr std::size_t kBytes = 64 * kMiB;  // the overlapping resource's buffer

ArenaOptions options(std::size_t limit, bool share = false) {
  ArenaOptions result;
  result.limit_bytes = limit;
  result.release_threshold = 0;  // committed bytes show exactly what live blocks pin
  result.share_granules = share;
  return result;
}

// Owns blocks by pointer, each filled with its own bytes; lets every block move except the pinned ones.
class Owner final : public tp::memory::Relocator {
 public:
  void* add(ExpandableArena& arena, std::size_t bytes) {
    void* ptr = arena.allocate(bytes);
    const auto seed = static_cast<unsigned char>(blocks_.size() * 37 + 11);
    std::vector<unsigned char> contents(bytes);
    for (std::size_t index = 0; index < bytes; ++index) contents[index] = static_cast<unsigned char>(seed + index * 7);
    std::memcpy(ptr, contents.data(), bytes);
    blocks_[ptr] = std::move(contents);
    return ptr;
  }
  void remove(ExpandableArena& arena, void* ptr) {
    arena.deallocate(ptr, blocks_.at(ptr).size());
    blocks_.erase(ptr);
  }
  void pin(void* ptr) { pinned_.insert(ptr); }
  // Room for `count` moves, so that relocated() (noexcept) does not allocate.
  void reserve_moves(std::size_t count) { moves_.reserve(count); }
  bool can_move(const void* ptr, std::size_t bytes) override {
    EXPECT_EQ(blocks_.at(const_cast<void*>(ptr)).size(), bytes);
    return !pinned_.contains(ptr);
  }
  void relocated(void* from, void* to, std::size_t bytes) noexcept override {
    auto node = blocks_.extract(from);
    EXPECT_FALSE(node.empty());
    EXPECT_EQ(node.mapped().size(), bytes);
    EXPECT_FALSE(pinned_.contains(from)) << "a pinned block moved";
    moves_.emplace_back(from, to);
    node.key() = to;
    blocks_.insert(std::move(node));
  }
  // "" when every block holds its bytes.
  std::string check() const {
    for (const auto& [ptr, contents] : blocks_) {
      if (std::memcmp(ptr, contents.data(), contents.size()) != 0)
        return "block of " + std::to_string(contents.size()) + " bytes lost its bytes";
    }
    return "";
  }
  const std::map<void*, std::vector<unsigned char>>& blocks() const { return blocks_; }
  const std::vector<std::pair<void*, void*>>& moves() const { return moves_; }

 private:
  std::map<void*, std::vector<unsigned char>> blocks_;
  std::set<const void*> pinned_;
  std::vector<std::pair<void*, void*>> moves_;
};

// Two blocks per granule, then every other one freed: every granule stays pinned by one live block.
TEST(ExpandableArenaCompaction, PacksHalfEmptyGranulesAndServesTheRequest) {
  SimDeviceMemory device(32 * kMiB);
  ExpandableArena arena(device, options(32 * kMiB));
  Owner owner;
  std::vector<void*> blocks;
  for (int index = 0; index < 32; ++index) blocks.push_back(owner.add(arena, kMiB - 4096));
  for (std::size_t index = 1; index < blocks.size(); index += 2) owner.remove(arena, blocks[index]);
  ASSERT_EQ(arena.committed_bytes(), 32 * kMiB) << "every granule holds a live block";
  EXPECT_THROW((void)arena.allocate(8 * kMiB), tp::OutOfMemoryError) << "16 MiB free, but in 1 MiB holes";

  const CompactionResult result = arena.compact(owner);
  EXPECT_TRUE(result.ran);
  EXPECT_EQ(arena.check_invariants(), "");
  EXPECT_EQ(owner.check(), "");
  EXPECT_GT(result.blocks_moved, 0u);
  EXPECT_EQ(result.blocks_moved, owner.moves().size());
  EXPECT_EQ(result.bytes_copied, result.blocks_moved * (kMiB - 4096)) << "small blocks are copied";
  EXPECT_GE(result.granules_freed, 6u);
  EXPECT_EQ(result.committed_after, arena.committed_bytes());
  EXPECT_EQ(result.committed_before - result.committed_after, result.granules_freed * kGranule);
  for (const auto& [from, to] : owner.moves()) EXPECT_LT(to, from) << "blocks only move down";

  void* large = arena.allocate(8 * kMiB);  // served now, at the same limit
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(large, 8 * kMiB);
  for (const auto& [ptr, contents] : std::map(owner.blocks())) owner.remove(arena, ptr);
  EXPECT_EQ(arena.check_invariants(), "");
  (void)arena.trim();
  EXPECT_EQ(arena.committed_bytes(), 0u);
}

// Bookkeeping that cannot grow stops the compaction: the moves made stand (each reported), nothing is lost,
// and a throw leaves only before the first move.
TEST(ExpandableArenaCompaction, AllocationFailuresStopItCleanly) {
  bool completed = false;
  std::size_t full = 0;              // moves of the whole compaction
  std::vector<std::size_t> stopped;  // moves of compactions a failure stopped
  for (long succeed = 0; !completed && succeed < 200; ++succeed) {
    SCOPED_TRACE(succeed);
    SimDeviceMemory device(32 * kMiB);
    ExpandableArena arena(device, options(32 * kMiB));
    Owner owner;
    owner.reserve_moves(64);
    // A small block on top moves first, into the 1 MiB hole; then the large one (three granules: more
    // bookkeeping room than the first move needed) into the 6 MiB hole.
    void* low = owner.add(arena, 6 * kMiB);
    (void)owner.add(arena, kMiB);
    void* gap = owner.add(arena, kMiB);
    (void)owner.add(arena, 5 * kMiB);
    (void)owner.add(arena, kMiB / 2);
    owner.remove(arena, low);
    owner.remove(arena, gap);
    CompactionResult result;
    bool threw = false;
    long used = 0;
    {
      const tp::test::FailAllocations fail(succeed);
      try {
        result = arena.compact(owner);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      used = tp::test::FailAllocations::attempted();
    }
    ASSERT_EQ(arena.check_invariants(), "");
    ASSERT_EQ(owner.check(), "");
    if (threw) {
      EXPECT_TRUE(owner.moves().empty()) << "a throw only before anything moved";
    } else {
      EXPECT_EQ(result.blocks_moved, owner.moves().size());
      completed = used < succeed;  // no allocation failed: the full compaction
      (completed ? full : stopped.emplace_back()) = result.blocks_moved;
    }
    for (const auto& [ptr, contents] : std::map(owner.blocks())) owner.remove(arena, ptr);
    ASSERT_EQ(arena.check_invariants(), "");
  }
  EXPECT_TRUE(completed) << "some budget lets the whole compaction run";
  EXPECT_TRUE(std::any_of(stopped.begin(), stopped.end(), [full](std::size_t moved) {
    return moved > 0 && moved < full;
  })) << "some failure stopped a compaction part-way";
}

TEST(ExpandableArenaCompaction, NeverMovesABlockItsOwnerPinned) {
  SimDeviceMemory device(32 * kMiB);
  ExpandableArena arena(device, options(32 * kMiB));
  Owner owner;
  std::vector<void*> blocks;
  for (int index = 0; index < 16; ++index) blocks.push_back(owner.add(arena, kMiB));
  for (std::size_t index = 0; index < blocks.size(); index += 2) owner.remove(arena, blocks[index]);
  for (std::size_t index = 1; index < blocks.size(); index += 4) owner.pin(blocks[index]);
  const CompactionResult result = arena.compact(owner);
  EXPECT_EQ(arena.check_invariants(), "");
  EXPECT_EQ(owner.check(), "");
  EXPECT_GT(result.blocks_moved, 0u);
  for (std::size_t index = 1; index < blocks.size(); index += 4) {
    EXPECT_TRUE(owner.blocks().contains(blocks[index])) << "pinned block " << index << " moved";
  }
}

// A large block of whole granules that keeps its offset within a granule moves by remapping, not copying.
TEST(ExpandableArenaCompaction, RemapsWholeGranulesOfALargeBlock) {
  SimDeviceMemory device(32 * kMiB);
  ExpandableArena arena(device, options(32 * kMiB));
  Owner owner;
  void* low = owner.add(arena, 6 * kMiB);    // granules 0-2
  void* keep = owner.add(arena, kMiB);       // granule 3
  void* pad = owner.add(arena, kMiB);        // granule 3
  void* large = owner.add(arena, 6 * kMiB);  // granules 4-6
  void* top = owner.add(arena, 2 * kMiB);    // granule 7
  owner.pin(keep);
  owner.pin(top);
  owner.remove(arena, low);
  owner.remove(arena, pad);
  const CompactionResult result = arena.compact(owner);
  EXPECT_EQ(arena.check_invariants(), "");
  EXPECT_EQ(owner.check(), "");
  ASSERT_EQ(result.blocks_moved, 1u);
  EXPECT_EQ(owner.moves()[0], std::make_pair(large, static_cast<void*>(low))) << "into the lowest hole";
  EXPECT_EQ(result.bytes_remapped, 6 * kMiB);
  EXPECT_EQ(result.bytes_copied, 0u);
  EXPECT_EQ(arena.committed_bytes(), 5 * kGranule) << "three granules of the large block, keep's and top's";
}

TEST(ExpandableArenaCompaction, AFailureAfterCompactionSaysWhatItRecovered) {
  SimDeviceMemory device(16 * kMiB);
  ExpandableArena arena(device, options(16 * kMiB));
  Owner owner;
  std::vector<void*> blocks;
  for (int index = 0; index < 16; ++index) blocks.push_back(owner.add(arena, kMiB));
  for (std::size_t index = 1; index < blocks.size(); index += 2) owner.remove(arena, blocks[index]);
  const CompactionResult result = arena.compact(owner);
  ASSERT_TRUE(result.ran);
  try {
    (void)arena.allocate(12 * kMiB);  // 8 MiB live: more than the limit leaves even packed
    FAIL() << "no throw";
  } catch (const tp::OutOfMemoryError& error) {
    ASSERT_TRUE(error.report().compaction.has_value());
    EXPECT_EQ(error.report().compaction->blocks_moved, result.blocks_moved);
    EXPECT_NE(std::string(error.what()).find("Compaction ran before this request: it moved"), std::string::npos)
        << error.what();
  }
  void* small = arena.allocate(kMiB);  // a served request ends the compaction's report
  try {
    (void)arena.allocate(12 * kMiB);
    FAIL() << "no throw";
  } catch (const tp::OutOfMemoryError& error) {
    EXPECT_FALSE(error.report().compaction.has_value());
  }
  arena.deallocate(small, kMiB);
}

TEST(ExpandableArenaCompaction, DoesNotRunWithSharedGranules) {
  SimDeviceMemory device(16 * kMiB);
  ExpandableArena arena(device, options(16 * kMiB, /*share=*/true));
  Owner owner;
  void* first = owner.add(arena, kMiB);
  (void)owner.add(arena, kMiB);
  owner.remove(arena, first);
  const CompactionResult result = arena.compact(owner);
  EXPECT_FALSE(result.ran);
  EXPECT_EQ(result.blocks_moved, 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

// A randomized pass: random sizes (some of whole granules), random frees, random pins; after every
// compaction the invariants and every byte hold, and pinned blocks stay.
TEST(ExpandableArenaCompaction, RandomLayoutsKeepInvariantsAndBytes) {
  std::size_t copied = 0;
  std::size_t remapped = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    SimDeviceMemory device(96 * kMiB);
    ExpandableArena arena(device, options(96 * kMiB));
    Owner owner;
    std::uint64_t state = seed * 0x9e3779b97f4a7c15ULL;
    auto next = [&state](std::uint64_t bound) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      return state % bound;
    };
    std::vector<void*> live;
    std::size_t used = 0;
    for (int step = 0; step < 60; ++step) {
      const std::size_t bytes = next(4) == 0 ? kGranule * (1 + next(3)) + 256 * next(3) : 256 * (1 + next(6000));
      if (used + bytes > 64 * kMiB) break;
      live.push_back(owner.add(arena, bytes));
      used += bytes;
    }
    std::vector<void*> kept;
    for (void* ptr : live) {
      if (next(2) == 0) {
        owner.remove(arena, ptr);
      } else {
        kept.push_back(ptr);
        if (next(5) == 0) owner.pin(ptr);
      }
    }
    const std::size_t committed = arena.committed_bytes();
    const CompactionResult result = arena.compact(owner);
    ASSERT_EQ(arena.check_invariants(), "");
    ASSERT_EQ(owner.check(), "");
    EXPECT_LE(arena.committed_bytes(), committed) << "compaction never takes more granules than it frees";
    EXPECT_EQ(result.blocks_moved, owner.moves().size());
    copied += result.bytes_copied;
    remapped += result.bytes_remapped;
    for (const auto& [ptr, contents] : std::map(owner.blocks())) owner.remove(arena, ptr);
    ASSERT_EQ(arena.check_invariants(), "");
  }
  EXPECT_GT(copied, 0u) << "the layouts exercise copies";
  EXPECT_GT(remapped, 0u) << "and remaps";
}

TEST(FragmentingTrace, EachStepAsksForMoreThanAnyHoleButLessThanWhatIsFree) {
  std::vector<tp::memory::FragmentingStep> steps;
  const tp::memory::FragmentingTraceOptions trace_options;
  const tp::memory::Trace trace = tp::memory::generate_fragmenting_trace(trace_options, &steps);
  ASSERT_EQ(steps.size(), trace_options.steps);
  for (const tp::memory::FragmentingStep& step : steps) {
    EXPECT_GT(step.request_bytes, step.largest_hole_bytes);
    EXPECT_GT(step.request_bytes, step.tail_bytes);
    EXPECT_LE(step.request_bytes + step.live_bytes, trace_options.capacity_bytes);
  }
  EXPECT_EQ(trace.events(), tp::memory::generate_trace("fragmenting").events()) << "the bundled kind";
  tp::memory::FragmentingTraceOptions small;
  small.capacity_bytes = 16 * kMiB;
  EXPECT_THROW((void)tp::memory::generate_fragmenting_trace(small), tp::InvalidArgument);
}

// The target: OOM under bfc and expandable with free memory available; with compaction, the same
// capacity replays the whole trace, every block's bytes intact.
TEST(FragmentingTrace, OutOfMemoryWithoutCompactionCompletesWithIt) {
  const tp::memory::FragmentingTraceOptions trace_options;
  const tp::memory::Trace trace = tp::memory::generate_fragmenting_trace(trace_options);
  const std::size_t capacity = trace_options.capacity_bytes;
  for (const ReplayAllocator allocator : {ReplayAllocator::bfc, ReplayAllocator::expandable}) {
    SCOPED_TRACE(std::string(tp::memory::to_string(allocator)));
    const auto stack = tp::memory::make_replay_stack(allocator, capacity);
    const tp::memory::ReplayResult result = tp::memory::replay(trace, *stack);
    // bfc: each step's large request at least. The expandable stack's thread caches give their blocks back
    // before the arena grows, which serves some steps; the others still fail.
    EXPECT_GE(result.oom_count, allocator == ReplayAllocator::bfc ? trace_options.steps : 1);
    // Free memory was available: the refused request is smaller than capacity - live at that moment.
    EXPECT_LT(result.largest_oom_bytes, capacity / 2);
  }
  const auto stack = tp::memory::make_replay_stack(ReplayAllocator::expandable, capacity);
  tp::memory::ReplayOptions replay_options;
  replay_options.compact = tp::memory::compactable_arena(*stack);
  replay_options.check_contents = true;
  ASSERT_NE(replay_options.compact, nullptr);
  const tp::memory::ReplayResult result = tp::memory::replay(trace, *stack, replay_options);
  EXPECT_EQ(result.oom_count, 0u);
  EXPECT_GE(result.compaction.compactions, 1u);
  EXPECT_LE(result.compaction.compactions, trace_options.steps);
  EXPECT_EQ(result.compaction.retries_served, result.compaction.compactions);
  EXPECT_GT(result.compaction.blocks_moved, 0u);
  EXPECT_GT(result.compaction.bytes_copied, 0u);
  EXPECT_GT(result.compaction.bytes_remapped, 0u) << "large blocks of whole granules move by remapping";
  EXPECT_GT(result.compaction.granules_freed, 0u);
  EXPECT_LE(result.peak_reserved_bytes, capacity);
  EXPECT_EQ(stack->stats().num_compactions, result.compaction.compactions) << "each moved blocks";
  EXPECT_EQ(stack->stats().bytes_compacted, result.compaction.bytes_copied + result.compaction.bytes_remapped);
  auto* arena = tp::memory::compactable_arena(*stack);
  EXPECT_EQ(arena->check_invariants(), "");
}

// The contents check catches a resource that mixes blocks: here every allocation gets the same bytes.
TEST(FragmentingTrace, TheContentsCheckCatchesMixedBlocks) {
  class Overlapping final : public tp::memory::MemoryResource {
   public:
    Overlapping() : MemoryResource("overlapping") {}

   private:
    void* do_allocate(std::size_t bytes, std::size_t /*alignment*/, const tp::memory::AllocationTag& /*tag*/) override {
      if (bytes > kBytes) throw std::bad_alloc();
      return buffer_.get();
    }
    void do_deallocate(void* /*ptr*/, std::size_t /*bytes*/) noexcept override {}
    tp::memory::MemoryStats do_stats() const override { return {}; }
    struct Free {
      void operator()(void* ptr) const noexcept { std::free(ptr); }
    };
    std::unique_ptr<void, Free> buffer_{std::aligned_alloc(4096, kBytes)};
  };
  tp::memory::FragmentingTraceOptions trace_options;
  trace_options.steps = 1;
  const tp::memory::Trace trace = tp::memory::generate_fragmenting_trace(trace_options);
  Overlapping resource;
  tp::memory::ReplayOptions replay_options;
  replay_options.check_contents = true;
  EXPECT_THROW((void)tp::memory::replay(trace, resource, replay_options), tp::DataError);
  replay_options.check_contents = false;
  EXPECT_NO_THROW((void)tp::memory::replay(trace, resource, replay_options));
}

}  // namespace
