// SPDX-License-Identifier: Apache-2.0
// ShardedArena: threads allocating at once get shards of their own; a block goes back to the shard it came
// from whichever thread frees it; one budget binds every shard, and a request its shard refuses takes what the
// other shards hold unused; the statistics (peaks included) are exact across shards; trim, compaction and peak
// resets reach every shard; bad arguments and foreign pointers are refused; the stack builds it from
// MemoryConfig::arena_shards. Random concurrent use with cross-thread frees keeps every invariant (TSan list).
#include "tensorpool/memory/sharded_arena.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memory/support/arena_test_options.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/compaction.hpp"
#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"

namespace {

using tp::kKiB;
using tp::kMiB;
using tp::memory::ExpandableArena;
using tp::memory::MemoryStats;
using tp::memory::ShardedArena;
using tp::memory::SimDeviceMemory;
using tp::memory::testing::arena_options;

constexpr std::size_t kGranule = SimDeviceMemory::kGranularity;

// The shard whose reserved range holds `ptr`; shard_count() when none does.
std::size_t shard_of(const ShardedArena& arena, const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  for (std::size_t index = 0; index < arena.shard_count(); ++index) {
    const ExpandableArena& shard = arena.shard(index);
    if (address >= shard.base_address() && address < shard.base_address() + shard.reserved_range_bytes()) return index;
  }
  return arena.shard_count();
}

// Runs `first` and `second` on two threads that are both running before either starts, as two streams' threads
// would be. A thread takes its index at its first allocation and gives it back at exit: to be sure of two
// shards, each holds a barrier after its allocations.
template <typename First, typename Second>
void on_two_threads(First first, Second second) {
  std::barrier both(2);
  std::thread one([&] {
    both.arrive_and_wait();
    first();
  });
  std::thread two([&] {
    both.arrive_and_wait();
    second();
  });
  one.join();
  two.join();
}

TEST(ShardedArena, ThreadsAllocatingAtOnceGetShardsOfTheirOwn) {
  SimDeviceMemory device(64 * kMiB);
  ShardedArena arena(device, arena_options(32 * kMiB), 2);
  ASSERT_EQ(arena.shard_count(), 2u);
  void* a = nullptr;
  void* b = nullptr;
  std::size_t shard_a = 0;
  std::size_t shard_b = 0;
  std::barrier held(2);  // both threads hold their index until both allocated
  on_two_threads(
      [&] {
        shard_a = arena.this_thread_shard();
        a = arena.allocate(300 * kKiB);
        held.arrive_and_wait();
      },
      [&] {
        shard_b = arena.this_thread_shard();
        b = arena.allocate(500 * kKiB);
        held.arrive_and_wait();
      });
  EXPECT_NE(shard_a, shard_b);
  EXPECT_EQ(shard_of(arena, a), shard_a);
  EXPECT_EQ(shard_of(arena, b), shard_b);
  EXPECT_EQ(arena.shard(shard_a).stats().bytes_in_use, 300 * kKiB);
  EXPECT_EQ(arena.shard(shard_b).stats().bytes_in_use, 500 * kKiB);
  // Freed by another thread (this one): each goes back to its own shard.
  arena.deallocate(a, 300 * kKiB);
  arena.deallocate(b, 500 * kKiB);
  EXPECT_EQ(arena.shard(shard_a).stats().bytes_in_use, 0u);
  EXPECT_EQ(arena.shard(shard_b).stats().bytes_in_use, 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ShardedArena, StatisticsAreExactAcrossShards) {
  SimDeviceMemory device(64 * kMiB);
  ShardedArena arena(device, arena_options(32 * kMiB), 2);
  void* a = nullptr;
  std::barrier held(2);
  // Both blocks live at once, from two shards: the peaks are their sum, not either shard's.
  on_two_threads(
      [&] {
        a = arena.allocate(kMiB + 1);
        held.arrive_and_wait();  // b is allocated
        held.arrive_and_wait();  // b is freed
      },
      [&] {
        held.arrive_and_wait();
        void* b = arena.allocate(3 * kMiB);
        EXPECT_EQ(arena.stats().bytes_in_use, kMiB + 256 + 3 * kMiB);
        arena.deallocate(b, 3 * kMiB);
        held.arrive_and_wait();
      });
  MemoryStats stats = arena.stats();
  EXPECT_EQ(stats.num_allocs, 2u);
  EXPECT_EQ(stats.num_frees, 1u);
  EXPECT_EQ(stats.bytes_in_use, kMiB + 256);
  EXPECT_EQ(stats.bytes_requested, kMiB + 1);
  EXPECT_EQ(stats.peak_bytes_in_use, 4 * kMiB + 256);
  EXPECT_EQ(stats.peak_bytes_requested, 4 * kMiB + 1);
  EXPECT_EQ(stats.largest_alloc, 3 * kMiB);
  // arena_options keeps no cached granule: the block of 1 MiB + 1 pins one, and the peak was one + two.
  EXPECT_EQ(stats.bytes_reserved, kGranule);
  EXPECT_EQ(stats.peak_bytes_reserved, 3 * kGranule);
  EXPECT_EQ(stats.bytes_reserved, arena.committed_bytes());
  ASSERT_TRUE(stats.bytes_limit.has_value());
  EXPECT_EQ(*stats.bytes_limit, 32 * kMiB);
  arena.reset_peak();
  stats = arena.stats();
  EXPECT_EQ(stats.peak_bytes_in_use, kMiB + 256);
  EXPECT_EQ(stats.peak_bytes_requested, kMiB + 1);
  EXPECT_EQ(stats.peak_bytes_reserved, kGranule);
  arena.deallocate(a, kMiB + 1);
  EXPECT_EQ(arena.stats().bytes_in_use, 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ShardedArena, OneBudgetBindsEveryShard) {
  SimDeviceMemory device(64 * kMiB);
  ShardedArena arena(device, arena_options(4 * kGranule), 2);
  void* a = nullptr;
  bool refused = false;
  std::string message;
  void* small = nullptr;
  std::barrier held(2);
  on_two_threads(
      [&] {
        a = arena.allocate(3 * kGranule);  // three of the four granules
        held.arrive_and_wait();
        held.arrive_and_wait();
      },
      [&] {
        held.arrive_and_wait();
        try {
          (void)arena.allocate(2 * kGranule);  // its shard alone could, the budget cannot
        } catch (const tp::OutOfMemoryError& error) {
          refused = true;
          message = error.what();
          EXPECT_EQ(error.report().in_use_bytes, 3 * kGranule) << "the whole arena's in-use bytes";
          EXPECT_EQ(error.report().reserved_bytes, 3 * kGranule);
        }
        small = arena.allocate(kGranule);  // the last granule
        held.arrive_and_wait();
      });
  EXPECT_TRUE(refused);
  EXPECT_NE(message.find("shard"), std::string::npos) << message;
  EXPECT_EQ(arena.committed_bytes(), 4 * kGranule);
  EXPECT_LE(device.committed_bytes(), 4 * kGranule);
  EXPECT_EQ(arena.stats().num_ooms, 1u);
  arena.deallocate(a, 3 * kGranule);
  arena.deallocate(small, kGranule);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ShardedArena, ARefusedRequestTakesWhatTheOtherShardsHoldUnused) {
  SimDeviceMemory device(64 * kMiB);
  // Shards keep up to 16 MiB of wholly free granules committed.
  ShardedArena arena(device, arena_options(4 * kGranule, 16 * kMiB, false, 1u << 16), 2);
  void* b = nullptr;
  std::size_t shard_a = 0;
  std::size_t shard_b = 0;
  std::barrier held(2);
  on_two_threads(
      [&] {
        shard_a = arena.this_thread_shard();
        void* a = arena.allocate(3 * kGranule);
        arena.deallocate(a, 3 * kGranule);  // its three granules stay committed in its shard
        held.arrive_and_wait();
        held.arrive_and_wait();
      },
      [&] {
        held.arrive_and_wait();
        shard_b = arena.this_thread_shard();
        EXPECT_EQ(arena.committed_bytes(), 3 * kGranule);
        b = arena.allocate(3 * kGranule);  // needs the other shard's cached granules
        held.arrive_and_wait();
      });
  ASSERT_NE(shard_a, shard_b) << "two threads running at once share a shard";
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(arena.committed_bytes(), 3 * kGranule);
  EXPECT_EQ(arena.stats().num_retries, 1u);
  EXPECT_EQ(arena.stats().num_ooms, 0u);
  arena.deallocate(b, 3 * kGranule);
  EXPECT_EQ(arena.trim(), 3 * kGranule);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(device.committed_bytes(), 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

// Lets every block move; records the moves.
class MoveAll final : public tp::memory::Relocator {
 public:
  bool can_move(const void* /*ptr*/, std::size_t /*bytes*/) override { return true; }
  void relocated(void* from, void* to, std::size_t bytes) noexcept override { moves.push_back({from, to, bytes}); }
  struct Move {
    void* from;
    void* to;
    std::size_t bytes;
  };
  std::vector<Move> moves;
};

TEST(ShardedArena, CompactionAndTrimReachEveryShard) {
  SimDeviceMemory device(64 * kMiB);
  ShardedArena arena(device, arena_options(32 * kMiB, 16 * kMiB, false, 1u << 16), 2);
  // Each thread leaves a hole below a live block in its shard: the low granule is freed only by compaction.
  std::vector<std::pair<void*, std::size_t>> live(2);
  std::barrier held(2);  // both threads hold their index until both allocated
  on_two_threads(
      [&] {
        void* low = arena.allocate(kGranule);
        live[0] = {arena.allocate(kGranule / 2), kGranule / 2};
        arena.deallocate(low, kGranule);
        held.arrive_and_wait();
      },
      [&] {
        void* low = arena.allocate(kGranule);
        live[1] = {arena.allocate(kGranule / 2), kGranule / 2};
        arena.deallocate(low, kGranule);
        held.arrive_and_wait();
      });
  ASSERT_NE(shard_of(arena, live[0].first), shard_of(arena, live[1].first));
  for (auto& [ptr, bytes] : live) std::memset(ptr, 0x5a, bytes);
  MoveAll relocator;
  const tp::memory::CompactionResult result = arena.compact(relocator);
  EXPECT_TRUE(result.ran);
  EXPECT_EQ(result.blocks_moved, 2u) << "one block in each shard";
  EXPECT_EQ(result.committed_after, 2 * kGranule);
  EXPECT_EQ(arena.committed_bytes(), 2 * kGranule);
  ASSERT_EQ(relocator.moves.size(), 2u);
  for (const MoveAll::Move& move : relocator.moves) {
    EXPECT_EQ(shard_of(arena, move.from), shard_of(arena, move.to)) << "a block moves within its shard";
    for (auto& [ptr, bytes] : live) {
      if (ptr == move.from) ptr = move.to;
    }
  }
  for (const auto& [ptr, bytes] : live) {
    EXPECT_EQ(static_cast<const unsigned char*>(ptr)[bytes - 1], 0x5a);
    arena.deallocate(ptr, bytes);
  }
  EXPECT_EQ(arena.trim(), 2 * kGranule) << "each shard's cached granule";
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(arena.check_invariants(), "");
}

TEST(ShardedArena, RefusesBadArguments) {
  SimDeviceMemory device(64 * kMiB);
  for (std::size_t shards : {std::size_t{0}, ShardedArena::kMaxShards + 1}) {
    try {
      ShardedArena arena(device, arena_options(32 * kMiB), shards);
      ADD_FAILURE() << shards << " shards accepted";
    } catch (const tp::InvalidArgument& error) {
      const std::string text = error.what();
      EXPECT_NE(text.find(std::to_string(shards) + " arena shards"), std::string::npos) << text;
      EXPECT_NE(text.find("give 1 to 64"), std::string::npos) << text;
    }
  }
  EXPECT_THROW(ShardedArena(device, arena_options(0), 2), tp::InvalidArgument);
}

TEST(ShardedArenaDeathTest, AForeignPointerAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  SimDeviceMemory device(64 * kMiB);
  ShardedArena arena(device, arena_options(32 * kMiB), 2);
  int local = 0;
  EXPECT_DEATH(arena.deallocate(&local, sizeof local), "no shard of this arena handed out");
}

TEST(ShardedArena, TheStackBuildsItFromTheConfig) {
  tp::memory::MemoryConfig config;
  config.device = "sim:0";
  config.allocator = tp::memory::AllocatorKind::expandable;
  config.arena_shards = 3;
  auto stack = tp::memory::make_sim_device_memory_stack(config, 64 * kMiB);
  const auto* sharded = dynamic_cast<const ShardedArena*>(&stack->allocator());
  ASSERT_NE(sharded, nullptr);
  EXPECT_EQ(sharded->shard_count(), 3u);
  void* ptr = stack->allocate(1000);
  EXPECT_EQ(stack->stats().bytes_requested, 1000u);
  EXPECT_EQ(stack->stats().num_allocs, 1u);
  stack->deallocate(ptr, 1000);
  EXPECT_EQ(stack->stats().peak_bytes_requested, 1000u);
  config.arena_shards = 1;
  auto single = tp::memory::make_sim_device_memory_stack(config, 64 * kMiB);
  EXPECT_NE(dynamic_cast<const ExpandableArena*>(&single->allocator()), nullptr) << "one shard is one arena";
  config.arena_shards = 0;
  EXPECT_THROW((void)tp::memory::make_sim_device_memory_stack(config, 64 * kMiB), tp::InvalidArgument);
}

TEST(ShardedArena, ConcurrentThreadsWithCrossThreadFreesKeepEveryInvariant) {
  SimDeviceMemory device(256 * kMiB);
  tp::memory::ArenaOptions options = arena_options(96 * kMiB, 8 * kMiB, false, 64);
  options.reuse_bytes = 4 * kMiB;
  ShardedArena arena(device, options, 2);
  constexpr int kThreads = 4;
  constexpr int kOperations = 3000;
  // Blocks handed from one thread to the next, freed there: frees cross shards.
  struct Handoff {
    std::atomic<void*> ptr{nullptr};
    std::atomic<std::size_t> bytes{0};
  };
  std::vector<Handoff> handoffs(kThreads);
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t) + 1);
      std::vector<std::pair<void*, std::size_t>> held;
      for (int i = 0; i < kOperations; ++i) {
        const int action = static_cast<int>(random() % 8);
        if (action < 4 || held.empty()) {
          const std::size_t bytes = 256 + random() % (3 * kMiB);
          try {
            void* ptr = arena.allocate(bytes);
            static_cast<unsigned char*>(ptr)[bytes - 1] = static_cast<unsigned char>(t);
            held.emplace_back(ptr, bytes);
          } catch (const tp::OutOfMemoryError&) {
            refused.fetch_add(1);
          }
        } else if (action < 7) {
          const std::size_t at = random() % held.size();
          EXPECT_EQ(static_cast<unsigned char*>(held[at].first)[held[at].second - 1], static_cast<unsigned char>(t));
          arena.deallocate(held[at].first, held[at].second);
          held[at] = held.back();
          held.pop_back();
        } else {
          // Hand the newest block to the next thread; free what the previous one handed here.
          Handoff& mine = handoffs[static_cast<std::size_t>((t + 1) % kThreads)];
          if (mine.ptr.load(std::memory_order_acquire) == nullptr) {
            mine.bytes.store(held.back().second, std::memory_order_relaxed);
            static_cast<unsigned char*>(held.back().first)[held.back().second - 1] = 0xee;
            mine.ptr.store(held.back().first, std::memory_order_release);
            held.pop_back();
          }
          Handoff& theirs = handoffs[static_cast<std::size_t>(t)];
          if (void* ptr = theirs.ptr.load(std::memory_order_acquire); ptr != nullptr) {
            const std::size_t bytes = theirs.bytes.load(std::memory_order_relaxed);
            EXPECT_EQ(static_cast<unsigned char*>(ptr)[bytes - 1], 0xee);
            theirs.ptr.store(nullptr, std::memory_order_release);
            arena.deallocate(ptr, bytes);
          }
        }
      }
      for (const auto& [ptr, bytes] : held) arena.deallocate(ptr, bytes);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (Handoff& handoff : handoffs) {
    if (void* ptr = handoff.ptr.load(); ptr != nullptr) arena.deallocate(ptr, handoff.bytes.load());
  }
  EXPECT_EQ(arena.check_invariants(), "");
  const MemoryStats stats = arena.stats();
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.bytes_requested, 0u);
  EXPECT_EQ(stats.num_allocs, stats.num_frees);
  EXPECT_LE(stats.peak_bytes_reserved, 96 * kMiB);
  EXPECT_EQ(stats.num_ooms, static_cast<std::uint64_t>(refused.load()));
}

}  // namespace
