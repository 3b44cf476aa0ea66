// SPDX-License-Identifier: Apache-2.0
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

// ---- construction and options -------------------------------------------------------------------------

TEST(BfcAllocator, RejectsBadOptions) {
  TestSource source;
  EXPECT_THROW(BfcAllocator(source, grow_options(0)), InvalidArgument);
  EXPECT_THROW(BfcAllocator(source, grow_options(100)), InvalidArgument);
  EXPECT_THROW(BfcAllocator(source, grow_options(kMiBytes, 0)), InvalidArgument);
  EXPECT_THROW(BfcAllocator(std::unique_ptr<MemoryResource>{}, grow_options(kMiBytes)), InvalidArgument);
  BfcOptions bad_split = grow_options(kMiBytes);
  bad_split.split = static_cast<BfcSplit>(7);
  EXPECT_THROW(BfcAllocator(source, bad_split), InvalidArgument);
}

TEST(BfcAllocator, BorrowedSourceGetsEveryRegionBack) {
  TestSource source;
  {
    BfcAllocator bfc(source, grow_options(64 * kMiBytes), "bfc-test");
    EXPECT_EQ(bfc.name(), "bfc-test");
    EXPECT_EQ(bfc.max_alignment(), 256u);
    void* small = bfc.allocate(100);
    void* big = bfc.allocate(5 * kMiBytes);
    bfc.deallocate(small, 100);
    bfc.deallocate(big, 5 * kMiBytes);
    EXPECT_GT(source.live_bytes(), 0u);
  }
  EXPECT_EQ(source.live_bytes(), 0u);
}

TEST(BfcAllocator, OwnsAUniquePtrSource) {
  auto owned = std::make_unique<TestSource>();
  BfcAllocator bfc(std::move(owned), grow_options(8 * kMiBytes));
  void* ptr = bfc.allocate(1000);
  EXPECT_NE(ptr, nullptr);
  bfc.deallocate(ptr, 1000);
  EXPECT_CONSISTENT(bfc);
}

// ---- rounding, alignment, bins ------------------------------------------------------------------------

TEST(BfcAllocator, RoundsRequestsTo256Bytes) {
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  void* a = bfc.allocate(1);
  void* b = bfc.allocate(257);
  const MemoryStats stats = bfc.stats();
  EXPECT_EQ(stats.bytes_in_use, 256u + 512u);
  EXPECT_EQ(stats.bytes_requested, 1u + 257u);
  EXPECT_EQ(address(b) - address(a), 256u);
  bfc.deallocate(a, 1);
  bfc.deallocate(b, 257);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, HonoursAlignmentUpTo256) {
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  for (const std::size_t alignment : {1u, 8u, 64u, 128u, 256u}) {
    void* ptr = bfc.allocate(3 + alignment, alignment);
    EXPECT_EQ(address(ptr) % 256, 0u);
    bfc.deallocate(ptr, 3 + alignment);
  }
  EXPECT_THROW((void)bfc.allocate(64, 512), InvalidArgument);
  EXPECT_THROW((void)bfc.allocate(0), InvalidArgument);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, BinForSize) {
  EXPECT_EQ(BfcAllocator::bin_for_size(256), 0);
  EXPECT_EQ(BfcAllocator::bin_for_size(511), 0);
  EXPECT_EQ(BfcAllocator::bin_for_size(512), 1);
  EXPECT_EQ(BfcAllocator::bin_for_size(1024), 2);
  EXPECT_EQ(BfcAllocator::bin_for_size(kMiBytes), 12);
  EXPECT_EQ(BfcAllocator::bin_for_size(std::size_t{256} << 20), 20);
  EXPECT_EQ(BfcAllocator::bin_for_size(std::size_t{256} << 30), 20);
}

// ---- split rules --------------------------------------------------------------------------------------

TEST(BfcAllocator, SplitsWhenChunkIsAtLeastTwiceTheRequest) {
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  void* ptr = bfc.allocate(512 * kKiBytes);  // exactly half the region: split
  const auto regions = bfc.regions();
  ASSERT_EQ(regions.size(), 1u);
  ASSERT_EQ(regions[0].chunks.size(), 2u);
  EXPECT_EQ(regions[0].chunks[0].size, 512 * kKiBytes);
  EXPECT_TRUE(regions[0].chunks[0].in_use);
  EXPECT_EQ(regions[0].chunks[0].requested, 512 * kKiBytes);
  EXPECT_EQ(regions[0].chunks[1].offset, 512 * kKiBytes);
  EXPECT_FALSE(regions[0].chunks[1].in_use);
  EXPECT_EQ(bfc.stats().bytes_in_use, 512 * kKiBytes);
  bfc.deallocate(ptr, 512 * kKiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, HandsOutTheWholeChunkBelowTwiceAndBelowThreshold) {
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  const std::size_t request = 600 * kKiBytes + 1;
  void* ptr = bfc.allocate(request);
  const auto regions = bfc.regions();
  ASSERT_EQ(regions[0].chunks.size(), 1u);
  EXPECT_EQ(regions[0].chunks[0].size, kMiBytes);
  const MemoryStats stats = bfc.stats();
  EXPECT_EQ(stats.bytes_in_use, kMiBytes);  // the chunk, not the request
  EXPECT_EQ(stats.bytes_requested, request);
  EXPECT_EQ(stats.largest_free_block, 0u);
  bfc.deallocate(ptr, request);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, SplitsWhenLeftoverReachesThreshold) {
  TestSource source;
  BfcOptions options = one_region(kMiBytes);
  options.split_threshold = 256 * kKiBytes;
  BfcAllocator bfc(source, options);
  void* ptr = bfc.allocate(600 * kKiBytes);  // leftover 424 KiB >= 256 KiB
  const auto regions = bfc.regions();
  ASSERT_EQ(regions[0].chunks.size(), 2u);
  EXPECT_EQ(regions[0].chunks[0].size, 600 * kKiBytes);
  EXPECT_EQ(regions[0].chunks[1].size, 424 * kKiBytes);
  EXPECT_EQ(bfc.stats().largest_free_block, 424 * kKiBytes);
  void* second = bfc.allocate(250 * kKiBytes);  // 424 < 2 x 250 and leftover 174 KiB < threshold: whole
  EXPECT_EQ(bfc.regions()[0].chunks.size(), 2u);
  bfc.deallocate(ptr, 600 * kKiBytes);
  bfc.deallocate(second, 250 * kKiBytes);
  EXPECT_CONSISTENT(bfc);
}

// ---- split policy: exact ------------------------------------------------------------------------------

BfcOptions exact(BfcOptions options) {
  options.split = BfcSplit::exact;
  return options;
}

std::vector<std::size_t> chunk_sizes(const BfcAllocator& bfc) {
  const std::vector<BfcAllocator::RegionInfo> regions = bfc.regions();
  std::vector<std::size_t> sizes;
  for (const auto& chunk : regions.at(0).chunks) sizes.push_back(chunk.size);
  return sizes;
}

TEST(BfcSplit, NamesThePolicies) {
  EXPECT_EQ(to_string(BfcSplit::tensorflow), "tensorflow");
  EXPECT_EQ(to_string(BfcSplit::exact), "exact");
  EXPECT_EQ(BfcOptions{}.split, BfcSplit::tensorflow);  // TensorFlow's rule unless asked otherwise
}

TEST(BfcSplit, ExactSplitsWhereTensorflowHandsTheChunkOutWhole) {
  const std::size_t request = 600 * kKiBytes + 1;  // below half the region, leftover below the threshold
  const std::size_t rounded = 600 * kKiBytes + 256;
  TestSource source;
  BfcAllocator tensorflow(source, one_region(kMiBytes));
  BfcAllocator exact_bfc(source, exact(one_region(kMiBytes)));
  void* whole = tensorflow.allocate(request);
  void* cut = exact_bfc.allocate(request);
  EXPECT_EQ(chunk_sizes(tensorflow), std::vector<std::size_t>{kMiBytes});
  EXPECT_EQ(tensorflow.stats().bytes_in_use, kMiBytes);
  EXPECT_EQ(chunk_sizes(exact_bfc), (std::vector<std::size_t>{rounded, kMiBytes - rounded}));
  EXPECT_EQ(exact_bfc.stats().bytes_in_use, rounded);
  EXPECT_EQ(exact_bfc.stats().bytes_requested, request);
  EXPECT_EQ(exact_bfc.stats().largest_free_block, kMiBytes - rounded);
  EXPECT_CONSISTENT(exact_bfc);
  tensorflow.deallocate(whole, request);
  exact_bfc.deallocate(cut, request);
  EXPECT_EQ(chunk_sizes(exact_bfc), std::vector<std::size_t>{kMiBytes});  // the leftover merged back
  EXPECT_CONSISTENT(tensorflow);
  EXPECT_CONSISTENT(exact_bfc);
}

TEST(BfcSplit, ExactSplitsOffALeftoverOfOneGranule) {
  TestSource source;
  BfcAllocator bfc(source, exact(one_region(kMiBytes)));
  void* ptr = bfc.allocate(kMiBytes - 256);
  EXPECT_EQ(chunk_sizes(bfc), (std::vector<std::size_t>{kMiBytes - 256, 256}));
  void* last = bfc.allocate(1);  // the 256-byte leftover serves a request without a new region
  EXPECT_EQ(region_sizes(bfc), std::vector<std::size_t>{kMiBytes});
  EXPECT_EQ(chunk_sizes(bfc), (std::vector<std::size_t>{kMiBytes - 256, 256}));
  EXPECT_CONSISTENT(bfc);
  bfc.deallocate(ptr, kMiBytes - 256);
  bfc.deallocate(last, 1);
  EXPECT_CONSISTENT(bfc);
}

// The case: Adam's second moment of the 784x512 kernel (1,605,632 bytes) and a free chunk of 2,565,888
// bytes. TensorFlow's rule hands the whole chunk out (below twice the request, leftover below 128 MiB), so the
// 960,256 bytes behind it serve nothing until the free; exact leaves them free for the next request.
TEST(BfcSplit, ExactLeavesTheSlackOfTheMlpKernelFree) {
  constexpr std::size_t kChunk = 2'565'888;
  constexpr std::size_t kRequest = 1'605'632;
  constexpr std::size_t kRest = kChunk - kRequest;
  TestSource source;
  BfcAllocator tensorflow(source, one_region(kChunk));
  BfcAllocator exact_bfc(source, exact(one_region(kChunk)));
  void* whole = tensorflow.allocate(kRequest);
  void* cut = exact_bfc.allocate(kRequest);
  EXPECT_EQ(tensorflow.stats().bytes_in_use, kChunk);
  EXPECT_EQ(exact_bfc.stats().bytes_in_use, kRequest);
  EXPECT_THROW((void)tensorflow.allocate(kRest), OutOfMemoryError);
  void* rest = exact_bfc.allocate(kRest);
  EXPECT_EQ(exact_bfc.stats().bytes_in_use, kChunk);
  EXPECT_EQ(region_sizes(exact_bfc), std::vector<std::size_t>{kChunk});
  EXPECT_CONSISTENT(exact_bfc);
  tensorflow.deallocate(whole, kRequest);
  exact_bfc.deallocate(cut, kRequest);
  exact_bfc.deallocate(rest, kRest);
  EXPECT_CONSISTENT(tensorflow);
  EXPECT_CONSISTENT(exact_bfc);
}

TEST(BfcSplit, ExactStillCoalescesFreedNeighbours) {
  TestSource source;
  BfcAllocator bfc(source, exact(one_region(kMiBytes)));
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(bfc.allocate(3 * kKiBytes + 1));  // 3.25 KiB chunks
  ASSERT_EQ(chunk_sizes(bfc).size(), 5u);
  bfc.deallocate(blocks[1], 3 * kKiBytes + 1);
  bfc.deallocate(blocks[2], 3 * kKiBytes + 1);  // merges with blocks[1]
  EXPECT_EQ(chunk_sizes(bfc).at(1), 2 * (3 * kKiBytes + 256));
  EXPECT_CONSISTENT(bfc);
  void* reuse = bfc.allocate(kKiBytes);  // best fit: the merged hole, cut exactly
  EXPECT_EQ(address(reuse), address(blocks[1]));
  EXPECT_EQ(chunk_sizes(bfc).at(1), kKiBytes);
  bfc.deallocate(reuse, kKiBytes);
  bfc.deallocate(blocks[0], 3 * kKiBytes + 1);
  bfc.deallocate(blocks[3], 3 * kKiBytes + 1);
  EXPECT_EQ(chunk_sizes(bfc), std::vector<std::size_t>{kMiBytes});  // one free chunk covers the region again
  EXPECT_EQ(bfc.stats().largest_free_block, kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

// exact promises each chunk's size (so a thread cache needs no look-up); tensorflow cannot, since a chunk below
// twice the request is handed out whole.
TEST(BfcSplit, ExactPromisesTheAllocatedSizeOfEveryRequest) {
  TestSource source;
  BfcAllocator tensorflow(source, one_region(kMiBytes));
  BfcAllocator bfc(source, exact(one_region(16 * kMiBytes)));  // room for 40 live blocks however placed
  EXPECT_EQ(tensorflow.fixed_allocated_size(1000), std::nullopt);
  std::mt19937 rng(23);
  std::uniform_int_distribution<std::size_t> size(1, 64 * kKiBytes);
  std::vector<std::pair<void*, std::size_t>> live;
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || (live.size() < 40 && rng() % 2 == 0)) {
      const std::size_t bytes = size(rng);
      void* ptr = bfc.allocate(bytes);
      ASSERT_EQ(bfc.fixed_allocated_size(bytes), round_up(bytes, BfcAllocator::kGranularity));
      ASSERT_EQ(bfc.allocated_size(ptr, bytes), *bfc.fixed_allocated_size(bytes)) << "step " << step;
      live.emplace_back(ptr, bytes);
    } else {
      const std::size_t victim = rng() % live.size();
      bfc.deallocate(live[victim].first, live[victim].second);
      live[victim] = live.back();
      live.pop_back();
    }
  }
  for (const auto& [ptr, bytes] : live) bfc.deallocate(ptr, bytes);
  EXPECT_CONSISTENT(bfc);
}

// ---- coalescing and best fit --------------------------------------------------------------------------

TEST(BfcAllocator, CoalescesFreedNeighbours) {
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  void* a = bfc.allocate(kKiBytes);
  void* b = bfc.allocate(kKiBytes);
  void* c = bfc.allocate(kKiBytes);
  void* d = bfc.allocate(kKiBytes);
  ASSERT_EQ(bfc.regions()[0].chunks.size(), 5u);  // a b c d rest

  bfc.deallocate(b, kKiBytes);  // middle: stands alone
  EXPECT_EQ(bfc.regions()[0].chunks.size(), 5u);
  EXPECT_CONSISTENT(bfc);
  bfc.deallocate(c, kKiBytes);  // merges with b
  auto chunks = bfc.regions()[0].chunks;
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[1].size, 2 * kKiBytes);
  EXPECT_FALSE(chunks[1].in_use);
  EXPECT_CONSISTENT(bfc);

  bfc.deallocate(a, kKiBytes);  // merges with the free chunk after it
  chunks = bfc.regions()[0].chunks;
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].size, 3 * kKiBytes);
  bfc.deallocate(d, kKiBytes);  // both neighbours free: one chunk covers the region
  chunks = bfc.regions()[0].chunks;
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].size, kMiBytes);
  EXPECT_EQ(bfc.stats().largest_free_block, kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, BestFitPicksTheSmallestFittingChunk) {
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  void* four = bfc.allocate(4 * kKiBytes);
  void* fence1 = bfc.allocate(256);
  void* two = bfc.allocate(2 * kKiBytes);
  void* fence2 = bfc.allocate(256);
  void* three = bfc.allocate(3 * kKiBytes);
  void* fence3 = bfc.allocate(256);
  bfc.deallocate(four, 4 * kKiBytes);
  bfc.deallocate(two, 2 * kKiBytes);
  bfc.deallocate(three, 3 * kKiBytes);
  EXPECT_CONSISTENT(bfc);

  void* got3 = bfc.allocate(2560);  // 3 KiB is the best fit (2 KiB too small, 4 KiB and the tail larger)
  EXPECT_EQ(got3, three);
  void* got2 = bfc.allocate(2 * kKiBytes);
  EXPECT_EQ(got2, two);
  void* got4 = bfc.allocate(4 * kKiBytes);
  EXPECT_EQ(got4, four);
  for (auto [ptr, size] : {std::pair{got3, std::size_t{2560}},
                           {got2, 2 * kKiBytes},
                           {got4, 4 * kKiBytes},
                           {fence1, std::size_t{256}},
                           {fence2, std::size_t{256}},
                           {fence3, std::size_t{256}}}) {
    bfc.deallocate(ptr, size);
  }
  EXPECT_CONSISTENT(bfc);
}

// The search goes bin by bin from the request's own (floor(log2(rounded / 256))) upwards: a request whose bin is
// empty, or holds only smaller chunks, takes the first chunk of the next bin that is not empty, never a later
// bin's nor the region's tail.
TEST(BfcAllocator, BestFitSkipsEmptyBinsToTheNextOneThatHoldsAChunk) {
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  void* in_bin0 = bfc.allocate(256);
  void* fence1 = bfc.allocate(256);
  void* in_bin3 = bfc.allocate(2 * kKiBytes);
  void* fence2 = bfc.allocate(256);
  void* in_bin5 = bfc.allocate(8 * kKiBytes);
  void* fence3 = bfc.allocate(256);
  for (auto [ptr, size] : {std::pair{in_bin0, std::size_t{256}}, {in_bin3, 2 * kKiBytes}, {in_bin5, 8 * kKiBytes}}) {
    bfc.deallocate(ptr, size);
  }
  ASSERT_EQ(BfcAllocator::bin_for_size(2 * kKiBytes), 3);
  ASSERT_EQ(BfcAllocator::bin_for_size(8 * kKiBytes), 5);
  EXPECT_CONSISTENT(bfc);

  // Bin 2 is empty: the 2 KiB chunk of bin 3, split; its 1 KiB rest goes to bin 2.
  void* a = bfc.allocate(kKiBytes);
  EXPECT_EQ(a, in_bin3);
  // Bin 2 holds only that 1 KiB rest, bin 3 and 4 are empty: the 8 KiB chunk of bin 5.
  void* b = bfc.allocate(1536);
  EXPECT_EQ(b, in_bin5);
  // 512 bytes: bin 1 is empty; bin 2's 1 KiB rest (not bin 0's smaller chunk, not bin 4's larger rest).
  void* c = bfc.allocate(300);
  EXPECT_EQ(address(c), address(in_bin3) + kKiBytes);
  EXPECT_CONSISTENT(bfc);
  for (auto [ptr, size] : {std::pair{a, kKiBytes},
                           {b, std::size_t{1536}},
                           {c, std::size_t{300}},
                           {fence1, std::size_t{256}},
                           {fence2, std::size_t{256}},
                           {fence3, std::size_t{256}}}) {
    bfc.deallocate(ptr, size);
  }
  EXPECT_CONSISTENT(bfc);
  EXPECT_EQ(bfc.regions().at(0).chunks.size(), 1u) << "everything coalesced back into one free chunk";
}

TEST(BfcAllocator, BestFitBreaksTiesByLowestAddress) {
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  void* low = bfc.allocate(kKiBytes);
  void* fence1 = bfc.allocate(256);
  void* high = bfc.allocate(kKiBytes);
  void* fence2 = bfc.allocate(256);
  bfc.deallocate(high, kKiBytes);
  bfc.deallocate(low, kKiBytes);
  void* got = bfc.allocate(kKiBytes);
  EXPECT_EQ(got, low);
  bfc.deallocate(got, kKiBytes);
  bfc.deallocate(fence1, 256);
  bfc.deallocate(fence2, 256);
  EXPECT_CONSISTENT(bfc);
}

// ---- regions and growth -------------------------------------------------------------------------------

TEST(BfcAllocator, PreallocateMakesOneRegionOfTheLimitAtFirstUse) {
  TestSource source;
  BfcOptions options = grow_options(8 * kMiBytes);
  options.growth = GrowthPolicy::preallocate;
  BfcAllocator bfc(source, options);
  EXPECT_TRUE(bfc.regions().empty());
  std::vector<void*> ptrs;
  for (int i = 0; i < 7; ++i) ptrs.push_back(bfc.allocate(kMiBytes));
  EXPECT_EQ(region_sizes(bfc), std::vector<std::size_t>{8 * kMiBytes});
  const MemoryStats stats = bfc.stats();
  EXPECT_EQ(stats.bytes_reserved, 8 * kMiBytes);
  EXPECT_EQ(stats.upstream_allocs, 1u);
  EXPECT_EQ(stats.bytes_limit, 8 * kMiBytes);
  for (void* ptr : ptrs) bfc.deallocate(ptr, kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, GrowDoublesRegionSizes) {
  TestSource source;
  BfcAllocator bfc(source, grow_options(64 * kMiBytes));
  void* a = bfc.allocate(2 * kMiBytes);  // region 2 MiB
  void* b = bfc.allocate(2 * kMiBytes);  // region 4 MiB
  void* c = bfc.allocate(4 * kMiBytes);  // region 8 MiB
  auto sizes = region_sizes(bfc);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<std::size_t>{2 * kMiBytes, 4 * kMiBytes, 8 * kMiBytes}));
  EXPECT_EQ(source.attempts(), (std::vector<std::size_t>{2 * kMiBytes, 4 * kMiBytes, 8 * kMiBytes}));
  void* d = bfc.allocate(30 * kMiBytes);  // next would be 16 MiB: at least the request, doubled to 32 MiB
  EXPECT_EQ(source.attempts().back(), 32 * kMiBytes);
  EXPECT_EQ(bfc.stats().bytes_reserved, 46 * kMiBytes);
  EXPECT_EQ(bfc.stats().upstream_allocs, 4u);
  bfc.deallocate(a, 2 * kMiBytes);
  bfc.deallocate(b, 2 * kMiBytes);
  bfc.deallocate(c, 4 * kMiBytes);
  bfc.deallocate(d, 30 * kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, GrowStopsDoublingAtMaxRegionBytes) {
  TestSource source;
  BfcOptions options = grow_options(64 * kMiBytes);
  options.max_region_bytes = 4 * kMiBytes;
  BfcAllocator bfc(source, options);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(bfc.allocate(2 * kMiBytes));  // regions 2, 4, then 4 MiB
  void* big = bfc.allocate(10 * kMiBytes);   // larger than the cap: a region that holds it (4 doubled to 16)
  void* after = bfc.allocate(3 * kMiBytes);  // back to the cap
  EXPECT_EQ(source.attempts(),
            (std::vector<std::size_t>{2 * kMiBytes, 4 * kMiBytes, 4 * kMiBytes, 16 * kMiBytes, 4 * kMiBytes}));
  for (void* block : blocks) bfc.deallocate(block, 2 * kMiBytes);
  bfc.deallocate(big, 10 * kMiBytes);
  bfc.deallocate(after, 3 * kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, GrowNeverPassesTheLimit) {
  TestSource source;
  BfcAllocator bfc(source, grow_options(10 * kMiBytes));
  void* a = bfc.allocate(2 * kMiBytes);
  void* b = bfc.allocate(4 * kMiBytes);
  void* c = bfc.allocate(3 * kMiBytes);  // next would be 8 MiB; only 4 MiB left under the limit
  EXPECT_EQ(source.attempts(), (std::vector<std::size_t>{2 * kMiBytes, 4 * kMiBytes, 4 * kMiBytes}));
  EXPECT_EQ(bfc.stats().bytes_reserved, 10 * kMiBytes);
  EXPECT_THROW((void)bfc.allocate(2 * kMiBytes), OutOfMemoryError);
  bfc.deallocate(a, 2 * kMiBytes);
  bfc.deallocate(b, 4 * kMiBytes);
  bfc.deallocate(c, 3 * kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, BacksOffWhenThePreallocationIsRefused) {
  TestSource source(5 * kMiBytes);
  BfcOptions options = grow_options(64 * kMiBytes);
  options.growth = GrowthPolicy::preallocate;
  BfcAllocator bfc(source, options);
  void* ptr = bfc.allocate(kMiBytes);
  const auto attempts = source.attempts();
  ASSERT_GE(attempts.size(), 2u);
  EXPECT_EQ(attempts.front(), 64 * kMiBytes);
  for (std::size_t i = 1; i < attempts.size(); ++i) {
    EXPECT_LT(attempts[i], attempts[i - 1]);
    EXPECT_GE(attempts[i], attempts[i - 1] * 9 / 10 - 256);  // x0.9, rounded down to 256
    EXPECT_EQ(attempts[i] % 256, 0u);
  }
  const auto sizes = region_sizes(bfc);
  ASSERT_EQ(sizes.size(), 1u);
  EXPECT_LE(sizes[0], 5 * kMiBytes);
  EXPECT_GT(sizes[0], 5 * kMiBytes * 9 / 10 - 256);
  bfc.deallocate(ptr, kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, GrowBacksOffDownToTheRequest) {
  TestSource source(3 * kMiBytes);
  BfcAllocator bfc(source, grow_options(64 * kMiBytes));
  void* a = bfc.allocate(2 * kMiBytes);  // region 2 MiB
  void* b = bfc.allocate(kMiBytes);      // 4 MiB refused, backs off until 1 MiB fits
  EXPECT_EQ(region_sizes(bfc).size(), 2u);
  EXPECT_EQ(bfc.stats().bytes_reserved, 3 * kMiBytes);
  EXPECT_EQ(source.attempts().back(), kMiBytes);
  EXPECT_THROW((void)bfc.allocate(256), OutOfMemoryError);  // source exhausted
  EXPECT_CONSISTENT(bfc);
  bfc.deallocate(a, 2 * kMiBytes);
  bfc.deallocate(b, kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

}  // namespace
}  // namespace tp::memory
