// SPDX-License-Identifier: Apache-2.0
// The intra-op pool: parallel_for covers its range exactly once in grain-aligned chunks, whatever the thread
// count; helpers really take chunks, each thread first from its own share, under the caller's floating-point
// environment; nested and concurrent callers run inline instead of waiting; bad thread counts are refused.

#include "backend/cpu/intra_op_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "device/denormals.hpp"

namespace tp::backend::cpu {
namespace {

class IntraOpPool : public ::testing::Test {
 protected:
  void TearDown() override { set_intra_op_threads(1); }
};

TEST_F(IntraOpPool, CoversEveryIndexOnceInGrainAlignedChunksForAnyThreadCount) {
  for (int threads : {1, 2, 3, 4}) {
    set_intra_op_threads(threads);
    ASSERT_EQ(intra_op_threads(), threads);
    for (std::int64_t n : {0, 1, 15, 16, 17, 1000, 100003}) {
      for (std::int64_t grain : {1, 7, 16, 4096}) {
        SCOPED_TRACE(::testing::Message() << "threads " << threads << " n " << n << " grain " << grain);
        std::vector<std::atomic<int>> visits(static_cast<std::size_t>(n));
        std::atomic<bool> misaligned{false};
        parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
          if (begin % grain != 0 || (end != n && end % grain != 0) || begin >= end) misaligned = true;
          for (std::int64_t i = begin; i < end; ++i) visits[static_cast<std::size_t>(i)].fetch_add(1);
        });
        EXPECT_FALSE(misaligned);
        for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[static_cast<std::size_t>(i)].load(), 1) << "index " << i;
      }
    }
  }
}

// Chunks long enough that the helper wakes up during the loop (it may sleep when the loop starts).
constexpr auto kSlowChunk = std::chrono::microseconds(300);
constexpr std::int64_t kSlowChunks = 64;

std::set<std::thread::id> threads_running_chunks() {
  std::mutex mutex;
  std::set<std::thread::id> seen;
  parallel_for(kSlowChunks, 1, [&](std::int64_t, std::int64_t) {
    std::this_thread::sleep_for(kSlowChunk);
    std::lock_guard lock(mutex);
    seen.insert(std::this_thread::get_id());
  });
  return seen;
}

TEST_F(IntraOpPool, HelpersRunChunksAndOneThreadRunsEverythingOnTheCaller) {
  set_intra_op_threads(3);
  EXPECT_GE(threads_running_chunks().size(), 2U);
  set_intra_op_threads(1);
  EXPECT_EQ(threads_running_chunks(), std::set<std::thread::id>{std::this_thread::get_id()});
}

// The chunks are dealt out in one contiguous share per thread, each thread starting on its own: the caller on
// the first chunk, the helper (2 threads) in the second half (on its first chunk, unless the caller, done
// with its own half, took some before the helper came). A thread reaches the other's share only once its own
// is taken, so the helper never starts in the first half.
TEST_F(IntraOpPool, EachThreadStartsOnItsOwnShare) {
  set_intra_op_threads(2);
  for (int loop = 0; loop < 5; ++loop) {
    std::mutex mutex;
    std::map<std::thread::id, std::int64_t> first_chunk;
    parallel_for(kSlowChunks, 1, [&](std::int64_t begin, std::int64_t) {
      {
        std::lock_guard lock(mutex);
        first_chunk.try_emplace(std::this_thread::get_id(), begin);
      }
      std::this_thread::sleep_for(kSlowChunk);
    });
    ASSERT_EQ(first_chunk.count(std::this_thread::get_id()), 1U);
    EXPECT_EQ(first_chunk[std::this_thread::get_id()], 0);
    for (const auto& [thread, chunk] : first_chunk) {
      if (thread != std::this_thread::get_id()) {
        EXPECT_GE(chunk, kSlowChunks / 2) << "loop " << loop;
      }
    }
  }
}

TEST_F(IntraOpPool, HelpersRunUnderTheCallersFloatEnvironment) {
  set_intra_op_threads(2);
  const tp::device::ScopedFlushDenormals flush;  // as a stream task runs
  volatile float denormal = 1e-40F;
  std::mutex mutex;
  std::set<std::thread::id> seen;
  std::atomic<int> not_flushed{0};
  parallel_for(kSlowChunks, 1, [&](std::int64_t, std::int64_t) {
    std::this_thread::sleep_for(kSlowChunk);
    // Denormals-are-zero reads the input as 0; without it the product is the denormal itself.
    if (denormal * 1.0F != 0.0F) not_flushed.fetch_add(1);
    std::lock_guard lock(mutex);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_GE(seen.size(), 2U);
  EXPECT_EQ(not_flushed.load(), 0);
}

TEST_F(IntraOpPool, ANestedLoopRunsOnItsCaller) {
  set_intra_op_threads(2);
  constexpr std::int64_t kOuter = 8;
  constexpr std::int64_t kInner = 1000;
  std::vector<std::atomic<int>> visits(kOuter * kInner);
  parallel_for(kOuter, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t o = begin; o < end; ++o) {
      parallel_for(kInner, 10, [&](std::int64_t inner_begin, std::int64_t inner_end) {
        for (std::int64_t i = inner_begin; i < inner_end; ++i) {
          visits[static_cast<std::size_t>(o * kInner + i)].fetch_add(1);
        }
      });
    }
  });
  for (const std::atomic<int>& count : visits) ASSERT_EQ(count.load(), 1);
}

TEST_F(IntraOpPool, ConcurrentCallersEachCoverTheirOwnRange) {
  set_intra_op_threads(2);
  constexpr int kCallers = 3;
  constexpr int kLoops = 200;
  constexpr std::int64_t kN = 5000;
  std::vector<std::thread> callers;
  std::vector<int> failures(kCallers, 0);
  for (int caller = 0; caller < kCallers; ++caller) {
    callers.emplace_back([&, caller] {
      for (int loop = 0; loop < kLoops; ++loop) {
        std::vector<std::atomic<int>> visits(kN);
        parallel_for(kN, 64, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) visits[static_cast<std::size_t>(i)].fetch_add(1);
        });
        for (const std::atomic<int>& count : visits) failures[static_cast<std::size_t>(caller)] += count.load() != 1;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (int caller = 0; caller < kCallers; ++caller) EXPECT_EQ(failures[static_cast<std::size_t>(caller)], 0);
}

TEST_F(IntraOpPool, ResizingBetweenLoopsKeepsCoverage) {
  for (int round = 0; round < 20; ++round) {
    set_intra_op_threads(1 + round % 4);
    std::vector<std::atomic<int>> visits(3000);
    parallel_for(3000, 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) visits[static_cast<std::size_t>(i)].fetch_add(1);
    });
    for (const std::atomic<int>& count : visits) ASSERT_EQ(count.load(), 1);
  }
}

TEST_F(IntraOpPool, RefusesAThreadCountOutsideItsRange) {
  for (int threads : {0, -1, 1025}) {
    tp_test::expect_invalid([&] { set_intra_op_threads(threads); },
                            {"threads = " + std::to_string(threads), "[1, 1024]"});
  }
  set_intra_op_threads(2);
  EXPECT_THROW(set_intra_op_threads(0), InvalidArgument);
  EXPECT_EQ(intra_op_threads(), 2);  // a refused count changes nothing
}

}  // namespace
}  // namespace tp::backend::cpu
