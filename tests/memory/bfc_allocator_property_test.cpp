// SPDX-License-Identifier: Apache-2.0
// Randomized property test and concurrency test of the BFC allocator: invariants and memory contents are
// checked after every operation.
#include "tensorpool/memory/bfc_allocator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memory/support/bfc_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

using namespace tp::memory::testing;  // NOLINT: test helpers

// ---- randomized property test -------------------------------------------------------------------------

struct Live {
  unsigned char* ptr;
  std::size_t bytes;
  unsigned char pattern;
};

void fill(const Live& live) { std::memset(live.ptr, live.pattern, live.bytes); }

bool intact(const Live& live, std::vector<unsigned char>& scratch) {
  if (scratch.size() < live.bytes) scratch.resize(live.bytes);
  std::memset(scratch.data(), live.pattern, live.bytes);
  return std::memcmp(scratch.data(), live.ptr, live.bytes) == 0;
}

std::size_t random_size(std::mt19937_64& rng) {
  const auto pick = rng() % 100;
  if (pick < 60) return 1 + rng() % (4 * kKiBytes);
  if (pick < 95) return 1 + rng() % (32 * kKiBytes);
  if (pick < 99) return 1 + rng() % (512 * kKiBytes);
  return 1 + rng() % (3 * kMiBytes / 2);
}

// Each seed also picks a configuration (seed % 5): grow; grow + low split threshold + refusing source;
// preallocate + refusing source (back-off); grow without GC; preallocate + low split threshold.
struct TraceSetup {
  BfcOptions options;
  std::size_t source_capacity;
};

TraceSetup setup_for_seed(std::uint64_t seed) {
  TraceSetup setup{grow_options(2 * kMiBytes, 128 * kKiBytes), ~std::size_t{0}};
  const auto variant = seed % 5;
  if (variant == 2 || variant == 4) setup.options.growth = GrowthPolicy::preallocate;
  if (variant == 1 || variant == 4) setup.options.split_threshold = 16 * kKiBytes;
  if (variant == 1 || variant == 2) setup.source_capacity = 3 * kMiBytes / 2;
  if (variant == 3) setup.options.garbage_collection = false;
  return setup;
}

struct TraceOutcome {
  MemoryStats stats;          // the allocator's stats at the end (before the last trim)
  std::size_t slack_ops = 0;  // operations after which bytes_in_use exceeded the live requests rounded to 256
};

// Runs one trace under `split`. The seed fixes the request sequence; region addresses come from the host, so
// best-fit ties between regions (and hence the exact OOM count) may differ slightly from run to run. Under
// BfcSplit::exact every in-use chunk is its request rounded to 256 bytes, so bytes_in_use is checked against
// that sum after every operation.
void run_random_trace(std::uint64_t seed, int operations, TraceOutcome& outcome,
                      BfcSplit split = BfcSplit::tensorflow) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", split " << to_string(split));
  TraceSetup setup = setup_for_seed(seed);
  setup.options.split = split;
  TestSource source(setup.source_capacity);
  BfcAllocator bfc(source, setup.options);
  std::mt19937_64 rng(seed);
  std::vector<Live> live;
  std::vector<unsigned char> scratch;
  std::size_t requested = 0;
  std::size_t rounded = 0;  // sum of the live requests rounded to 256
  for (int op = 0; op < operations; ++op) {
    const bool do_allocate = live.empty() || (live.size() < 200 && rng() % 100 < 55);
    if (rng() % 1000 == 0) {  // a phase ends: everything is freed, regions become wholly free
      for (const Live& item : live) {
        ASSERT_TRUE(intact(item, scratch)) << "op " << op << ": allocation overwritten";
        bfc.deallocate(item.ptr, item.bytes);
      }
      live.clear();
      requested = 0;
      rounded = 0;
    } else if (do_allocate) {
      const std::size_t bytes = random_size(rng);
      const std::size_t alignment = std::size_t{1} << (rng() % 9);
      try {
        auto* ptr = static_cast<unsigned char*>(bfc.allocate(bytes, alignment));
        ASSERT_EQ(address(ptr) % alignment, 0u) << "op " << op;
        live.push_back(Live{ptr, bytes, static_cast<unsigned char>(rng())});
        fill(live.back());
        requested += bytes;
        rounded += round_up(bytes, BfcAllocator::kGranularity);
      } catch (const OutOfMemoryError&) {
        // Legitimate under the limit; the invariants below must still hold.
      }
    } else {
      const std::size_t index = rng() % live.size();
      ASSERT_TRUE(intact(live[index], scratch)) << "op " << op << ": allocation overwritten";
      bfc.deallocate(live[index].ptr, live[index].bytes);
      requested -= live[index].bytes;
      rounded -= round_up(live[index].bytes, BfcAllocator::kGranularity);
      live[index] = live.back();
      live.pop_back();
    }
    if (rng() % 500 == 0) bfc.trim();
    const std::string violation = bfc.check_invariants();
    ASSERT_EQ(violation, "") << "op " << op;
    ASSERT_EQ(bfc.stats().bytes_requested, requested) << "op " << op;
    if (bfc.stats().bytes_in_use > rounded) ++outcome.slack_ops;
    if (split == BfcSplit::exact) {
      ASSERT_EQ(bfc.stats().bytes_in_use, rounded) << "op " << op;
    }
  }
  for (const Live& item : live) {
    ASSERT_TRUE(intact(item, scratch));
    bfc.deallocate(item.ptr, item.bytes);
  }
  const MemoryStats stats = bfc.stats();
  outcome.stats = stats;
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.num_allocs, stats.num_frees);
  EXPECT_EQ(bfc.trim(), stats.bytes_reserved);
  EXPECT_EQ(source.live_bytes(), 0u);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocatorProperty, RandomTracesKeepInvariantsAndContents) {
  MemoryStats total;
  for (const std::uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u}) {
    TraceOutcome outcome;
    run_random_trace(seed, 20000, outcome);
    if (HasFatalFailure()) return;
    const MemoryStats& stats = outcome.stats;
    total.num_allocs += stats.num_allocs;
    total.num_ooms += stats.num_ooms;
    total.num_retries += stats.num_retries;
    total.upstream_frees += stats.upstream_frees;
  }
  // The traces must reach the interesting paths, not just the easy ones.
  EXPECT_GT(total.num_allocs, 40000u);
  EXPECT_GT(total.num_ooms, 0u);
  EXPECT_GT(total.num_retries, 0u);
  EXPECT_GT(total.upstream_frees, 0u);
  std::printf("random traces: %llu allocs, %llu OOMs, %llu GC retries, %llu regions returned\n",
              static_cast<unsigned long long>(total.num_allocs), static_cast<unsigned long long>(total.num_ooms),
              static_cast<unsigned long long>(total.num_retries),
              static_cast<unsigned long long>(total.upstream_frees));
}

// The same traces under the exact split policy: invariants, contents and OOM recovery hold, and no in-use chunk
// keeps a leftover, where TensorFlow's rule on the same requests does (so the check cannot pass vacuously).
TEST(BfcAllocatorProperty, RandomTracesUnderExactSplitHandOutNoSlack) {
  for (const std::uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    TraceOutcome tensorflow;
    run_random_trace(seed, 10000, tensorflow, BfcSplit::tensorflow);
    TraceOutcome exact;
    run_random_trace(seed, 10000, exact, BfcSplit::exact);
    if (HasFatalFailure()) return;
    EXPECT_GT(tensorflow.slack_ops, 0u) << "seed " << seed;
    EXPECT_EQ(exact.slack_ops, 0u) << "seed " << seed;
    EXPECT_GT(exact.stats.num_allocs, 4000u) << "seed " << seed;
  }
}

// ---- TensorFlow's placements, address for address ---------------------------------------------------------

// TensorFlow's BFC on one region, as plainly as it can be written (a list of chunks in address order, a linear
// best-fit scan): the reference the allocator's bins, split and merge bookkeeping must match exactly.
class ReferenceBfc {
 public:
  ReferenceBfc(std::size_t region, std::size_t split_threshold)
      : chunks_{{0, region, false}}, split_threshold_(split_threshold) {}

  // The offset TensorFlow hands out, or nullopt when no free chunk holds the request.
  std::optional<std::size_t> allocate(std::size_t bytes) {
    const std::size_t rounded = round_up(bytes, BfcAllocator::kGranularity);
    std::optional<std::size_t> best;  // smallest free chunk that holds it, lowest address among equals
    for (std::size_t i = 0; i < chunks_.size(); ++i) {
      if (!chunks_[i].in_use && chunks_[i].size >= rounded && (!best || chunks_[i].size < chunks_[*best].size))
        best = i;
    }
    if (!best) return std::nullopt;
    Chunk& chunk = chunks_[*best];
    if (chunk.size >= 2 * rounded || chunk.size - rounded >= split_threshold_) {
      const Chunk rest{chunk.offset + rounded, chunk.size - rounded, false};
      chunk.size = rounded;
      chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(*best) + 1, rest);
    }
    chunks_[*best].in_use = true;
    return chunks_[*best].offset;
  }

  void deallocate(std::size_t offset) {
    auto it = std::find_if(chunks_.begin(), chunks_.end(), [offset](const Chunk& c) { return c.offset == offset; });
    ASSERT_NE(it, chunks_.end());
    it->in_use = false;
    if (it + 1 != chunks_.end() && !(it + 1)->in_use) {
      it->size += (it + 1)->size;
      chunks_.erase(it + 1);
    }
    if (it != chunks_.begin() && !(it - 1)->in_use) {
      (it - 1)->size += it->size;
      chunks_.erase(it);
    }
  }

 private:
  struct Chunk {
    std::size_t offset;
    std::size_t size;
    bool in_use;
  };
  std::vector<Chunk> chunks_;
  std::size_t split_threshold_;
};

// Random requests (sizes that often land just under twice a free chunk, so both split rules are exercised),
// frees and refusals: every address and every refusal matches the reference.
TEST(BfcAllocatorProperty, PlacesEveryRequestWhereTensorflowDoes) {
  constexpr std::size_t kRegion = 8 * kMiBytes;
  for (const std::size_t threshold : {std::size_t{128} << 20, std::size_t{64} * kKiBytes}) {
    TestSource source;
    BfcOptions options = one_region(kRegion);
    options.split_threshold = threshold;
    BfcAllocator bfc(source, options);
    ReferenceBfc reference(kRegion, threshold);
    std::mt19937_64 rng(threshold);
    std::vector<std::pair<void*, std::size_t>> live;
    std::uintptr_t base = 0;
    std::size_t refusals = 0;
    for (int op = 0; op < 20000; ++op) {
      if (live.empty() || rng() % 100 < 55) {
        const std::size_t bytes = rng() % 4 == 0 ? 1 + rng() % (512 * kKiBytes) : 1 + rng() % (16 * kKiBytes);
        const std::optional<std::size_t> expected = reference.allocate(bytes);
        if (!expected) {
          EXPECT_THROW((void)bfc.allocate(bytes), OutOfMemoryError) << "op " << op;
          ++refusals;
          continue;
        }
        void* ptr = bfc.allocate(bytes);
        if (base == 0) {
          base = bfc.regions().at(0).base;
        }
        ASSERT_EQ(address(ptr) - base, *expected) << "op " << op << ": allocate(" << bytes << ")";
        live.emplace_back(ptr, bytes);
      } else {
        const std::size_t index = rng() % live.size();
        reference.deallocate(address(live[index].first) - base);
        bfc.deallocate(live[index].first, live[index].second);
        live[index] = live.back();
        live.pop_back();
      }
      if (op % 1000 == 0) {
        ASSERT_EQ(bfc.check_invariants(), "") << "op " << op;
      }
    }
    EXPECT_GT(refusals, 0u) << "the trace must fill the region";
    for (const auto& [ptr, bytes] : live) bfc.deallocate(ptr, bytes);
    EXPECT_CONSISTENT(bfc);
  }
}

// ---- concurrency --------------------------------------------------------------------------------------

TEST(BfcAllocatorConcurrency, EightThreadsKeepInvariants) {
  TestSource source;
  BfcAllocator bfc(source, grow_options(256 * kMiBytes, kMiBytes));
  constexpr int kThreads = 8;
  std::vector<int> corrupted(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&bfc, &corrupted, t] {
      std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(t));
      std::vector<Live> live;
      std::vector<unsigned char> scratch;
      for (int op = 0; op < 5000; ++op) {
        if (live.empty() || (live.size() < 64 && rng() % 2 == 0)) {
          const std::size_t bytes = 1 + rng() % (32 * kKiBytes);
          live.push_back(
              Live{static_cast<unsigned char*>(bfc.allocate(bytes)), bytes, static_cast<unsigned char>(t * 31 + op)});
          fill(live.back());
        } else {
          const std::size_t index = rng() % live.size();
          if (!intact(live[index], scratch)) ++corrupted[static_cast<std::size_t>(t)];
          bfc.deallocate(live[index].ptr, live[index].bytes);
          live[index] = live.back();
          live.pop_back();
        }
        if (op % 1000 == 999) (void)bfc.stats();
      }
      for (const Live& item : live) bfc.deallocate(item.ptr, item.bytes);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(corrupted[static_cast<std::size_t>(t)], 0) << "thread " << t;
  EXPECT_CONSISTENT(bfc);
  const MemoryStats stats = bfc.stats();
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.num_allocs, stats.num_frees);
  EXPECT_EQ(stats.num_ooms, 0u);
}

}  // namespace
}  // namespace tp::memory
