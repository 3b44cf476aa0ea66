// SPDX-License-Identifier: Apache-2.0
// The tensor ops over the new kernels (broadcast_axis, scale_rows, correct_count) on both backends: results,
// shapes and the validation that names the op and the shapes.
#include <gtest/gtest.h>

#include "ops/ops_test_support.hpp"
#include "tensorpool/ops/broadcast.hpp"
#include "tensorpool/ops/metrics.hpp"

namespace tp::ops {
namespace {

using testing::Backend;
using testing::make_device;

class BroadcastMetricsOps : public ::testing::TestWithParam<Backend> {};

TEST_P(BroadcastMetricsOps, BroadcastAxisInsertsTheAxisAnywhere) {
  auto device = make_device(GetParam());
  const Tensor x = Tensor::from_vector<float>(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, *device);
  const Tensor front = broadcast_axis(x, 0, 2);
  EXPECT_EQ(front.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(front.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
  const Tensor middle = broadcast_axis(x, 1, 2, BroadcastMode::mean);
  EXPECT_EQ(middle.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(middle.to_vector<float>(), (std::vector<float>{0.5, 1, 1.5, 0.5, 1, 1.5, 2, 2.5, 3, 2, 2.5, 3}));
  const Tensor last = broadcast_axis(x, -1, 2);
  EXPECT_EQ(last.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(last.to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6}));
  const Tensor scalar = Tensor::from_vector<double>(std::vector<double>{3}, Shape{}, *device);
  EXPECT_EQ(broadcast_axis(scalar, 0, 4, BroadcastMode::mean).to_vector<double>(), std::vector<double>(4, 0.75));
  EXPECT_EQ(broadcast_axis(scalar, 0, 0).shape(), (Shape{0}));
  EXPECT_THROW(broadcast_axis(x, 3, 2), InvalidArgument);
  EXPECT_THROW(broadcast_axis(x, 0, -1), InvalidArgument);
  try {
    broadcast_axis_into(x, 1, Tensor::empty(Shape{2, 2, 4}, DType::f32, *device));
    FAIL() << "[2,3] into [2,2,4]";
  } catch (const InvalidArgument& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("BroadcastAxis"), std::string::npos) << text;
    EXPECT_NE(text.find("[2,3]"), std::string::npos) << text;
    EXPECT_NE(text.find("[2,2,4]"), std::string::npos) << text;
  }
}

TEST_P(BroadcastMetricsOps, ScaleRowsScalesEachRow) {
  auto device = make_device(GetParam());
  const Tensor x = Tensor::from_vector<double>(std::vector<double>{1, 2, 3, 4, 5, 6}, Shape{3, 2}, *device);
  const Tensor s = Tensor::from_vector<double>(std::vector<double>{2, -1, 0.5}, Shape{3}, *device);
  EXPECT_EQ(scale_rows(x, s).to_vector<double>(), (std::vector<double>{2, 4, -3, -4, 2.5, 3}));
  scale_rows_into(x, s, x);  // in place
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{2, 4, -3, -4, 2.5, 3}));
  EXPECT_THROW(scale_rows(x, Tensor::empty(Shape{2}, DType::f64, *device)), InvalidArgument);
  EXPECT_THROW(scale_rows(x, Tensor::empty(Shape{3}, DType::f32, *device)), InvalidArgument);
}

TEST_P(BroadcastMetricsOps, CorrectCountCountsMatchingArgmaxRows) {
  auto device = make_device(GetParam());
  const Tensor predictions =
      Tensor::from_vector<float>(std::vector<float>{0.1F, 0.9F, 0.8F, 0.2F, 0.5F, 0.5F}, Shape{3, 2}, *device);
  const Tensor labels = Tensor::from_vector<std::int32_t>(std::vector<std::int32_t>{1, 1, 0}, Shape{3}, *device);
  const Tensor count = correct_count(predictions, labels);
  EXPECT_EQ(count.dtype(), DType::f32);
  EXPECT_EQ(count.shape(), Shape{});
  EXPECT_EQ(count.to_vector<float>(), std::vector<float>{2});
  EXPECT_THROW(correct_count(predictions, Tensor::empty(Shape{3}, DType::f32, *device)), InvalidArgument);
  EXPECT_THROW(correct_count(predictions, Tensor::empty(Shape{2}, DType::i64, *device)), InvalidArgument);
  EXPECT_THROW(correct_count_into(predictions, labels, Tensor::empty(Shape{}, DType::f64, *device)), InvalidArgument);
  // A label out of range is a task error, reported at the next synchronization.
  const Tensor bad = Tensor::from_vector<std::int64_t>(std::vector<std::int64_t>{0, 7, 0}, Shape{3}, *device);
  EXPECT_THROW(
      {
        (void)correct_count(predictions, bad).to_vector<float>();
        device->synchronize();
      },
      InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, BroadcastMetricsOps, ::testing::ValuesIn(device::testing::present_backends()),
                         testing::backend_name);

}  // namespace
}  // namespace tp::ops
