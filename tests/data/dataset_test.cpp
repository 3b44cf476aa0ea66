// SPDX-License-Identifier: Apache-2.0
// Dataset without prefetch: epoch order (seeded, per-epoch, resumable), batching with and without the
// remainder, sharding as an exact partition, maps (normalisation values, custom maps, their order), the
// two constructors and argument checks.
#include "tensorpool/data/dataset.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "data/support/data_test_support.hpp"

namespace tp::data {
namespace {

using testing::numbered_dataset;

// Every batch of `iterator`, in order.
std::vector<Batch> drain(BatchIterator iterator) {
  std::vector<Batch> batches;
  while (std::optional<Batch> batch = iterator.next()) batches.push_back(std::move(*batch));
  return batches;
}

// The labels of `batches` concatenated (numbered_dataset's label i is example i).
std::vector<std::int32_t> labels_of(const std::vector<Batch>& batches) {
  std::vector<std::int32_t> labels;
  for (const Batch& batch : batches) {
    const std::vector<std::int32_t> values = batch.labels.to_vector<std::int32_t>();
    labels.insert(labels.end(), values.begin(), values.end());
  }
  return labels;
}

std::vector<std::int32_t> as_int32(const std::vector<std::int64_t>& values) {
  return std::vector<std::int32_t>(values.begin(), values.end());
}

class DatasetTest : public ::testing::Test {
 protected:
  std::unique_ptr<device::Device> device_ = testing::make_cpu_device();
};

TEST_F(DatasetTest, UnshuffledOrderIsTheExampleOrder) {
  const Dataset dataset = numbered_dataset(7).stage_on(*device_);
  std::vector<std::int64_t> expected(7);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(dataset.epoch_order(0), expected);
  EXPECT_EQ(dataset.epoch_order(3), expected);
}

TEST_F(DatasetTest, ShuffleIsAPureFunctionOfSeedAndEpoch) {
  const Dataset dataset = numbered_dataset(1000).shuffle(42);
  const std::vector<std::int64_t> epoch0 = dataset.epoch_order(0);
  // Reproducible: the same (seed, epoch) gives the same order, from another Dataset object too.
  EXPECT_EQ(numbered_dataset(1000).shuffle(42).epoch_order(0), epoch0);
  // A permutation.
  std::vector<std::int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(epoch0, identity);
  // Different per epoch and per seed.
  EXPECT_NE(dataset.epoch_order(1), epoch0);
  EXPECT_NE(dataset.epoch_order(2), dataset.epoch_order(1));
  EXPECT_NE(numbered_dataset(1000).shuffle(43).epoch_order(0), epoch0);
  // Fixed across releases and platforms: pin the start of one permutation.
  EXPECT_EQ(numbered_dataset(10).shuffle(7).epoch_order(0), (std::vector<std::int64_t>{4, 5, 8, 3, 2, 7, 0, 6, 9, 1}));
}

TEST_F(DatasetTest, BatchesFollowTheEpochOrder) {
  const Dataset dataset = numbered_dataset(50).shuffle(5).batch(8).stage_on(*device_);
  for (const std::int64_t epoch : {0, 1}) {
    EXPECT_EQ(labels_of(drain(dataset.epoch(epoch))), as_int32(dataset.epoch_order(epoch)));
  }
}

TEST_F(DatasetTest, BatchSizesWithRemainder) {
  const Dataset dataset = numbered_dataset(10).batch(4).stage_on(*device_);
  EXPECT_EQ(dataset.batches_per_epoch(), 3);
  const std::vector<Batch> batches = drain(dataset.epoch(0));
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].size, 4);
  EXPECT_EQ(batches[2].size, 2);
  EXPECT_EQ(batches[2].index, 2);
  EXPECT_EQ(batches[2].features.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(batches[2].labels.shape(), (Shape{2}));
  EXPECT_EQ(batches[0].features.dtype(), DType::f32);
  EXPECT_EQ(batches[0].labels.dtype(), DType::i32);
  EXPECT_EQ(batches[2].labels.to_vector<std::int32_t>(), (std::vector<std::int32_t>{8, 9}));
}

TEST_F(DatasetTest, BatchSizesWithDropRemainder) {
  const Dataset dataset = numbered_dataset(10).batch(4, /*drop_remainder=*/true).stage_on(*device_);
  EXPECT_EQ(dataset.batches_per_epoch(), 2);
  const std::vector<Batch> batches = drain(dataset.epoch(0));
  ASSERT_EQ(batches.size(), 2u);
  for (const Batch& batch : batches) EXPECT_EQ(batch.size, 4);
  // Exact multiples lose nothing either way.
  EXPECT_EQ(numbered_dataset(12).batch(4, true).batches_per_epoch(), 3);
  EXPECT_EQ(numbered_dataset(12).batch(4, false).batches_per_epoch(), 3);
  // A batch larger than the dataset: one short batch, or none.
  EXPECT_EQ(numbered_dataset(3).batch(4).batches_per_epoch(), 1);
  EXPECT_EQ(numbered_dataset(3).batch(4, true).batches_per_epoch(), 0);
  EXPECT_FALSE(numbered_dataset(3).batch(4, true).stage_on(*device_).epoch(0).next().has_value());
}

TEST_F(DatasetTest, ResumingMidEpochYieldsTheRemainingBatches) {
  const Dataset dataset = numbered_dataset(37).shuffle(11).batch(5).stage_on(*device_);
  const std::vector<Batch> whole = drain(dataset.epoch(4));
  for (const std::int64_t start : {0, 1, 3, 7, 8}) {
    BatchIterator iterator = dataset.epoch(4, start);
    EXPECT_EQ(iterator.next_index(), start);
    const std::vector<Batch> rest = drain(std::move(iterator));
    ASSERT_EQ(static_cast<std::int64_t>(rest.size()), 8 - start);
    for (std::size_t i = 0; i < rest.size(); ++i) {
      const Batch& expected = whole[static_cast<std::size_t>(start) + i];
      EXPECT_EQ(rest[i].index, expected.index);
      EXPECT_EQ(rest[i].labels.to_vector<std::int32_t>(), expected.labels.to_vector<std::int32_t>());
      EXPECT_EQ(rest[i].features.to_vector<float>(), expected.features.to_vector<float>());
    }
  }
}

TEST_F(DatasetTest, ShardsPartitionTheExamplesExactly) {
  for (const std::int64_t n : {1, 2, 10, 37, 100}) {
    for (const std::int64_t shards : {1, 2, 3, 4, 7}) {
      for (const bool shuffled : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << ", shards " << shards << ", shuffled " << shuffled);
        Dataset base = numbered_dataset(n).batch(3).stage_on(*device_);
        if (shuffled) base = base.shuffle(99);
        std::vector<std::int32_t> seen;
        std::int64_t smallest_batches = std::numeric_limits<std::int64_t>::max();
        for (std::int64_t index = 0; index < shards; ++index) {
          const Dataset shard = base.shard(shards, index);
          const std::vector<Batch> batches = drain(shard.epoch(2));
          EXPECT_EQ(static_cast<std::int64_t>(batches.size()), shard.batches_per_epoch());
          const std::vector<std::int32_t> labels = labels_of(batches);
          EXPECT_EQ(static_cast<std::int64_t>(labels.size()), shard.shard_size());
          seen.insert(seen.end(), labels.begin(), labels.end());
          smallest_batches = std::min(smallest_batches, shard.batches_per_epoch());
          EXPECT_EQ(shard.common_batches_per_epoch(), base.shard(shards, 0).common_batches_per_epoch());
        }
        EXPECT_EQ(base.shard(shards, 0).common_batches_per_epoch(), smallest_batches);
        std::sort(seen.begin(), seen.end());
        std::vector<std::int32_t> all(static_cast<std::size_t>(n));
        std::iota(all.begin(), all.end(), 0);
        EXPECT_EQ(seen, all) << "every example in exactly one shard";
      }
    }
  }
}

TEST_F(DatasetTest, ShardsAreStridedOverTheEpochOrder) {
  const Dataset dataset = numbered_dataset(10).shuffle(3);
  const std::vector<std::int64_t> order = dataset.epoch_order(1);
  EXPECT_EQ(dataset.shard(3, 1).epoch_order(1), (std::vector<std::int64_t>{order[1], order[4], order[7]}));
  EXPECT_EQ(dataset.shard(3, 0).shard_size(), 4);
  EXPECT_EQ(dataset.shard(3, 2).shard_size(), 3);
  // More shards than examples: the extra shards are empty and end at once.
  const Dataset empty = numbered_dataset(2).shard(4, 3).stage_on(*device_);
  EXPECT_EQ(empty.shard_size(), 0);
  EXPECT_EQ(empty.batches_per_epoch(), 0);
  EXPECT_FALSE(empty.epoch(0).next().has_value());
}

TEST_F(DatasetTest, NormalizeDividesBy255) {
  const std::vector<std::uint8_t> pixels = {0, 1, 127, 128, 254, 255};
  const Dataset dataset = Dataset::from_arrays(IdxArray::of<std::uint8_t>({1, 6}, pixels),
                                               IdxArray::of<std::uint8_t>({1}, std::vector<std::uint8_t>{3}))
                              .normalize()
                              .stage_on(*device_);
  const std::vector<float> values = dataset.epoch(0).next()->features.to_vector<float>();
  ASSERT_EQ(values.size(), 6u);
  for (std::size_t i = 0; i < pixels.size(); ++i) EXPECT_EQ(values[i], static_cast<float>(pixels[i]) / 255.0f);
  EXPECT_EQ(values[0], 0.0f);
  EXPECT_EQ(values[5], 1.0f);
  for (const float value : values) {
    EXPECT_GE(value, 0.0f);
    EXPECT_LE(value, 1.0f);
  }
}

TEST_F(DatasetTest, WithoutMapsU8FeaturesKeepTheirValues) {
  const Dataset dataset = numbered_dataset(3).batch(3).stage_on(*device_);
  const std::vector<float> values = dataset.epoch(0).next()->features.to_vector<float>();
  EXPECT_EQ(values, (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
}

TEST_F(DatasetTest, MapsRunInCallOrder) {
  const ExampleMap add_one = ExampleMap::custom("add_one", [](std::span<float> features) {
    for (float& value : features) value += 1.0f;
  });
  const Dataset base = numbered_dataset(3).batch(3).stage_on(*device_);
  // (x + 1) / 2 and x / 2 + 1 over example values 0, 1, 2.
  EXPECT_EQ(base.map(add_one).map(ExampleMap::divide_by(2)).epoch(0).next()->features.to_vector<float>()[4], 1.0f);
  EXPECT_EQ(base.map(ExampleMap::divide_by(2)).map(add_one).epoch(0).next()->features.to_vector<float>()[4], 1.5f);
  EXPECT_EQ(
      base.map(ExampleMap::normalize()).map(ExampleMap::divide_by(2)).epoch(0).next()->features.to_vector<float>()[8],
      2.0f / 255.0f / 2.0f);
}

TEST_F(DatasetTest, FloatFeaturesAndTensors) {
  const std::vector<float> features = {0.5f, -1.0f, 2.0f, 255.0f};
  const std::vector<std::int32_t> labels = {7, 8};
  const Tensor feature_tensor = Tensor::from_vector<float>(features, Shape{2, 2}, *device_);
  const Tensor label_tensor = Tensor::from_vector<std::int32_t>(labels, Shape{2}, *device_);
  const Dataset dataset = Dataset::from_tensors(feature_tensor, label_tensor).normalize().batch(2).stage_on(*device_);
  EXPECT_EQ(dataset.example_dims(), (std::vector<std::int64_t>{2}));
  const Batch batch = *dataset.epoch(0).next();
  EXPECT_EQ(batch.features.to_vector<float>(),
            (std::vector<float>{0.5f / 255.0f, -1.0f / 255.0f, 2.0f / 255.0f, 1.0f}));
  EXPECT_EQ(batch.labels.to_vector<std::int32_t>(), labels);
  // Other numeric IDX types become float32 too.
  const Dataset doubles = Dataset::from_arrays(IdxArray::of<double>({2}, std::vector<double>{1.25, -3}),
                                               IdxArray::of<std::int16_t>({2}, std::vector<std::int16_t>{-1, 300}))
                              .batch(2)
                              .stage_on(*device_);
  const Batch scalars = *doubles.epoch(0).next();
  EXPECT_EQ(scalars.features.shape(), (Shape{2}));
  EXPECT_EQ(scalars.features.to_vector<float>(), (std::vector<float>{1.25f, -3.0f}));
  EXPECT_EQ(scalars.labels.to_vector<std::int32_t>(), (std::vector<std::int32_t>{-1, 300}));
}

TEST_F(DatasetTest, TargetsBatchAsFloatRowsInTheEpochOrder) {
  // Example i: features {i, i}, targets {i / 2, -i} (f64, stored as float32).
  std::vector<float> features;
  std::vector<double> targets;
  for (int i = 0; i < 5; ++i) {
    features.insert(features.end(), {static_cast<float>(i), static_cast<float>(i)});
    targets.insert(targets.end(), {i / 2.0, -static_cast<double>(i)});
  }
  const Dataset dataset =
      Dataset::with_targets(IdxArray::of<float>({5, 2}, features), IdxArray::of<double>({5, 2}, targets))
          .shuffle(3)
          .batch(2)
          .stage_on(*device_);
  const std::vector<std::int64_t> order = dataset.epoch_order(0);
  std::size_t position = 0;
  for (const Batch& batch : drain(dataset.epoch(0))) {
    EXPECT_EQ(batch.labels.dtype(), DType::f32);
    EXPECT_EQ(batch.labels.shape(), (Shape{batch.size, 2}));
    EXPECT_EQ(batch.labels.buffer()->tag().name, "batch/y");
    const std::vector<float> rows = batch.labels.to_vector<float>();
    for (std::int64_t k = 0; k < batch.size; ++k, ++position) {
      const auto example = static_cast<float>(order[position]);
      EXPECT_EQ(rows[static_cast<std::size_t>(2 * k)], example / 2.0f);
      EXPECT_EQ(rows[static_cast<std::size_t>(2 * k + 1)], -example);
      EXPECT_EQ(batch.features.to_vector<float>()[static_cast<std::size_t>(2 * k)], example);
    }
  }
  EXPECT_EQ(position, 5u);
  EXPECT_NE(testing::invalid_argument_message([] {
              (void)Dataset::with_targets(testing::pattern_u8({2}),
                                          IdxArray::of<std::int32_t>({2}, std::vector<std::int32_t>{0, 1}));
            }).find("targets must be floats"),
            std::string::npos);
  EXPECT_NE(testing::invalid_argument_message([] {
              (void)Dataset::with_targets(testing::pattern_u8({3}), IdxArray::of<float>({2}, std::vector<float>{0, 1}));
            }).find("but targets hold 2"),
            std::string::npos);
}

TEST_F(DatasetTest, BatchesAreTaggedStagingBuffersOnTheDevice) {
  const Dataset dataset = numbered_dataset(4).batch(2).stage_on(*device_);
  const Batch batch = *dataset.epoch(0).next();
  EXPECT_EQ(&batch.features.device(), device_.get());
  EXPECT_EQ(batch.features.buffer()->tag().name, "batch/x");
  EXPECT_EQ(batch.labels.buffer()->tag().name, "batch/y");
  EXPECT_EQ(batch.features.buffer()->tag().kind, memory::AllocationKind::staging);
  EXPECT_EQ(batch.features.buffer()->tag().shape, (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_GE(dataset.staging_stats().bytes_in_use, batch.features.nbytes() + batch.labels.nbytes());
  // The device's own stack lends nothing: the bytes come from the staging stack.
  EXPECT_EQ(device_->memory().stats().bytes_in_use, 0u);
}

TEST_F(DatasetTest, ArgumentsAreChecked) {
  const Dataset dataset = numbered_dataset(10).stage_on(*device_);
  EXPECT_NE(testing::invalid_argument_message([&] { (void)dataset.batch(0); }).find("batch size is 0"),
            std::string::npos);
  testing::invalid_argument_message([&] { (void)dataset.shard(0, 0); });
  EXPECT_NE(testing::invalid_argument_message([&] { (void)dataset.shard(2, 2); }).find("shard index 2 is outside 0..1"),
            std::string::npos);
  testing::invalid_argument_message([&] { (void)dataset.prefetch(-1); });
  testing::invalid_argument_message([&] { (void)dataset.epoch(-1); });
  EXPECT_NE(testing::invalid_argument_message([&] {
              (void)dataset.batch(4).epoch(0, 4);
            }).find("start batch 4 is outside 0..3"),
            std::string::npos);
  EXPECT_FALSE(dataset.batch(4).epoch(0, 3).next().has_value());  // the end: an empty iteration
  EXPECT_NE(testing::invalid_argument_message([] {
              (void)Dataset::from_arrays(testing::pattern_u8({3, 2}),
                                         IdxArray::of<std::uint8_t>({2}, std::vector<std::uint8_t>{0, 1}));
            }).find("features hold 3 examples [3,2] but labels hold 2"),
            std::string::npos);
  testing::invalid_argument_message([] {
    (void)Dataset::from_arrays(testing::pattern_u8({2}), IdxArray::of<float>({2}, std::vector<float>{0, 1}));
  });
  testing::invalid_argument_message([] { (void)ExampleMap::divide_by(0.0f); });
  testing::invalid_argument_message([] { (void)ExampleMap::custom("empty", {}); });
}

}  // namespace
}  // namespace tp::data
