// SPDX-License-Identifier: Apache-2.0
// make_memory_stack: every AllocatorKind x GrowthPolicy over a simulated device and over host memory;
// allocation, stats, trim, OOM (named device, tags, fragmentation vs shortage) and recovery after it.

#include "tensorpool/memory/memory_stack.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/bfc_allocator.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/host_resource.hpp"
#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/limiting_adaptor.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/sharded_arena.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"

namespace {

using tp::kMiB;
using tp::OutOfMemoryError;
using tp::memory::AllocationKind;
using tp::memory::AllocationTag;
using tp::memory::AllocatorKind;
using tp::memory::GrowthPolicy;
using tp::memory::MemoryConfig;
using tp::memory::MemoryStack;
using tp::memory::MemoryStats;

AllocationTag tag(std::string name, AllocationKind kind = AllocationKind::activation) {
  AllocationTag result;
  result.name = std::move(name);
  result.op = "Conv2D";
  result.kind = kind;
  return result;
}

// Empty when the allocator layer's own invariants hold (for the kinds that can check them).
std::string allocator_invariants(MemoryStack& stack) {
  if (auto* bfc = dynamic_cast<tp::memory::BfcAllocator*>(&stack.allocator())) return bfc->check_invariants();
  if (auto* arena = dynamic_cast<tp::memory::ExpandableArena*>(&stack.allocator())) return arena->check_invariants();
  if (auto* arena = dynamic_cast<tp::memory::ShardedArena*>(&stack.allocator())) return arena->check_invariants();
  return "";
}

std::string describe(AllocatorKind kind, GrowthPolicy policy) {
  return std::string(tp::memory::to_string(kind)) + (policy == GrowthPolicy::grow ? "_grow" : "_preallocate");
}

class EveryStack : public ::testing::TestWithParam<std::tuple<AllocatorKind, GrowthPolicy, bool>> {
 protected:
  MemoryConfig config() const {
    MemoryConfig result;
    result.device = "sim:0";
    result.allocator = std::get<0>(GetParam());
    result.policy = std::get<1>(GetParam());
    result.tracking = std::get<2>(GetParam());
    result.limit_bytes = 16 * kMiB;
    result.arena_shards = arena_shards_;
    return result;
  }
  std::size_t arena_shards_ = 1;
  std::unique_ptr<MemoryStack> make(bool on_host) const {
    MemoryConfig base = config();
    if (on_host) {
      base.device = "host";
      return tp::memory::make_host_memory_stack(base);
    }
    return tp::memory::make_sim_device_memory_stack(base, 64 * kMiB);
  }

  void exercise(MemoryStack& stack, const std::string& device) const {
    const bool tracking = std::get<2>(GetParam());
    EXPECT_EQ(stack.limit_bytes(), 16 * kMiB);
    EXPECT_EQ(stack.name(), device);
    EXPECT_EQ(&stack.resource(), &stack);
    EXPECT_EQ(stack.tracking() != nullptr, tracking);
    EXPECT_EQ(stack.config().allocator, std::get<0>(GetParam()));

    std::vector<std::pair<void*, std::size_t>> held;
    for (std::size_t i = 1; i <= 8; ++i) {
      const std::size_t bytes = i * 100 * tp::kKiB + 7;
      void* ptr = stack.allocate(bytes, 256, tag("t" + std::to_string(i)));
      ASSERT_NE(ptr, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % 256, 0u);
      std::memset(ptr, static_cast<int>(i), bytes);
      held.emplace_back(ptr, bytes);
    }
    MemoryStats stats = stack.stats();
    EXPECT_EQ(stats.num_allocs, 8u);
    EXPECT_EQ(stats.bytes_requested, 3600 * tp::kKiB + 56);
    EXPECT_GE(stats.bytes_in_use, stats.bytes_requested);
    EXPECT_GE(stats.bytes_reserved, stats.bytes_requested);
    EXPECT_EQ(stats.largest_alloc, 800 * tp::kKiB + 7);
    ASSERT_TRUE(stats.bytes_limit.has_value());
    EXPECT_LE(*stats.bytes_limit, 16 * kMiB);
    if (tracking) {
      EXPECT_EQ(stack.tracking()->live_count(), 8u);
    }
    EXPECT_EQ(allocator_invariants(stack), "");

    // A request past the budget: a real shortage, reported with the device, the tag and the largest tensors.
    try {
      (void)stack.allocate(15 * kMiB, 256, tag("too_big", AllocationKind::gradient));
      ADD_FAILURE() << "allocated past the budget";
    } catch (const OutOfMemoryError& error) {
      const tp::OutOfMemoryReport& report = error.report();
      EXPECT_EQ(report.device, device);
      EXPECT_FALSE(report.is_fragmentation());
      const std::string text = error.what();
      EXPECT_NE(text.find("out of memory on " + device), std::string::npos) << text;
      EXPECT_NE(text.find("too_big"), std::string::npos) << text;
      EXPECT_NE(text.find("real shortage"), std::string::npos) << text;
      if (tracking) {
        ASSERT_FALSE(report.largest_live.empty());
        EXPECT_EQ(report.largest_live.front().tag.name, "t8");
        EXPECT_NE(text.find("t8 (Conv2D, activation)"), std::string::npos) << text;
      }
    }
    EXPECT_EQ(stack.stats().num_ooms, 1u);
    EXPECT_EQ(allocator_invariants(stack), "");

    // Still usable after the OOM; contents intact.
    void* after = stack.allocate(kMiB, 256, tag("after"));
    stack.deallocate(after, kMiB);
    for (std::size_t i = 0; i < held.size(); ++i) {
      EXPECT_EQ(static_cast<unsigned char*>(held[i].first)[held[i].second - 1], static_cast<unsigned char>(i + 1));
    }

    stack.reset_peak();
    for (const auto& [ptr, bytes] : held) stack.deallocate(ptr, bytes);
    stats = stack.stats();
    EXPECT_EQ(stats.bytes_requested, 0u);
    EXPECT_EQ(stats.bytes_in_use, 0u);
    EXPECT_EQ(stats.num_frees, 9u);
    EXPECT_EQ(stats.peak_bytes_requested, 3600 * tp::kKiB + 56) << "the peak restarted at reset_peak";
    if (tracking) {
      EXPECT_EQ(stack.tracking()->live_count(), 0u);
    }

    stack.trim();
    if (std::get<1>(GetParam()) == GrowthPolicy::grow || std::get<0>(GetParam()) != AllocatorKind::bfc) {
      EXPECT_EQ(stack.stats().bytes_reserved, 0u) << "trim gives cached memory back";
    }
    EXPECT_EQ(allocator_invariants(stack), "");
    void* again = stack.allocate(4 * kMiB, 256, tag("again"));
    stack.deallocate(again, 4 * kMiB);
  }

  // Four threads allocate, write and free at once.
  static void exercise_concurrently(MemoryStack& stack) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&stack, t] {
        for (int i = 0; i < 200; ++i) {
          const std::size_t bytes = static_cast<std::size_t>(1 + (i * 7919 + t) % 20) * 4096;
          try {
            void* ptr = stack.allocate(bytes, 256, tag("w" + std::to_string(t)));
            std::memset(ptr, t, bytes);
            stack.deallocate(ptr, bytes);
          } catch (const OutOfMemoryError&) {}
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(stack.stats().bytes_requested, 0u);
    EXPECT_EQ(stack.stats().bytes_in_use, 0u);
    EXPECT_EQ(allocator_invariants(stack), "");
  }
};

TEST_P(EveryStack, OnASimulatedDevice) {
  auto stack = make(false);
  exercise(*stack, "sim:0");
}

TEST_P(EveryStack, OnHostMemory) {
  auto stack = make(true);
  exercise(*stack, "host");
}

TEST_P(EveryStack, ConcurrentUse) {
  auto stack = make(false);
  exercise_concurrently(*stack);
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, EveryStack,
    ::testing::Combine(::testing::Values(AllocatorKind::bfc, AllocatorKind::expandable, AllocatorKind::system),
                       ::testing::Values(GrowthPolicy::preallocate, GrowthPolicy::grow), ::testing::Bool()),
    [](const ::testing::TestParamInfo<EveryStack::ParamType>& param_info) {
      return describe(std::get<0>(param_info.param), std::get<1>(param_info.param)) +
             (std::get<2>(param_info.param) ? "_tracked" : "_untracked");
    });

// The expandable stack with its budget served by two arena shards: the same behaviour, one budget.
class ShardedStack : public EveryStack {
 protected:
  ShardedStack() { arena_shards_ = 2; }
};

TEST_P(ShardedStack, OnASimulatedDevice) {
  auto stack = make(false);
  ASSERT_NE(dynamic_cast<tp::memory::ShardedArena*>(&stack->allocator()), nullptr);
  exercise(*stack, "sim:0");
}

TEST_P(ShardedStack, OnHostMemory) {
  auto stack = make(true);
  exercise(*stack, "host");
}

TEST_P(ShardedStack, ConcurrentUse) {
  auto stack = make(false);
  exercise_concurrently(*stack);
  EXPECT_LE(stack->stats().peak_bytes_reserved, 16 * kMiB);
}

INSTANTIATE_TEST_SUITE_P(Expandable, ShardedStack,
                         ::testing::Combine(::testing::Values(AllocatorKind::expandable),
                                            ::testing::Values(GrowthPolicy::preallocate, GrowthPolicy::grow),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<ShardedStack::ParamType>& param_info) {
                           return describe(std::get<0>(param_info.param), std::get<1>(param_info.param)) +
                                  (std::get<2>(param_info.param) ? "_tracked" : "_untracked");
                         });

TEST(MemoryStack, BfcSplitReachesTheAllocator) {
  MemoryConfig config;
  config.device = "sim:0";
  config.tracking = false;
  config.bfc_split = tp::memory::BfcSplit::exact;
  auto stack = tp::memory::make_sim_device_memory_stack(config, 4 * kMiB);
  auto* bfc = dynamic_cast<tp::memory::BfcAllocator*>(&stack->allocator());
  ASSERT_NE(bfc, nullptr);
  EXPECT_EQ(bfc->options().split, tp::memory::BfcSplit::exact);
  // Below half the preallocated region: TensorFlow's rule would hand out all 4 MiB.
  void* ptr = stack->allocate(3 * kMiB);
  EXPECT_EQ(stack->stats().bytes_in_use, 3 * kMiB);
  stack->deallocate(ptr, 3 * kMiB);
  config.bfc_split = tp::memory::BfcSplit::tensorflow;
  stack = tp::memory::make_sim_device_memory_stack(config, 4 * kMiB);
  ptr = stack->allocate(3 * kMiB);
  EXPECT_EQ(stack->stats().bytes_in_use, 4 * kMiB);
  stack->deallocate(ptr, 3 * kMiB);
}

TEST(MemoryStack, LayersFollowTheConfig) {
  MemoryConfig config;
  config.device = "sim:1";
  config.fraction = 0.5;
  config.split_threshold = 4 * kMiB;
  config.garbage_collection = false;
  config.policy = GrowthPolicy::grow;
  auto stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  EXPECT_EQ(stack->limit_bytes(), 16 * kMiB);
  auto* bfc = dynamic_cast<tp::memory::BfcAllocator*>(&stack->allocator());
  ASSERT_NE(bfc, nullptr);
  EXPECT_EQ(bfc->options().limit_bytes, 16 * kMiB);
  EXPECT_EQ(bfc->options().growth, GrowthPolicy::grow);
  EXPECT_EQ(bfc->options().split_threshold, 4 * kMiB);
  EXPECT_FALSE(bfc->options().garbage_collection);

  config.split_threshold.reset();
  config.policy = GrowthPolicy::preallocate;
  stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  bfc = dynamic_cast<tp::memory::BfcAllocator*>(&stack->allocator());
  ASSERT_NE(bfc, nullptr);
  EXPECT_EQ(bfc->options().split_threshold, MemoryConfig::kDefaultSplitThreshold);
  EXPECT_EQ(bfc->options().growth, GrowthPolicy::preallocate);

  config.split_fraction = 0.25;  // TensorFlow's fragmentation_fraction: a share of the budget
  stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  bfc = dynamic_cast<tp::memory::BfcAllocator*>(&stack->allocator());
  ASSERT_NE(bfc, nullptr);
  EXPECT_EQ(bfc->options().split_threshold, 4 * kMiB);
  config.split_fraction.reset();

  config.allocator = AllocatorKind::expandable;
  stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  auto* arena = dynamic_cast<tp::memory::ExpandableArena*>(&stack->allocator());
  ASSERT_NE(arena, nullptr);
  EXPECT_EQ(arena->options().limit_bytes, 16 * kMiB);
  EXPECT_EQ(arena->options().release_threshold, 16 * kMiB) << "preallocate keeps freed pages";
  EXPECT_FALSE(arena->options().share_granules) << "sharing physical granules is opt-in";
  EXPECT_EQ(arena->options().release_decay_events, tp::memory::ArenaOptions{}.release_decay_events);
  config.release_decay_events = 0;
  stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  arena = dynamic_cast<tp::memory::ExpandableArena*>(&stack->allocator());
  ASSERT_NE(arena, nullptr);
  EXPECT_EQ(arena->options().release_decay_events, 0u);
  config.release_decay_events.reset();
  config.share_granules = true;
  stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  arena = dynamic_cast<tp::memory::ExpandableArena*>(&stack->allocator());
  ASSERT_NE(arena, nullptr);
  EXPECT_TRUE(arena->options().share_granules);
  config.share_granules = false;

  config.allocator = AllocatorKind::system;
  stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  auto* limiting = dynamic_cast<tp::memory::LimitingAdaptor*>(&stack->allocator());
  ASSERT_NE(limiting, nullptr);
  EXPECT_EQ(limiting->limit_bytes(), 16 * kMiB);
}

TEST(MemoryStack, DefaultBudgetIsTheWholeDevice) {
  MemoryConfig config;
  config.device = "sim:2";
  config.policy = GrowthPolicy::grow;
  auto stack = tp::memory::make_sim_device_memory_stack(config, 8 * kMiB);
  EXPECT_EQ(stack->limit_bytes(), 8 * kMiB);
}

TEST(MemoryStack, FragmentationAndShortageReadDifferently) {
  MemoryConfig config;
  config.device = "sim:3";
  config.limit_bytes = 8 * kMiB;
  config.policy = GrowthPolicy::preallocate;
  auto stack = tp::memory::make_sim_device_memory_stack(config, 16 * kMiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(stack->allocate(kMiB, 256, tag("block" + std::to_string(i))));
  for (int i = 0; i < 8; i += 2) stack->deallocate(blocks[static_cast<std::size_t>(i)], kMiB);  // 4 x 1 MiB holes
  try {
    (void)stack->allocate(2 * kMiB, 256, tag("wide"));
    FAIL() << "a 2 MiB block fit in 1 MiB holes";
  } catch (const OutOfMemoryError& error) {
    EXPECT_TRUE(error.report().is_fragmentation()) << error.what();
    const std::string text = error.what();
    EXPECT_NE(text.find("Cause: fragmentation"), std::string::npos) << text;
    EXPECT_NE(text.find("TP_ALLOCATOR=expandable"), std::string::npos) << text;
    EXPECT_NE(text.find("on sim:3"), std::string::npos) << text;
  }
  try {
    (void)stack->allocate(5 * kMiB, 256, tag("huge"));
    FAIL() << "5 MiB fit in 4 MiB free";
  } catch (const OutOfMemoryError& error) {
    EXPECT_FALSE(error.report().is_fragmentation()) << error.what();
    EXPECT_NE(std::string(error.what()).find("real shortage"), std::string::npos) << error.what();
  }
  EXPECT_EQ(stack->stats().num_ooms, 2u);
  for (int i = 1; i < 8; i += 2) stack->deallocate(blocks[static_cast<std::size_t>(i)], kMiB);
}

TEST(MemoryStack, ExpandableServesWhatFragmentsBfc) {
  MemoryConfig config;
  config.device = "sim:4";
  config.allocator = AllocatorKind::expandable;
  config.limit_bytes = 16 * kMiB;
  auto stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(stack->allocate(2 * kMiB));
  for (int i = 0; i < 8; i += 2) stack->deallocate(blocks[static_cast<std::size_t>(i)], 2 * kMiB);
  void* wide = stack->allocate(4 * kMiB);  // no 4 MiB hole exists, but pages are mapped on demand
  stack->deallocate(wide, 4 * kMiB);
  for (int i = 1; i < 8; i += 2) stack->deallocate(blocks[static_cast<std::size_t>(i)], 2 * kMiB);
  EXPECT_EQ(allocator_invariants(*stack), "");
}

TEST(MemoryStack, RejectsWhatCannotWork) {
  MemoryConfig config;
  try {
    (void)tp::memory::make_host_memory_stack(config);
    ADD_FAILURE() << "host stack built without a budget";
  } catch (const tp::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("limit_bytes"), std::string::npos) << error.what();
  }
  config.limit_bytes = 64 * kMiB;
  EXPECT_THROW((void)tp::memory::make_sim_device_memory_stack(config, 32 * kMiB), tp::InvalidArgument)
      << "budget above capacity";
  config.fraction = 0.5;
  EXPECT_THROW((void)tp::memory::make_sim_device_memory_stack(config, 32 * kMiB), tp::InvalidArgument)
      << "fraction and limit_bytes both set";
  config.fraction.reset();
  config.limit_bytes = kMiB;
  config.allocator = AllocatorKind::expandable;
  EXPECT_THROW((void)tp::memory::make_sim_device_memory_stack(config, 32 * kMiB), tp::InvalidArgument)
      << "budget below one granule";
  config.limit_bytes = 8 * kMiB;
  EXPECT_THROW((void)tp::memory::make_memory_stack(config, std::make_unique<tp::memory::HostResource>()),
               tp::InvalidArgument)
      << "expandable without VirtualMemory";
  config.allocator = AllocatorKind::bfc;
  EXPECT_THROW((void)tp::memory::make_memory_stack(config, nullptr, std::make_unique<tp::memory::HostVirtualMemory>()),
               tp::InvalidArgument)
      << "bfc without a MemoryResource";
}

TEST(MemoryStack, HostFractionIsOfPhysicalMemory) {
  const std::size_t physical = tp::memory::host_physical_memory_bytes();
  ASSERT_GT(physical, 0u);
  MemoryConfig config;
  config.fraction = 0.001;
  config.policy = GrowthPolicy::grow;  // nothing obtained up front
  auto stack = tp::memory::make_host_memory_stack(config);
  EXPECT_NEAR(static_cast<double>(stack->limit_bytes()), static_cast<double>(physical) * 0.001, 1.0);
  void* ptr = stack->allocate(4096);
  stack->deallocate(ptr, 4096);
}

TEST(MemoryStack, EnvironmentOverridesReachTheStack) {
  const std::map<std::string, std::string> env = {
      {"TP_ALLOW_GROWTH", "true"}, {"TP_ALLOCATOR", "expandable"}, {"TP_MEMORY_FRACTION", "0.5"}};
  MemoryConfig config;
  config.device = "sim:5";
  config = tp::memory::apply_env_overrides(config, [&env](const char* name) -> const char* {
    auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
  });
  auto stack = tp::memory::make_sim_device_memory_stack(config, 32 * kMiB);
  EXPECT_EQ(stack->limit_bytes(), 16 * kMiB);
  EXPECT_NE(dynamic_cast<tp::memory::ExpandableArena*>(&stack->allocator()), nullptr);
  EXPECT_EQ(stack->config().policy, GrowthPolicy::grow);
}

TEST(MemoryStack, SystemBudgetCountsPagesNotRequestedBytes) {
  MemoryConfig config;
  config.device = "sim:0";
  config.allocator = AllocatorKind::system;
  config.fraction = 0.5;
  auto stack = tp::memory::make_sim_device_memory_stack(config, 64 * kMiB);
  // Each 1-byte request takes a page of the device: the 32 MiB budget must stop them at 32 MiB of pages.
  const std::size_t page = stack->allocation_granularity();
  ASSERT_GT(page, 1u);
  std::vector<void*> blocks;
  try {
    for (std::size_t i = 0; i < 64 * kMiB / page; ++i) blocks.push_back(stack->allocate(1));
    ADD_FAILURE() << "the budget was never enforced";
  } catch (const OutOfMemoryError& error) {
    EXPECT_EQ(error.report().rounded_bytes, page);
  }
  EXPECT_EQ(blocks.size(), 32 * kMiB / page);
  EXPECT_LE(stack->stats().bytes_reserved, 32 * kMiB);
  for (void* block : blocks) stack->deallocate(block, 1);
  EXPECT_EQ(stack->stats().bytes_in_use, 0u);
}

}  // namespace
