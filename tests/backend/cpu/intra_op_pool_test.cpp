// SPDX-License-Identifier: Apache-2.0
// The intra-op pool: parallel_for covers its range exactly once in grain-aligned chunks, whatever the thread
// count; helpers really take chunks, each thread first from its own share, under the caller's floating-point
// environment; nested and concurrent callers run inline instead of waiting; a waiting thread lent to the pool
// takes the first helper's place, one at a time, and gives it back; bad thread counts are refused.

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

// Runs a two-chunk loop whose first chunk (the caller's) waits, up to a bound, for another thread to start the
// second: the thread that ran the second chunk (the caller's own when nobody came in time).
std::thread::id second_chunk_runner() {
  std::atomic<bool> started{false};
  std::thread::id runner;
  parallel_for(2, 1, [&](std::int64_t begin, std::int64_t) {
    if (begin == 1) {
      runner = std::this_thread::get_id();
      started.store(true, std::memory_order_release);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!started.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  });
  return runner;
}

TEST_F(IntraOpPool, LendingRefusesAtOnceWithOneThreadOrWhenAlreadyDone) {
  int calls = 0;
  set_intra_op_threads(1);
  EXPECT_FALSE(lend_waiting_thread([&] { return ++calls, false; }));
  set_intra_op_threads(2);
  EXPECT_FALSE(lend_waiting_thread([&] { return ++calls, true; }));
  EXPECT_EQ(calls, 1);  // with one thread done() is not even asked
}

// A lent thread runs the first helper's share of the loops published while it waits, and returns once done().
TEST_F(IntraOpPool, ALentThreadRunsTheFirstHelpersShareUntilDone) {
  set_intra_op_threads(2);
  std::atomic<bool> entered{false};
  std::atomic<bool> stop{false};
  std::atomic<int> lends{0};
  std::thread::id lent_id;
  std::thread lent([&] {
    lent_id = std::this_thread::get_id();
    while (!stop.load()) {
      // Returns early when no loop comes within its poll budget; the test's loops may be that late.
      lends += lend_waiting_thread([&] {
        entered.store(true);
        return stop.load();
      })
                   ? 1
                   : 0;
    }
  });
  while (!entered.load()) std::this_thread::yield();
  int on_lent = 0;
  for (int loop = 0; loop < 50; ++loop) {
    const std::thread::id runner = second_chunk_runner();
    EXPECT_NE(runner, std::this_thread::get_id()) << "loop " << loop;
    on_lent += runner == lent_id ? 1 : 0;
  }
  stop.store(true);
  lent.join();
  EXPECT_GE(lends.load(), 1);
  EXPECT_GE(on_lent, 1);  // the lent thread joins loops (helper 1 sleeps while it is lent)
}

// While one thread is lent, another is refused; the first still returns once its done() holds.
TEST_F(IntraOpPool, ASecondThreadIsNotLentWhileOneIs) {
  set_intra_op_threads(2);
  std::atomic<int> calls{0};
  std::atomic<bool> release{false};
  bool first_lent = false;
  std::thread lent([&] {
    first_lent = lend_waiting_thread([&] {
      if (calls.fetch_add(1) == 0) return false;          // the check on entry
      while (!release.load()) std::this_thread::yield();  // holds the place until the second try is over
      return true;
    });
  });
  while (calls.load() < 2) std::this_thread::yield();
  int second_calls = 0;
  EXPECT_FALSE(lend_waiting_thread([&] { return ++second_calls, false; }));
  release.store(true);
  lent.join();
  EXPECT_TRUE(first_lent);
}

// Once the lent thread has left and its grace has passed, the next loop wakes the first helper again: a loop
// that needs a second thread finds one.
TEST_F(IntraOpPool, TheFirstHelperComesBackAfterTheLentThreadLeaves) {
  set_intra_op_threads(2);
  int calls = 0;
  std::thread lent([&] { lend_waiting_thread([&] { return ++calls > 1; }); });
  lent.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int loop = 0; loop < 5; ++loop) EXPECT_NE(second_chunk_runner(), std::this_thread::get_id()) << "loop " << loop;
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
