// SPDX-License-Identifier: Apache-2.0
// The static planner: liveness-based offsets within one arena, in-place sharing, and its invariants on random
// schedules.
#include "tensorpool/compile/static_planner.hpp"

#include <gtest/gtest.h>

#include <random>

#include "tensorpool/core/error.hpp"

namespace tp::compile {
namespace {

void expect_valid(std::span<const BufferRequest> requests, const StaticPlan& plan) {
  ASSERT_EQ(plan.buffers.size(), requests.size());
  EXPECT_GE(plan.arena_bytes, plan.lower_bound_bytes);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(plan.buffers[i].offset % kPlanAlignment, 0u);
    EXPECT_LE(plan.buffers[i].offset + plan.buffers[i].bytes, plan.arena_bytes);
    EXPECT_GE(plan.buffers[i].bytes, requests[i].bytes);
    for (std::size_t j = 0; j < i; ++j) {
      const bool overlap_in_time =
          requests[i].first_step <= requests[j].last_step && requests[j].first_step <= requests[i].last_step;
      if (!overlap_in_time || plan.buffers[i].bytes == 0 || plan.buffers[j].bytes == 0) continue;
      if (plan.buffers[i].shared || plan.buffers[j].shared) continue;  // checked by the sharing tests
      const bool disjoint = plan.buffers[i].offset + plan.buffers[i].bytes <= plan.buffers[j].offset ||
                            plan.buffers[j].offset + plan.buffers[j].bytes <= plan.buffers[i].offset;
      EXPECT_TRUE(disjoint) << requests[i].name << " and " << requests[j].name << " overlap";
    }
  }
}

TEST(StaticPlanner, AChainNeedsOnlyTwoLiveBuffersAtATime) {
  // x0 -> op1 -> x1 -> op2 -> x2 -> op3 -> x3: each tensor is read by the next step only.
  std::vector<BufferRequest> requests;
  for (std::size_t step = 0; step < 4; ++step) requests.push_back({"x" + std::to_string(step), 1000, step, step + 1});
  const StaticPlan plan = plan_static(requests);
  expect_valid(requests, plan);
  EXPECT_EQ(plan.lower_bound_bytes, 2 * 1024u);
  EXPECT_EQ(plan.arena_bytes, 2 * 1024u);
}

TEST(StaticPlanner, InPlaceReuseSharesTheInputsMemory) {
  // matmul -> x (step 0, read by relu at step 1) -> relu -> y (in place over x, read at step 2).
  std::vector<BufferRequest> requests = {{"x", 4096, 0, 1}, {"y", 4096, 1, 2, 0}};
  const StaticPlan plan = plan_static(requests);
  EXPECT_TRUE(plan.buffers[1].shared);
  EXPECT_EQ(plan.buffers[1].offset, plan.buffers[0].offset);
  EXPECT_EQ(plan.arena_bytes, 4096u);
  EXPECT_EQ(plan.shared_buffers, 1u);
}

TEST(StaticPlanner, NoInPlaceReuseWhenTheInputIsReadLaterOrSizesDiffer) {
  // x is read again at step 3 (relu's input is needed by its gradient): y must not overwrite it.
  std::vector<BufferRequest> later = {{"x", 4096, 0, 3}, {"y", 4096, 1, 2, 0}};
  StaticPlan plan = plan_static(later);
  EXPECT_FALSE(plan.buffers[1].shared);
  expect_valid(later, plan);
  EXPECT_EQ(plan.arena_bytes, 8192u);
  std::vector<BufferRequest> sizes = {{"x", 4096, 0, 1}, {"y", 8192, 1, 2, 0}};
  EXPECT_FALSE(plan_static(sizes).buffers[1].shared);
}

TEST(StaticPlanner, RandomSchedulesKeepTheInvariantsAndStayNearTheLowerBound) {
  for (std::uint32_t seed = 1; seed <= 50; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 engine(seed);
    std::vector<BufferRequest> requests;
    for (std::size_t step = 0; step < 60; ++step) {
      const std::size_t bytes = std::uniform_int_distribution<std::size_t>(0, 1 << 16)(engine);
      const std::size_t life = std::uniform_int_distribution<std::size_t>(0, 10)(engine);
      requests.push_back({"t" + std::to_string(step), bytes, step, step + life});
    }
    const StaticPlan plan = plan_static(requests);
    expect_valid(requests, plan);
    EXPECT_LE(static_cast<double>(plan.arena_bytes), 1.5 * static_cast<double>(plan.lower_bound_bytes));
  }
}

TEST(StaticPlanner, BadRequestsNameTheBuffer) {
  std::vector<BufferRequest> backwards = {{"late", 10, 5, 4}};
  EXPECT_THROW(plan_static(backwards), InvalidArgument);
  std::vector<BufferRequest> forward_share = {{"a", 10, 0, 1, 1}, {"b", 10, 1, 2}};
  EXPECT_THROW(plan_static(forward_share), InvalidArgument);
  EXPECT_EQ(plan_static({}).arena_bytes, 0u);
}

}  // namespace
}  // namespace tp::compile
