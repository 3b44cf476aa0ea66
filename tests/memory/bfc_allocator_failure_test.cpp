// SPDX-License-Identifier: Apache-2.0
// BFC allocator: garbage collection, out-of-memory reports, trim, stats and misuse.
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

#include "memory/support/bfc_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

using namespace tp::memory::testing;  // NOLINT: test helpers

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
  EXPECT_THROW((void)bfc.allocate(7 * kMiBytes), OutOfMemoryError);
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
    (void)bfc.allocate(3 * kMiBytes + 1, 256, tag);
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
  EXPECT_THROW((void)bfc.allocate(4 * kMiBytes + 1), OutOfMemoryError);
  EXPECT_THROW((void)bfc.allocate(kMaxAllocationBytes), OutOfMemoryError);
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

// A source that fails with a device error (as a pinned source does at its mlock limit), not an OOM.
class DeviceErrorSource final : public MemoryResource {
 public:
  DeviceErrorSource() : MemoryResource("locked_source") {}

 private:
  void* do_allocate(std::size_t, std::size_t, const AllocationTag&) override {
    TP_THROW(DeviceError, "memory", "locked_source: mlock refused (RLIMIT_MEMLOCK)");
  }
  void do_deallocate(void*, std::size_t) noexcept override {}
  MemoryStats do_stats() const override { return {}; }
};

TEST(BfcAllocator, OutOfMemoryReportCarriesTheSourcesOwnError) {
  DeviceErrorSource source;
  BfcAllocator bfc(source, grow_options(16 * kMiBytes));
  try {
    (void)bfc.allocate(kMiBytes);
    FAIL() << "the source never serves";
  } catch (const OutOfMemoryError& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("the source refused with"), std::string::npos) << text;
    EXPECT_NE(text.find("RLIMIT_MEMLOCK"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace tp::memory
