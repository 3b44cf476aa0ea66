// SPDX-License-Identifier: Apache-2.0
// StreamTask (a stream's move-only task, small callables inline) and RingQueue (the worker stream's queue).
#include "tensorpool/device/stream_task.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "device/ring_queue.hpp"
#include "tensorpool/core/tensor.hpp"

namespace tp::device {
namespace {

// Counts live copies of itself, so a test sees every capture destroyed exactly once.
struct Counted {
  explicit Counted(int* counter) : live(counter) { ++*live; }
  Counted(const Counted& other) : live(other.live) { ++*live; }
  Counted(Counted&& other) noexcept : live(other.live) { ++*live; }
  Counted& operator=(const Counted&) = delete;
  Counted& operator=(Counted&&) = delete;
  ~Counted() { --*live; }
  int* live;
};

TEST(StreamTask, RunsSmallAndLargeCallablesAndDestroysTheirCapturesOnce) {
  int live = 0;
  int runs = 0;
  {
    StreamTask small([counted = Counted(&live), &runs] { ++runs; });
    std::array<char, StreamTask::kInlineBytes + 1> big{};
    StreamTask large([counted = Counted(&live), big, &runs] { runs += 1 + big[0]; });
    EXPECT_EQ(live, 2);
    small();
    large();
    EXPECT_EQ(runs, 2);
    StreamTask moved_small = std::move(small);
    StreamTask moved_large = std::move(large);
    EXPECT_FALSE(small);  // NOLINT(bugprone-use-after-move): a moved-from task is empty
    EXPECT_FALSE(large);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(live, 2);
    moved_small();
    moved_large();
    EXPECT_EQ(runs, 4);
    moved_small = nullptr;
    EXPECT_EQ(live, 1);
    moved_large = std::move(moved_small);  // an empty task assigned over a full one destroys its captures
    EXPECT_EQ(live, 0);
    EXPECT_FALSE(moved_large);
  }
  EXPECT_EQ(live, 0);
}

// A task's captures are the tensors it reads and writes; they must fit inline so that launching a kernel
// allocates no task storage (the point of StreamTask).
TEST(StreamTask, AKernelsTensorCapturesFitInline) {
  const Tensor a;
  const Tensor b;
  const Tensor out;
  const auto kernel = [a, b, out, m = std::int64_t{1}, n = std::int64_t{2}, k = std::int64_t{3}] {
    (void)a, (void)b, (void)out, (void)m, (void)n, (void)k;
  };
  EXPECT_LE(sizeof(kernel), StreamTask::kInlineBytes);
  EXPECT_LE(4 * sizeof(Tensor), StreamTask::kInlineBytes);
}

TEST(StreamTask, ACancelFlagTurnsTheTaskIntoANoOpWhileSetAndTravelsWithIt) {
  std::atomic<bool> cancel{false};
  int runs = 0;
  StreamTask task([&runs] { ++runs; });
  task.cancel_when(&cancel);
  task();
  EXPECT_EQ(runs, 1);
  cancel = true;
  StreamTask moved = std::move(task);
  moved();
  EXPECT_EQ(runs, 1);
  cancel = false;
  moved();
  EXPECT_EQ(runs, 2);
}

TEST(StreamTask, AnExceptionFromTheCallablePropagatesAndKeepsTheTask) {
  int live = 0;
  StreamTask task([counted = Counted(&live)] { throw std::runtime_error("kernel failed"); });
  EXPECT_THROW(task(), std::runtime_error);
  EXPECT_TRUE(task);
  EXPECT_EQ(live, 1);
  task = nullptr;
  EXPECT_EQ(live, 0);
}

TEST(RingQueue, KeepsFifoOrderAcrossWrapAroundAndGrowth) {
  detail::RingQueue<std::unique_ptr<int>> queue;
  EXPECT_TRUE(queue.empty());
  int next_in = 0;
  int next_out = 0;
  // Interleaved pushes and pops wrap the ring; bursts of 40 grow it past its first capacity mid-wrap.
  for (int round = 0; round < 50; ++round) {
    const int pushes = round % 5 == 0 ? 40 : 3;
    for (int push = 0; push < pushes; ++push) queue.push_back(std::make_unique<int>(next_in++));
    const int pops = round % 5 == 0 ? 20 : 4;
    for (int pop = 0; pop < pops && !queue.empty(); ++pop) {
      std::unique_ptr<int> value = std::move(queue.front());
      queue.pop_front();
      ASSERT_NE(value, nullptr);
      EXPECT_EQ(*value, next_out++);
    }
    EXPECT_EQ(queue.size(), static_cast<std::size_t>(next_in - next_out));
  }
  while (!queue.empty()) {
    EXPECT_EQ(*queue.front(), next_out++);
    queue.pop_front();
  }
  EXPECT_EQ(next_out, next_in);
}

}  // namespace
}  // namespace tp::device
