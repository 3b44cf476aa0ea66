#include "tensorpool/memory/bfc_allocator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

constexpr std::size_t kKiBytes = tp::kKiB;
constexpr std::size_t kMiBytes = tp::kMiB;

// Test-local source: std::aligned_alloc, refuses once `capacity` live bytes would be exceeded, records every
// size asked for. Independent of the library's own sources.
class TestSource final : public MemoryResource {
 public:
  explicit TestSource(std::size_t capacity = ~std::size_t{0}) : MemoryResource("test_source"), capacity_(capacity) {}
  ~TestSource() override { EXPECT_TRUE(live_.empty()) << live_.size() << " regions never returned"; }

  void set_capacity(std::size_t capacity) {
    std::lock_guard lock(mutex_);
    capacity_ = capacity;
  }
  std::size_t live_bytes() const {
    std::lock_guard lock(mutex_);
    return live_bytes_;
  }
  std::vector<std::size_t> attempts() const {
    std::lock_guard lock(mutex_);
    return attempts_;
  }
  std::size_t max_alignment() const noexcept override { return 4096; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag&) override {
    std::lock_guard lock(mutex_);
    attempts_.push_back(bytes);
    if (bytes > capacity_ || live_bytes_ > capacity_ - bytes) {
      OutOfMemoryReport report;
      report.allocator = name();
      report.requested_bytes = bytes;
      throw OutOfMemoryError(report);
    }
    void* ptr = std::aligned_alloc(alignment, round_up(bytes, alignment));
    if (ptr == nullptr) throw std::bad_alloc();
    live_.emplace(ptr, bytes);
    live_bytes_ += bytes;
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(ptr);
    EXPECT_TRUE(it != live_.end() && it->second == bytes) << "source got back a region it did not hand out";
    if (it == live_.end()) return;
    live_bytes_ -= it->second;
    live_.erase(it);
    std::free(ptr);
  }
  MemoryStats do_stats() const override {
    std::lock_guard lock(mutex_);
    MemoryStats stats;
    stats.bytes_reserved = live_bytes_;
    return stats;
  }

  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t live_bytes_ = 0;
  std::unordered_map<void*, std::size_t> live_;
  std::vector<std::size_t> attempts_;
};

BfcOptions grow_options(std::size_t limit, std::size_t initial = 2 * kMiBytes) {
  BfcOptions options;
  options.limit_bytes = limit;
  options.growth = GrowthPolicy::grow;
  options.initial_region_bytes = initial;
  return options;
}

// One region of `region` bytes that holds everything the test allocates.
BfcOptions one_region(std::size_t region) { return grow_options(region, region); }

std::uintptr_t address(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }

std::vector<std::size_t> region_sizes(const BfcAllocator& bfc) {
  std::vector<std::size_t> sizes;
  for (const auto& region : bfc.regions()) sizes.push_back(region.size);
  return sizes;
}

#define EXPECT_CONSISTENT(bfc) EXPECT_EQ((bfc).check_invariants(), "")

// ---- construction and options -------------------------------------------------------------------------

TEST(BfcAllocator, RejectsBadOptions) {
  TestSource source;
  EXPECT_THROW(BfcAllocator(source, grow_options(0)), InvalidArgument);
  EXPECT_THROW(BfcAllocator(source, grow_options(100)), InvalidArgument);
  EXPECT_THROW(BfcAllocator(source, grow_options(kMiBytes, 0)), InvalidArgument);
  EXPECT_THROW(BfcAllocator(std::unique_ptr<MemoryResource>{}, grow_options(kMiBytes)), InvalidArgument);
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
  EXPECT_THROW(bfc.allocate(64, 512), InvalidArgument);
  EXPECT_THROW(bfc.allocate(0), InvalidArgument);
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
  for (auto [ptr, size] : {std::pair{got3, std::size_t{2560}}, {got2, 2 * kKiBytes}, {got4, 4 * kKiBytes},
                           {fence1, std::size_t{256}}, {fence2, std::size_t{256}}, {fence3, std::size_t{256}}}) {
    bfc.deallocate(ptr, size);
  }
  EXPECT_CONSISTENT(bfc);
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
  void* big = bfc.allocate(10 * kMiBytes);  // larger than the cap: a region that holds it (4 doubled to 16)
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
  EXPECT_THROW(bfc.allocate(2 * kMiBytes), OutOfMemoryError);
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
  EXPECT_THROW(bfc.allocate(256), OutOfMemoryError);  // source exhausted
  EXPECT_CONSISTENT(bfc);
  bfc.deallocate(a, 2 * kMiBytes);
  bfc.deallocate(b, kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

// ---- garbage collection, OOM, trim --------------------------------------------------------------------

TEST(BfcAllocator, GarbageCollectionFreesWhollyFreeRegionsAndRetries) {
  TestSource source;
  BfcAllocator bfc(source, grow_options(8 * kMiBytes));
  void* a = bfc.allocate(2 * kMiBytes);  // region 2 MiB
  void* b = bfc.allocate(4 * kMiBytes);  // region 4 MiB
  bfc.deallocate(a, 2 * kMiBytes);
  bfc.deallocate(b, 4 * kMiBytes);
  void* big = bfc.allocate(7 * kMiBytes);  // only 2 MiB left under the limit: GC both regions, then grow
  MemoryStats stats = bfc.stats();
  EXPECT_EQ(stats.num_retries, 1u);
  EXPECT_EQ(stats.upstream_frees, 2u);
  EXPECT_EQ(stats.upstream_allocs, 3u);
  EXPECT_EQ(stats.num_ooms, 0u);
  EXPECT_EQ(region_sizes(bfc).size(), 1u);
  EXPECT_LE(stats.bytes_reserved, 8 * kMiBytes);
  bfc.deallocate(big, 7 * kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, WithoutGarbageCollectionTheSameRequestFails) {
  TestSource source;
  BfcOptions options = grow_options(8 * kMiBytes);
  options.garbage_collection = false;
  BfcAllocator bfc(source, options);
  bfc.deallocate(bfc.allocate(2 * kMiBytes), 2 * kMiBytes);
  bfc.deallocate(bfc.allocate(4 * kMiBytes), 4 * kMiBytes);
  EXPECT_THROW(bfc.allocate(7 * kMiBytes), OutOfMemoryError);
  const MemoryStats stats = bfc.stats();
  EXPECT_EQ(stats.num_retries, 0u);
  EXPECT_EQ(stats.num_ooms, 1u);
  EXPECT_EQ(stats.upstream_frees, 0u);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, OutOfMemoryReportsAndStaysUsable) {
  TestSource source;
  BfcOptions options = grow_options(4 * kMiBytes);
  options.split_threshold = 512 * kKiBytes;
  BfcAllocator bfc(source, options, "bfc-test");
  void* held = bfc.allocate(3 * kMiBytes);  // region 4 MiB: 3 MiB in use, 1 MiB free
  AllocationTag tag;
  tag.name = "huge/activation";
  try {
    bfc.allocate(3 * kMiBytes + 1, 256, tag);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& error) {
    const OutOfMemoryReport& report = error.report();
    EXPECT_EQ(report.allocator, "bfc-test");
    EXPECT_EQ(report.requested_bytes, 3 * kMiBytes + 1);
    EXPECT_EQ(report.rounded_bytes, 3 * kMiBytes + 256);
    EXPECT_EQ(report.request_tag.name, "huge/activation");
    EXPECT_EQ(report.limit_bytes, 4 * kMiBytes);
    EXPECT_EQ(report.in_use_bytes, 3 * kMiBytes);
    EXPECT_EQ(report.reserved_bytes, 4 * kMiBytes);
    EXPECT_EQ(report.largest_free_block, kMiBytes);
    EXPECT_NE(std::string(error.what()).find("bfc-test"), std::string::npos);
  }
  EXPECT_EQ(bfc.stats().num_ooms, 1u);
  EXPECT_CONSISTENT(bfc);

  void* small = bfc.allocate(512 * kKiBytes);  // still serves what fits
  bfc.deallocate(small, 512 * kKiBytes);
  bfc.deallocate(held, 3 * kMiBytes);
  void* bigger = bfc.allocate(3 * kMiBytes + 512 * kKiBytes);  // and serves the freed space
  bfc.deallocate(bigger, 3 * kMiBytes + 512 * kKiBytes);
  EXPECT_EQ(bfc.stats().bytes_in_use, 0u);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, RequestAboveTheLimitFailsCleanly) {
  TestSource source;
  BfcAllocator bfc(source, grow_options(4 * kMiBytes));
  EXPECT_THROW(bfc.allocate(4 * kMiBytes + 1), OutOfMemoryError);
  EXPECT_THROW(bfc.allocate(kMaxAllocationBytes), OutOfMemoryError);
  EXPECT_EQ(bfc.stats().num_ooms, 2u);
  EXPECT_EQ(bfc.stats().bytes_reserved, 0u);
  void* ptr = bfc.allocate(4 * kMiBytes);
  bfc.deallocate(ptr, 4 * kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocator, TrimReturnsWhollyFreeRegions) {
  TestSource source;
  BfcAllocator bfc(source, grow_options(64 * kMiBytes));
  void* a = bfc.allocate(2 * kMiBytes);  // region 2 MiB
  void* b = bfc.allocate(4 * kMiBytes);  // region 4 MiB
  void* c = bfc.allocate(kMiBytes);      // region 8 MiB
  bfc.deallocate(a, 2 * kMiBytes);
  bfc.deallocate(c, kMiBytes);
  EXPECT_EQ(bfc.trim(), 10 * kMiBytes);  // b's region stays
  EXPECT_EQ(bfc.stats().bytes_reserved, 4 * kMiBytes);
  EXPECT_EQ(source.live_bytes(), 4 * kMiBytes);
  EXPECT_EQ(bfc.stats().upstream_frees, 2u);
  EXPECT_CONSISTENT(bfc);
  bfc.deallocate(b, 4 * kMiBytes);
  EXPECT_EQ(bfc.trim(), 4 * kMiBytes);
  EXPECT_EQ(bfc.trim(), 0u);
  EXPECT_EQ(source.live_bytes(), 0u);
  void* again = bfc.allocate(kMiBytes);
  bfc.deallocate(again, kMiBytes);
  EXPECT_CONSISTENT(bfc);
}

// ---- stats --------------------------------------------------------------------------------------------

TEST(BfcAllocator, StatsAndResetPeak) {
  TestSource source;
  BfcAllocator bfc(source, grow_options(64 * kMiBytes));
  void* a = bfc.allocate(kMiBytes - 10);
  void* b = bfc.allocate(100);
  MemoryStats stats = bfc.stats();
  EXPECT_EQ(stats.bytes_in_use, kMiBytes + 256);
  EXPECT_EQ(stats.bytes_requested, kMiBytes + 90);
  EXPECT_EQ(stats.bytes_reserved, 2 * kMiBytes);
  EXPECT_EQ(stats.num_allocs, 2u);
  EXPECT_EQ(stats.largest_alloc, kMiBytes - 10);
  EXPECT_EQ(stats.largest_free_block, kMiBytes - 256);
  EXPECT_EQ(stats.upstream_allocs, 1u);
  ASSERT_TRUE(stats.bytes_limit.has_value());
  EXPECT_EQ(*stats.bytes_limit, 64 * kMiBytes);

  bfc.deallocate(a, kMiBytes - 10);
  stats = bfc.stats();
  EXPECT_EQ(stats.num_frees, 1u);
  EXPECT_EQ(stats.bytes_in_use, 256u);
  EXPECT_EQ(stats.peak_bytes_in_use, kMiBytes + 256);
  EXPECT_EQ(stats.peak_bytes_requested, kMiBytes + 90);
  EXPECT_EQ(stats.peak_bytes_reserved, 2 * kMiBytes);

  bfc.reset_peak();
  stats = bfc.stats();
  EXPECT_EQ(stats.peak_bytes_in_use, 256u);
  EXPECT_EQ(stats.peak_bytes_requested, 100u);
  EXPECT_EQ(stats.peak_bytes_reserved, 2 * kMiBytes);
  bfc.deallocate(b, 100);
  bfc.trim();
  bfc.reset_peak();
  stats = bfc.stats();
  EXPECT_EQ(stats.peak_bytes_in_use, 0u);
  EXPECT_EQ(stats.peak_bytes_reserved, 0u);
  EXPECT_EQ(stats.largest_free_block, 0u);
  EXPECT_EQ(stats.fragmentation(), 0.0);
}

// ---- misuse -------------------------------------------------------------------------------------------

TEST(BfcAllocatorDeathTest, AbortsOnForeignDoubleOrMismatchedFree) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TestSource source;
  BfcAllocator bfc(source, one_region(kMiBytes));
  void* ptr = bfc.allocate(1000);
  int local = 0;
  EXPECT_DEATH(bfc.deallocate(&local, sizeof local), "not allocated by this allocator");
  EXPECT_DEATH(bfc.deallocate(static_cast<char*>(ptr) + 16, 100), "inside an allocation");
  EXPECT_DEATH(bfc.deallocate(ptr, 999), "allocated with 1000 bytes");
  bfc.deallocate(ptr, 1000);
  EXPECT_DEATH(bfc.deallocate(ptr, 1000), "double free");
  bfc.deallocate(nullptr, 0);  // no-op
  EXPECT_CONSISTENT(bfc);
}

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

// Runs one trace; `final_stats` gets the allocator's stats at the end (before the last trim). The seed fixes
// the request sequence; region addresses come from the host, so best-fit ties between regions (and hence
// the exact OOM count) may differ slightly from run to run.
void run_random_trace(std::uint64_t seed, int operations, MemoryStats& final_stats) {
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const TraceSetup setup = setup_for_seed(seed);
  TestSource source(setup.source_capacity);
  BfcAllocator bfc(source, setup.options);
  std::mt19937_64 rng(seed);
  std::vector<Live> live;
  std::vector<unsigned char> scratch;
  std::size_t requested = 0;
  for (int op = 0; op < operations; ++op) {
    const bool do_allocate = live.empty() || (live.size() < 200 && rng() % 100 < 55);
    if (rng() % 1000 == 0) {  // a phase ends: everything is freed, regions become wholly free
      for (const Live& item : live) {
        ASSERT_TRUE(intact(item, scratch)) << "op " << op << ": allocation overwritten";
        bfc.deallocate(item.ptr, item.bytes);
      }
      live.clear();
      requested = 0;
    } else if (do_allocate) {
      const std::size_t bytes = random_size(rng);
      const std::size_t alignment = std::size_t{1} << (rng() % 9);
      try {
        auto* ptr = static_cast<unsigned char*>(bfc.allocate(bytes, alignment));
        ASSERT_EQ(address(ptr) % alignment, 0u) << "op " << op;
        live.push_back(Live{ptr, bytes, static_cast<unsigned char>(rng())});
        fill(live.back());
        requested += bytes;
      } catch (const OutOfMemoryError&) {
        // Legitimate under the limit; the invariants below must still hold.
      }
    } else {
      const std::size_t index = rng() % live.size();
      ASSERT_TRUE(intact(live[index], scratch)) << "op " << op << ": allocation overwritten";
      bfc.deallocate(live[index].ptr, live[index].bytes);
      requested -= live[index].bytes;
      live[index] = live.back();
      live.pop_back();
    }
    if (rng() % 500 == 0) bfc.trim();
    const std::string violation = bfc.check_invariants();
    ASSERT_EQ(violation, "") << "op " << op;
    ASSERT_EQ(bfc.stats().bytes_requested, requested) << "op " << op;
  }
  for (const Live& item : live) {
    ASSERT_TRUE(intact(item, scratch));
    bfc.deallocate(item.ptr, item.bytes);
  }
  const MemoryStats stats = bfc.stats();
  final_stats = stats;
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.num_allocs, stats.num_frees);
  EXPECT_EQ(bfc.trim(), stats.bytes_reserved);
  EXPECT_EQ(source.live_bytes(), 0u);
  EXPECT_CONSISTENT(bfc);
}

TEST(BfcAllocatorProperty, RandomTracesKeepInvariantsAndContents) {
  MemoryStats total;
  for (const std::uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u}) {
    MemoryStats stats;
    run_random_trace(seed, 20000, stats);
    if (HasFatalFailure()) return;
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
          live.push_back(Live{static_cast<unsigned char*>(bfc.allocate(bytes)), bytes,
                              static_cast<unsigned char>(t * 31 + op)});
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
