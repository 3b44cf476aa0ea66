// SPDX-License-Identifier: Apache-2.0
// The offline planner: lower bound, validity of every plan (no two buffers live at the same time share
// bytes), heap >= lower bound always, and == lower bound where an optimal packing is easy.
#include "tensorpool/memory/offline_planner.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace {

using tp::memory::LiveInterval;
using tp::memory::OfflinePlan;

void expect_valid(const std::vector<LiveInterval>& intervals, const OfflinePlan& plan) {
  ASSERT_EQ(plan.offsets.size(), intervals.size());
  EXPECT_GE(plan.heap_bytes, plan.lower_bound_bytes);
  for (std::size_t a = 0; a < intervals.size(); ++a) {
    ASSERT_LE(plan.offsets[a] + intervals[a].bytes, plan.heap_bytes) << "buffer " << a << " outside the heap";
    for (std::size_t b = a + 1; b < intervals.size(); ++b) {
      const bool in_time = intervals[a].start < intervals[b].end && intervals[b].start < intervals[a].end;
      const bool in_space = plan.offsets[a] < plan.offsets[b] + intervals[b].bytes &&
                            plan.offsets[b] < plan.offsets[a] + intervals[a].bytes;
      ASSERT_FALSE(in_time && in_space) << "buffers " << a << " and " << b << " overlap (" << plan.strategy << ")";
    }
  }
}

TEST(OfflinePlanner, LowerBoundIsThePeakOfLiveBytes) {
  const std::vector<LiveInterval> intervals{{0, 4, 100}, {1, 3, 50}, {3, 6, 70}, {4, 5, 10}};
  // t=1..2: 150; t=3: 100 + 70 = 170 (the 50 ended at 3); t=4: 70 + 10 = 80.
  EXPECT_EQ(tp::memory::live_bytes_lower_bound(intervals), 170u);
}

TEST(OfflinePlanner, DisjointLifetimesShareOneSlot) {
  const std::vector<LiveInterval> intervals{{0, 2, 100}, {2, 4, 100}, {4, 6, 60}, {6, 9, 100}};
  const OfflinePlan plan = tp::memory::plan_offsets(intervals);
  expect_valid(intervals, plan);
  EXPECT_EQ(plan.lower_bound_bytes, 100u);
  EXPECT_EQ(plan.heap_bytes, 100u);
}

TEST(OfflinePlanner, StackLikeLifetimesMeetTheLowerBound) {
  // Forward allocates, backward frees in reverse: nested intervals.
  std::vector<LiveInterval> intervals;
  const std::size_t sizes[] = {300, 1000, 40, 700, 256, 900};
  const std::size_t count = std::size(sizes);
  for (std::size_t i = 0; i < count; ++i) intervals.push_back({i, 2 * count - i, sizes[i]});
  const OfflinePlan plan = tp::memory::plan_offsets(intervals);
  expect_valid(intervals, plan);
  EXPECT_EQ(plan.heap_bytes, plan.lower_bound_bytes);
  EXPECT_EQ(plan.lower_bound_bytes, 300u + 1000 + 40 + 700 + 256 + 900);
}

TEST(OfflinePlanner, ReusesAGapLeftByAnEarlierBuffer) {
  // A long-lived pair with a hole between two short-lived buffers: the small late one fits the hole.
  const std::vector<LiveInterval> intervals{{0, 10, 400}, {0, 5, 300}, {0, 10, 200}, {5, 10, 300}, {6, 8, 100}};
  const OfflinePlan plan = tp::memory::plan_offsets(intervals);
  expect_valid(intervals, plan);
  EXPECT_EQ(plan.lower_bound_bytes, 1000u);
  EXPECT_EQ(plan.heap_bytes, 1000u);
}

TEST(OfflinePlanner, RandomIntervalsAlwaysGiveValidPlansAboveTheBound) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::uint64_t state = seed * 0x9e3779b97f4a7c15ULL;
    auto next = [&state] {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      return state;
    };
    std::vector<LiveInterval> intervals;
    for (int i = 0; i < 120; ++i) {
      const std::size_t start = next() % 200;
      intervals.push_back({start, start + 1 + next() % 60, 1 + next() % 5000});
    }
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_valid(intervals, tp::memory::plan_offsets(intervals));
  }
}

TEST(OfflinePlanner, PlansATraceFromItsLiveIntervals) {
  tp::memory::TrainingTraceOptions options;
  options.steps = 2;
  options.model.layers = 2;
  options.model.hidden = 64;
  options.model.vocabulary = 512;
  options.batch = 2;
  options.sequence = 32;
  const tp::memory::Trace trace = tp::memory::generate_training_trace(options);
  const std::vector<LiveInterval> intervals = tp::memory::live_intervals(trace);
  EXPECT_EQ(intervals.size(), trace.allocation_count());
  const OfflinePlan plan = tp::memory::plan_offline(trace);
  EXPECT_EQ(plan.lower_bound_bytes, trace.peak_live_bytes());
  expect_valid(intervals, plan);
}

TEST(OfflinePlanner, EmptyAndInvalidInput) {
  const OfflinePlan empty = tp::memory::plan_offsets({});
  EXPECT_EQ(empty.heap_bytes, 0u);
  EXPECT_EQ(empty.lower_bound_bytes, 0u);
  const std::vector<LiveInterval> backwards{{5, 5, 10}};
  EXPECT_THROW(tp::memory::plan_offsets(backwards), tp::InvalidArgument);
}

}  // namespace
