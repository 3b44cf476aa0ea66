// SPDX-License-Identifier: Apache-2.0
// The host-side bookkeeping of a CUDA stream's graph capture (cuda_graph_book.hpp), checked without a GPU:
// executables found by segment shape, each destroyed exactly once, a full cache emptied before it grows, and
// capture turned off after the failure limit, reported once.

#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/cuda_graph_book.hpp"

namespace tp::backend::cuda {
namespace {

TEST(CudaGraphBook, FindsAnExecutableByItsSegmentShapeOnly) {
  std::vector<int> destroyed;
  ExecCache<int> cache([&destroyed](int exec) { destroyed.push_back(exec); });
  cache.insert({.tasks = 10, .nodes = 12}, 1);
  EXPECT_EQ(cache.find({.tasks = 10, .nodes = 12}), 1);
  EXPECT_FALSE(cache.find({.tasks = 10, .nodes = 13}).has_value());  // another graph, though as many tasks
  EXPECT_FALSE(cache.find({.tasks = 11, .nodes = 12}).has_value());
  EXPECT_TRUE(destroyed.empty());
}

TEST(CudaGraphBook, ReplacingOrErasingDestroysTheOldExecutableOnce) {
  std::vector<int> destroyed;
  ExecCache<int> cache([&destroyed](int exec) { destroyed.push_back(exec); });
  cache.insert({.tasks = 2, .nodes = 2}, 1);
  cache.insert({.tasks = 2, .nodes = 2}, 2);  // an update refused: instantiated afresh
  EXPECT_EQ(destroyed, std::vector<int>{1});
  EXPECT_EQ(cache.find({.tasks = 2, .nodes = 2}), 2);
  cache.erase({.tasks = 2, .nodes = 2});
  cache.erase({.tasks = 2, .nodes = 2});  // nothing left to destroy
  EXPECT_EQ(destroyed, (std::vector<int>{1, 2}));
  EXPECT_EQ(cache.size(), 0U);
}

TEST(CudaGraphBook, AFullCacheIsEmptiedBeforeItTakesAnother) {
  std::vector<int> destroyed;
  {
    ExecCache<int> cache([&destroyed](int exec) { destroyed.push_back(exec); });
    const int full = static_cast<int>(ExecCache<int>::kMaxExecs);
    for (int k = 0; k < full; ++k) cache.insert({.tasks = static_cast<std::size_t>(k), .nodes = 1}, k);
    EXPECT_TRUE(destroyed.empty());
    cache.insert({.tasks = 1000, .nodes = 1}, 1000);
    EXPECT_EQ(destroyed.size(), ExecCache<int>::kMaxExecs);
    EXPECT_EQ(cache.size(), 1U);
    EXPECT_EQ(cache.find({.tasks = 1000, .nodes = 1}), 1000);
  }
  // The destructor destroys what is left.
  EXPECT_EQ(destroyed.size(), ExecCache<int>::kMaxExecs + 1);
  EXPECT_EQ(destroyed.back(), 1000);
}

TEST(CudaGraphBook, CaptureGoesOffAtTheLimitAndSaysSoOnce) {
  CaptureFailures failures;
  for (std::size_t k = 1; k < CaptureFailures::kLimit; ++k) {
    EXPECT_FALSE(failures.count());
    EXPECT_FALSE(failures.capture_off());
  }
  EXPECT_TRUE(failures.count());  // the one that turns it off
  EXPECT_TRUE(failures.capture_off());
  EXPECT_FALSE(failures.count());  // later ones are not reported again
  EXPECT_TRUE(failures.capture_off());
  EXPECT_EQ(failures.failures(), CaptureFailures::kLimit + 1);
}

}  // namespace
}  // namespace tp::backend::cuda
