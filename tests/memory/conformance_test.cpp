// SPDX-License-Identifier: Apache-2.0
// The contract of memory_resource.hpp, checked on every resource and stack tensorpool ships (RMM-style typed
// conformance suite): alignment, no overlap, argument validation, stats consistency, OOM that leaves the
// resource usable, reset_peak and trim.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "memory/support/resource_subjects.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory::testing {
namespace {

using Subjects =
    ::testing::Types<HostSubject, PinnedHostSubject, SimDeviceSubject, BfcPreallocateSubject, BfcGrowSubject,
                     ExpandableSubject, ExpandableSharedSubject, LimitingSubject, StatisticsSubject, ThreadCacheSubject,
                     TrackingSubject, FailureCallbackSubject, LoggingSubject, BfcStackSubject, BfcGrowStackSubject,
                     ExpandableStackSubject, SystemStackSubject, ShardedArenaSubject>;

template <typename T>
class Conformance : public ::testing::Test {
 protected:
  Conformance() : subject_(T::make()), resource_(*subject_.resource) {}
  Subject subject_;
  MemoryResource& resource_;
};
TYPED_TEST_SUITE(Conformance, Subjects, SubjectNames);

TYPED_TEST(Conformance, HonoursEveryAlignmentUpToItsMaximum) {
  MemoryResource& resource = this->resource_;
  for (std::size_t alignment = 1; alignment <= resource.max_alignment(); alignment *= 2) {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{7}, std::size_t{255}, std::size_t{256}, std::size_t{257},
                              std::size_t{4095}, std::size_t{65537}}) {
      void* ptr = resource.allocate(bytes, alignment);
      ASSERT_NE(ptr, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % alignment, 0u) << bytes << " bytes at " << alignment;
      std::memset(ptr, 0xAB, bytes);  // every requested byte is writable
      resource.deallocate(ptr, bytes);
    }
  }
}

TYPED_TEST(Conformance, RejectsBadArgumentsNamingTheValue) {
  MemoryResource& resource = this->resource_;
  auto expect_invalid = [&](std::size_t bytes, std::size_t alignment, const std::string& needle) {
    try {
      (void)resource.allocate(bytes, alignment);
      ADD_FAILURE() << "accepted bytes=" << bytes << " alignment=" << alignment;
    } catch (const tp::InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  };
  expect_invalid(0, kDefaultAlignment, "bytes = 0");
  expect_invalid(64, 3, "alignment = 3");
  expect_invalid(64, 0, "alignment = 0");
  expect_invalid(64, resource.max_alignment() * 2, "exceeds");
  expect_invalid(std::numeric_limits<std::size_t>::max(), kDefaultAlignment, "overflows");
  expect_invalid(kMaxAllocationBytes + 1, kDefaultAlignment, "overflows");
  // Nothing leaked or counted by the refusals.
  EXPECT_EQ(resource.stats().bytes_in_use, 0u);
  EXPECT_EQ(resource.stats().num_allocs, 0u);
}

TYPED_TEST(Conformance, NeverHandsOutOverlappingMemory) {
  MemoryResource& resource = this->resource_;
  const unsigned seed = 20261129;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  struct Live {
    std::size_t bytes;
    unsigned char pattern;
  };
  std::map<std::uintptr_t, Live> live;  // shadow map: address -> allocation
  std::size_t live_bytes = 0;
  const std::size_t budget = 16 * kMiB;
  auto verify_and_free = [&](std::map<std::uintptr_t, Live>::iterator it) {
    auto* bytes = reinterpret_cast<unsigned char*>(it->first);
    for (std::size_t i = 0; i < it->second.bytes; i += 61) {
      ASSERT_EQ(bytes[i], it->second.pattern) << "allocation at " << it->first << " was overwritten";
    }
    resource.deallocate(bytes, it->second.bytes);
    live_bytes -= it->second.bytes;
    live.erase(it);
  };
  for (int op = 0; op < 3000; ++op) {
    const bool allocate = live.empty() || (random() % 100 < 60 && live_bytes < budget);
    if (allocate) {
      const std::size_t bytes = 1 + random() % (random() % 4 == 0 ? 1 * kMiB : 4 * kKiB);
      auto* ptr = static_cast<unsigned char*>(resource.allocate(bytes));
      const auto address = reinterpret_cast<std::uintptr_t>(ptr);
      auto next = live.lower_bound(address);
      if (next != live.end()) {
        ASSERT_GE(next->first, address + bytes) << "overlaps the next allocation";
      }
      if (next != live.begin()) {
        auto previous = std::prev(next);
        ASSERT_LE(previous->first + previous->second.bytes, address) << "overlaps the previous allocation";
      }
      const auto pattern = static_cast<unsigned char>(random());
      for (std::size_t i = 0; i < bytes; i += 61) ptr[i] = pattern;
      live.emplace(address, Live{bytes, pattern});
      live_bytes += bytes;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(random() % live.size()));
      verify_and_free(it);
    }
  }
  while (!live.empty()) verify_and_free(live.begin());
  EXPECT_EQ(resource.stats().bytes_in_use, 0u);
}

TYPED_TEST(Conformance, StatsStayConsistent) {
  MemoryResource& resource = this->resource_;
  const std::vector<std::size_t> sizes{1, 300, 4096, 100000, 3 * kMiB + 1};
  std::vector<void*> pointers;
  std::size_t requested = 0;
  for (std::size_t bytes : sizes) {
    pointers.push_back(resource.allocate(bytes));
    requested += bytes;
  }
  MemoryStats stats = resource.stats();
  EXPECT_EQ(stats.num_allocs, sizes.size());
  EXPECT_EQ(stats.bytes_requested, requested);
  EXPECT_GE(stats.bytes_in_use, requested);
  EXPECT_GE(stats.peak_bytes_in_use, stats.bytes_in_use);
  EXPECT_GE(stats.peak_bytes_requested, requested);
  EXPECT_EQ(stats.largest_alloc, 3 * kMiB + 1);
  if (this->subject_.reports_reserved) {
    EXPECT_GE(stats.bytes_reserved, stats.bytes_in_use);
    EXPECT_GE(stats.peak_bytes_reserved, stats.bytes_reserved);
  }
  EXPECT_GE(stats.fragmentation(), 0.0);
  EXPECT_LE(stats.fragmentation(), 1.0);
  for (std::size_t i = 0; i < sizes.size(); ++i) resource.deallocate(pointers[i], sizes[i]);
  stats = resource.stats();
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.bytes_requested, 0u);
  EXPECT_EQ(stats.num_frees, sizes.size());
  EXPECT_GE(stats.peak_bytes_in_use, requested);
}

TYPED_TEST(Conformance, OutOfMemoryRaisesAndLeavesTheResourceUsable) {
  MemoryResource& resource = this->resource_;
  void* kept = resource.allocate(kMiB);
  const std::size_t too_big =
      this->subject_.capacity.has_value() ? *this->subject_.capacity + kMiB : kMaxAllocationBytes;
  EXPECT_THROW((void)resource.allocate(too_big), tp::OutOfMemoryError);
  try {
    (void)resource.allocate(too_big);
    ADD_FAILURE() << "allocated " << too_big << " bytes";
  } catch (const std::bad_alloc& error) {  // callers that only know std::bad_alloc still catch it
    const std::string text = error.what();
    EXPECT_NE(text.find("out of memory"), std::string::npos) << text;
  }
  EXPECT_GE(resource.stats().num_ooms, 2u);
  EXPECT_EQ(resource.stats().num_allocs, 1u);
  void* after = resource.allocate(2 * kMiB);
  std::memset(after, 1, 2 * kMiB);
  resource.deallocate(after, 2 * kMiB);
  resource.deallocate(kept, kMiB);
  EXPECT_EQ(resource.stats().bytes_in_use, 0u);
}

TYPED_TEST(Conformance, ResetPeakRestartsFromCurrentValues) {
  MemoryResource& resource = this->resource_;
  void* big = resource.allocate(8 * kMiB);
  void* small = resource.allocate(kKiB);
  resource.deallocate(big, 8 * kMiB);
  EXPECT_GE(resource.stats().peak_bytes_in_use, 8 * kMiB);
  resource.reset_peak();
  MemoryStats stats = resource.stats();
  EXPECT_EQ(stats.peak_bytes_in_use, stats.bytes_in_use);
  EXPECT_EQ(stats.peak_bytes_requested, kKiB);
  EXPECT_EQ(stats.peak_bytes_reserved, stats.bytes_reserved);
  resource.deallocate(small, kKiB);
}

TYPED_TEST(Conformance, TrimReturnsFreeMemoryAndKeepsWorking) {
  MemoryResource& resource = this->resource_;
  std::vector<void*> pointers;
  for (int i = 0; i < 8; ++i) pointers.push_back(resource.allocate(3 * kMiB));
  for (void* ptr : pointers) resource.deallocate(ptr, 3 * kMiB);
  const std::size_t reserved_before = resource.stats().bytes_reserved;
  const std::size_t given_back = resource.trim();
  const MemoryStats after = resource.stats();
  EXPECT_EQ(after.bytes_in_use, 0u);
  EXPECT_EQ(after.bytes_reserved + given_back, reserved_before);
  // Nothing is in use, so a trimmed resource holds nothing but granule-sized bookkeeping.
  EXPECT_LE(after.bytes_reserved, 2 * kMiB);
  void* ptr = resource.allocate(5 * kMiB);
  std::memset(ptr, 7, 5 * kMiB);
  resource.deallocate(ptr, 5 * kMiB);
}

}  // namespace
}  // namespace tp::memory::testing
