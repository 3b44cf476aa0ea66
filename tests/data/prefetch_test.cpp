// SPDX-License-Identifier: Apache-2.0
// Prefetching: the same batches as without it; early destruction (full queue, mid-batch, never read) stops
// the thread and frees every batch; a producer's exception reaches next() in sequence; batches outlive their
// iterator. And the staging stack's fallback to pageable memory when pinning is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "data/batch_staging.hpp"
#include "data/support/data_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/memory/host_resource.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/pinned_host_resource.hpp"

namespace tp::data {
namespace {

using testing::numbered_dataset;

// Waits (up to 10 s) until `condition` holds.
template <typename Condition>
bool eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

class PrefetchTest : public ::testing::Test {
 protected:
  std::unique_ptr<device::Device> device_ = testing::make_cpu_device();
};

TEST_F(PrefetchTest, YieldsTheSameBatchesAsWithout) {
  const Dataset base = numbered_dataset(103, 3).shuffle(17).normalize().batch(8).stage_on(*device_);
  for (const std::int64_t depth : {1, 2, 5, 64}) {
    for (const std::int64_t start : {0, 4}) {
      SCOPED_TRACE(::testing::Message() << "depth " << depth << ", start " << start);
      BatchIterator plain = base.epoch(3, start);
      BatchIterator prefetched = base.prefetch(depth).epoch(3, start);
      for (;;) {
        std::optional<Batch> expected = plain.next();
        std::optional<Batch> got = prefetched.next();
        ASSERT_EQ(got.has_value(), expected.has_value());
        if (!expected) break;
        EXPECT_EQ(got->index, expected->index);
        EXPECT_EQ(got->size, expected->size);
        EXPECT_EQ(got->features.shape(), expected->features.shape());
        EXPECT_EQ(got->features.to_vector<float>(), expected->features.to_vector<float>());
        EXPECT_EQ(got->labels.to_vector<std::int32_t>(), expected->labels.to_vector<std::int32_t>());
      }
      EXPECT_FALSE(prefetched.next().has_value());  // stays finished
    }
  }
}

TEST_F(PrefetchTest, QueueHoldsAtMostTheDepth) {
  BatchIterator iterator = numbered_dataset(100).batch(2).prefetch(3).stage_on(*device_).epoch(0);
  ASSERT_TRUE(eventually([&] { return iterator.ready() == 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(iterator.ready(), 3u);
  EXPECT_EQ(device_->live_buffers(), 6u);  // 3 batches x (features, labels)
}

TEST_F(PrefetchTest, EarlyDestructionWithAFullQueueStopsAndFrees) {
  const Dataset dataset = numbered_dataset(1000).batch(4).prefetch(8).stage_on(*device_);
  {
    BatchIterator iterator = dataset.epoch(0);
    std::optional<Batch> first = iterator.next();
    ASSERT_TRUE(first.has_value());
    ASSERT_TRUE(eventually([&] { return iterator.ready() == 8; }));
    // Destroyed here with the producer blocked on a full queue, while the consumer still holds `first`.
  }
  EXPECT_EQ(device_->live_buffers(), 0u);
  EXPECT_EQ(dataset.staging_stats().bytes_in_use, 0u);
}

TEST_F(PrefetchTest, DestructionBeforeAnyReadAndMidBatch) {
  // A slow map keeps the producer inside assemble() when the iterator goes away.
  std::atomic<int> examples_mapped{0};
  const Dataset dataset = numbered_dataset(200)
                              .map(ExampleMap::custom("slow",
                                                      [&](std::span<float>) {
                                                        examples_mapped.fetch_add(1);
                                                        std::this_thread::sleep_for(std::chrono::microseconds(200));
                                                      }))
                              .batch(50)
                              .prefetch(2)
                              .stage_on(*device_);
  for (int round = 0; round < 5; ++round) {
    BatchIterator iterator = dataset.epoch(round);
    ASSERT_TRUE(eventually([&] { return examples_mapped.load() > 0; }));
    examples_mapped.store(0);
  }
  { BatchIterator never_started = dataset.prefetch(4).epoch(0); }
  EXPECT_EQ(device_->live_buffers(), 0u);
}

TEST_F(PrefetchTest, BatchesOutliveTheirIterator) {
  std::vector<Batch> kept;
  {
    BatchIterator iterator = numbered_dataset(10).batch(3).prefetch(2).stage_on(*device_).epoch(0);
    while (std::optional<Batch> batch = iterator.next()) kept.push_back(std::move(*batch));
  }
  ASSERT_EQ(kept.size(), 4u);
  EXPECT_EQ(kept[3].labels.to_vector<std::int32_t>(), (std::vector<std::int32_t>{9}));
  EXPECT_EQ(device_->live_buffers(), 8u);
  kept.clear();
  EXPECT_EQ(device_->live_buffers(), 0u);
}

TEST_F(PrefetchTest, ProducerExceptionReachesNextInSequence) {
  // Example 13 (in batch 2 of the unshuffled order) fails: batches 0 and 1 arrive, then next() throws, and
  // keeps throwing.
  const ExampleMap failing = ExampleMap::custom("fail_at_13", [](std::span<float> features) {
    if (features[0] == 13.0f) throw std::runtime_error("example 13 is unreadable");
  });
  for (const std::int64_t depth : {0, 1, 4}) {
    SCOPED_TRACE(::testing::Message() << "depth " << depth);
    BatchIterator iterator = numbered_dataset(30).map(failing).batch(5).prefetch(depth).stage_on(*device_).epoch(0);
    for (std::int64_t index = 0; index < 2; ++index) {
      std::optional<Batch> batch = iterator.next();
      ASSERT_TRUE(batch.has_value());
      EXPECT_EQ(batch->index, index);
    }
    EXPECT_THROW(
        {
          try {
            iterator.next();
          } catch (const std::runtime_error& error) {
            EXPECT_STREQ(error.what(), "example 13 is unreadable");
            throw;
          }
        },
        std::runtime_error);
    EXPECT_THROW(iterator.next(), std::runtime_error);
  }
  EXPECT_EQ(device_->live_buffers(), 0u);
}

TEST_F(PrefetchTest, ConcurrentIteratorsOfOneDataset) {
  const Dataset dataset = numbered_dataset(64).shuffle(1).batch(4).prefetch(2).stage_on(*device_);
  std::vector<std::int32_t> first, second;
  std::thread other([&] {
    BatchIterator iterator = dataset.epoch(5);
    while (auto batch = iterator.next()) {
      const auto labels = batch->labels.to_vector<std::int32_t>();
      second.insert(second.end(), labels.begin(), labels.end());
    }
  });
  BatchIterator iterator = dataset.epoch(5);
  while (auto batch = iterator.next()) {
    const auto labels = batch->labels.to_vector<std::int32_t>();
    first.insert(first.end(), labels.begin(), labels.end());
  }
  other.join();
  EXPECT_EQ(first, second);
  EXPECT_EQ(first.size(), 64u);
}

TEST_F(PrefetchTest, StagingIsPinnedWhenTheOsAllows) {
  const Dataset dataset = numbered_dataset(8).batch(4).stage_on(*device_);
  const Batch batch = *dataset.epoch(0).next();
  // Root (or a generous RLIMIT_MEMLOCK) locks the first 2 MiB region; otherwise the fallback says so.
  if (!dataset.pinned_staging()) GTEST_SKIP() << "this process may not lock pages; fallback covered below";
  EXPECT_GT(dataset.staging_stats().bytes_reserved, 0u);
}

// A pinned source that refuses the way PinnedHostResource does when mlock fails.
class RefusingResource final : public memory::MemoryResource {
 public:
  explicit RefusingResource(bool as_out_of_memory) : MemoryResource("refusing"), as_out_of_memory_(as_out_of_memory) {}
  std::size_t max_alignment() const noexcept override { return 4096; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t, const memory::AllocationTag&) override {
    if (as_out_of_memory_) throw std::bad_alloc();
    TP_THROW(DeviceError, "memory", "refusing: mlock of ", bytes, " bytes failed: Cannot allocate memory");
  }
  void do_deallocate(void*, std::size_t) noexcept override {}
  memory::MemoryStats do_stats() const override { return {}; }

  bool as_out_of_memory_;
};

TEST_F(PrefetchTest, RefusedPinningFallsBackToPageableWithOneLine) {
  for (const bool as_out_of_memory : {false, true}) {
    SCOPED_TRACE(as_out_of_memory ? "bad_alloc" : "DeviceError");
    detail::BatchStaging staging("test/staging", [&] { return std::make_unique<RefusingResource>(as_out_of_memory); });
    EXPECT_TRUE(staging.pinned());
    ::testing::internal::CaptureStderr();
    std::shared_ptr<Buffer> first = staging.allocate(*device_, 1000, {.name = "batch/x"});
    std::shared_ptr<Buffer> second = staging.allocate(*device_, 3000, {.name = "batch/x"});
    const std::string printed = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(staging.pinned());
    EXPECT_EQ(std::count(printed.begin(), printed.end(), '\n'), 1) << printed;
    EXPECT_NE(printed.find("test/staging: pinned staging memory refused"), std::string::npos) << printed;
    EXPECT_NE(printed.find("pageable"), std::string::npos) << printed;
    std::memset(first->data(), 0xAB, 1000);  // usable memory
    std::memset(second->data(), 0xCD, 3000);
    EXPECT_EQ(staging.stats().bytes_requested, 4000u);
  }
  EXPECT_EQ(device_->live_buffers(), 0u);
}

}  // namespace
}  // namespace tp::data
