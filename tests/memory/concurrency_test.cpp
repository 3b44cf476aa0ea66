// SPDX-License-Identifier: Apache-2.0
// 8 threads of random allocate/free against every resource and stack at once. Each thread fills its blocks
// with its own pattern and checks it before freeing, so two threads handed overlapping memory fail here;
// data races fail under ThreadSanitizer (`make tsan` runs this suite in a -DTP_SANITIZE=thread build).

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "memory/support/resource_subjects.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory::testing {
namespace {

using Subjects =
    ::testing::Types<HostSubject, PinnedHostSubject, SimDeviceSubject, BfcPreallocateSubject, BfcGrowSubject,
                     ExpandableSubject, ExpandableSharedSubject, LimitingSubject, StatisticsSubject, ThreadCacheSubject,
                     TrackingSubject, LoggingSubject, BfcStackSubject, BfcGrowStackSubject, ExpandableStackSubject,
                     SystemStackSubject, ShardedArenaSubject>;

template <typename T>
class Concurrency : public ::testing::Test {
 protected:
  Concurrency() : subject_(T::make()) {}
  Subject subject_;
};
TYPED_TEST_SUITE(Concurrency, Subjects, SubjectNames);

TYPED_TEST(Concurrency, EightThreadsOfRandomAllocateAndFree) {
  MemoryResource& resource = *this->subject_.resource;
  constexpr int kThreads = 8;
  constexpr int kOpsPerThread = 1500;
  // Each thread stays under capacity / threads, so an OOM here is a bug, not contention.
  constexpr std::size_t kThreadBudget = kSubjectCapacity / kThreads / 2;
  std::atomic<int> corruptions{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(1000 + t));
      const auto pattern = static_cast<unsigned char>(0x10 + t);
      struct Block {
        unsigned char* ptr;
        std::size_t bytes;
      };
      std::vector<Block> blocks;
      std::size_t held = 0;
      auto release = [&](std::size_t index) {
        Block block = blocks[index];
        if (block.ptr[0] != pattern || block.ptr[block.bytes - 1] != pattern) corruptions.fetch_add(1);
        resource.deallocate(block.ptr, block.bytes);
        held -= block.bytes;
        blocks[index] = blocks.back();
        blocks.pop_back();
      };
      for (int op = 0; op < kOpsPerThread; ++op) {
        const std::size_t bytes = 1 + random() % (random() % 8 == 0 ? 512 * kKiB : 8 * kKiB);
        if (!blocks.empty() && (random() % 2 == 0 || held + bytes > kThreadBudget)) {
          release(random() % blocks.size());
          continue;
        }
        try {
          auto* ptr = static_cast<unsigned char*>(resource.allocate(bytes));
          ptr[0] = pattern;
          ptr[bytes - 1] = pattern;
          blocks.push_back({ptr, bytes});
          held += bytes;
        } catch (const std::bad_alloc&) {
          failures.fetch_add(1);
        }
      }
      while (!blocks.empty()) release(blocks.size() - 1);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(corruptions.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  const MemoryStats stats = resource.stats();
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.bytes_requested, 0u);
  EXPECT_EQ(stats.num_allocs, stats.num_frees);
  if (auto* bfc = dynamic_cast<BfcAllocator*>(&resource)) {
    EXPECT_EQ(bfc->check_invariants(), "");
  }
  if (auto* arena = dynamic_cast<ExpandableArena*>(&resource)) {
    EXPECT_EQ(arena->check_invariants(), "");
  }
}

}  // namespace
}  // namespace tp::memory::testing
