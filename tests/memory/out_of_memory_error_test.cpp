// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/out_of_memory_error.hpp"

#include <gtest/gtest.h>

#include <string>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_stats.hpp"

namespace tp {
namespace {

using memory::MemoryStats;

OutOfMemoryReport report_with(std::size_t request, std::size_t in_use, std::size_t largest_free) {
  OutOfMemoryReport report;
  report.device = "sim:1";
  report.allocator = "bfc";
  report.requested_bytes = request - 100;
  report.rounded_bytes = request;
  report.limit_bytes = 64 * kMiB;
  report.in_use_bytes = in_use;
  report.reserved_bytes = 64 * kMiB;
  report.largest_free_block = largest_free;
  return report;
}

TEST(OutOfMemoryReport, TellsFragmentationFromShortage) {
  // 40 MiB free in total, largest block 10 MiB: a 20 MiB request fails only because of fragmentation.
  const OutOfMemoryReport fragmented = report_with(20 * kMiB, 24 * kMiB, 10 * kMiB);
  EXPECT_EQ(fragmented.free_bytes(), 40 * kMiB);
  EXPECT_TRUE(fragmented.is_fragmentation());
  EXPECT_DOUBLE_EQ(fragmented.fragmentation().external, 0.75);
  // 8 MiB free in total: a 20 MiB request cannot fit however memory is arranged.
  const OutOfMemoryReport short_of_memory = report_with(20 * kMiB, 56 * kMiB, 8 * kMiB);
  EXPECT_FALSE(short_of_memory.is_fragmentation());
  EXPECT_DOUBLE_EQ(short_of_memory.fragmentation().external, 0.0);

  const std::string fragmented_text = OutOfMemoryError(fragmented).what();
  EXPECT_NE(fragmented_text.find("Cause: fragmentation"), std::string::npos) << fragmented_text;
  EXPECT_NE(fragmented_text.find("TP_ALLOCATOR=expandable"), std::string::npos) << fragmented_text;
  EXPECT_NE(fragmented_text.find("no single block holds the request (the largest reserved free block is 10.00 MiB)."),
            std::string::npos)
      << fragmented_text;
  // Growing: 16 MiB under the limit not reserved yet, too little for the request as well.
  OutOfMemoryReport growing = fragmented;
  growing.reserved_bytes = 48 * kMiB;
  EXPECT_TRUE(growing.is_fragmentation());
  const std::string growing_text = OutOfMemoryError(growing).what();
  EXPECT_NE(growing_text.find("(the largest reserved free block is 10.00 MiB; 16.00 MiB under the limit is not "
                              "reserved yet)"),
            std::string::npos)
      << growing_text;
  const std::string shortage_text = OutOfMemoryError(short_of_memory).what();
  EXPECT_NE(shortage_text.find("real shortage"), std::string::npos) << shortage_text;
  EXPECT_NE(shortage_text.find("batch size"), std::string::npos) << shortage_text;
}

TEST(OutOfMemoryReport, NothingReservedIsNeverFragmentation) {
  // A growing allocator that has reserved nothing: free by the limit, but no block held in pieces.
  OutOfMemoryReport report = report_with(12 * kMiB, 0, 0);
  report.limit_bytes = 10 * kMiB;
  report.reserved_bytes = 0;
  EXPECT_EQ(report.free_bytes(), 10 * kMiB);
  EXPECT_EQ(report.reserved_free_bytes(), 0u);
  EXPECT_DOUBLE_EQ(report.fragmentation().external, 0.0);
  EXPECT_FALSE(report.is_fragmentation());
  EXPECT_TRUE(report.exceeds_limit());
  const std::string text = OutOfMemoryError(report).what();
  EXPECT_NE(text.find("fragmentation 0.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("Cause: the request alone (12.00 MiB) exceeds the limit (10.00 MiB); nothing else is in use"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("real shortage"), std::string::npos) << text;
  // Within the limit with nothing of the stack in use: something below refused, not a shortage of this stack.
  report.rounded_bytes = 4 * kMiB;
  EXPECT_FALSE(report.exceeds_limit());
  const std::string below = OutOfMemoryError(report).what();
  EXPECT_NE(below.find("nothing of this stack is in use"), std::string::npos) << below;
  // Reserved memory all in use: nothing is free in pieces either.
  report.reserved_bytes = 6 * kMiB;
  report.in_use_bytes = 6 * kMiB;
  EXPECT_DOUBLE_EQ(report.fragmentation().external, 0.0);
}

TEST(OutOfMemoryReport, ShowsExternalAndInternalFragmentationAsStatsDo) {
  OutOfMemoryReport report = report_with(20 * kMiB, 24 * kMiB, 10 * kMiB);
  std::string text = OutOfMemoryError(report).what();
  EXPECT_NE(text.find("free 40.00 MiB.\n  fragmentation 75.0% external (largest free block 10.00 MiB of 40.00 MiB "
                      "reserved and free)."),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("internal"), std::string::npos) << "unknown without the requested bytes: " << text;
  report.requested_in_use_bytes = 24 * kMiB - 1536;  // filled by the stack's StatisticsAdaptor
  EXPECT_EQ(report.fragmentation().internal_bytes, 1536u);
  text = OutOfMemoryError(report).what();
  EXPECT_NE(text.find("fragmentation 75.0% external (largest free block 10.00 MiB of 40.00 MiB reserved and free), "
                      "1.50 KiB internal (rounding)."),
            std::string::npos)
      << text;
  MemoryStats stats;
  stats.bytes_reserved = report.reserved_bytes;
  stats.bytes_in_use = report.in_use_bytes;
  stats.bytes_requested = *report.requested_in_use_bytes;
  stats.largest_free_block = report.largest_free_block;
  EXPECT_EQ(memory::describe(stats.fragmentation_detail()), memory::describe(report.fragmentation()));
}

TEST(OutOfMemoryReport, ARefusalFromBelowWithRoomUnderTheLimitIsNotFragmentation) {
  // 8 MiB reserved, 2 MiB of it free in pieces of 1 MiB, 56 MiB the limit leaves unreserved: a 4 MiB request
  // refused there was refused by the memory below (held elsewhere), not by fragmentation.
  OutOfMemoryReport report = report_with(4 * kMiB, 6 * kMiB, kMiB);
  report.reserved_bytes = 8 * kMiB;
  EXPECT_DOUBLE_EQ(report.fragmentation().external, 0.5);
  EXPECT_FALSE(report.is_fragmentation());
  // Preallocated (all 64 MiB reserved), the same holes make it fragmentation.
  report.reserved_bytes = 64 * kMiB;
  report.largest_free_block = 2 * kMiB;
  EXPECT_TRUE(report.is_fragmentation());
}

TEST(OutOfMemoryReport, FreeBytesWithoutALimitIsTheReservedRemainder) {
  OutOfMemoryReport report = report_with(kMiB, 10 * kMiB, kMiB);
  report.limit_bytes.reset();
  report.reserved_bytes = 12 * kMiB;
  EXPECT_EQ(report.free_bytes(), 2 * kMiB);
  report.in_use_bytes = 20 * kMiB;  // never negative
  EXPECT_EQ(report.free_bytes(), 0u);
}

TEST(OutOfMemoryError, IsABadAllocWhoseTextFollowsAmendments) {
  OutOfMemoryError error(report_with(20 * kMiB, 56 * kMiB, 8 * kMiB));
  const std::bad_alloc& as_bad_alloc = error;
  std::string text = as_bad_alloc.what();
  EXPECT_NE(text.find("out of memory on sim:1 (allocator bfc)"), std::string::npos) << text;
  EXPECT_NE(text.find("20.00 MiB rounded"), std::string::npos) << text;
  EXPECT_NE(text.find("limit 64.00 MiB"), std::string::npos) << text;

  error.amend([](OutOfMemoryReport& report) {
    report.device = "sim:7";
    report.largest_live.push_back(
        {48 * kMiB,
         memory::AllocationTag{"dense/kernel", "MatMul", {784, 512}, "float32", memory::AllocationKind::parameter, 3}});
  });
  text = error.what();
  EXPECT_NE(text.find("on sim:7"), std::string::npos) << text;
  EXPECT_NE(text.find("48.00 MiB  dense/kernel (MatMul, float32[784,512], parameter, step 3)"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace tp
