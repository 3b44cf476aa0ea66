// SPDX-License-Identifier: Apache-2.0
// Reductions, elementwise arithmetic with its broadcasts, casts, initialisers and optimizer updates through
// the op layer, on both backends.
#include <gtest/gtest.h>

#include "backend/cpu/kernel_test_support.hpp"
#include "ops/ops_test_support.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/elementwise.hpp"
#include "tensorpool/ops/init.hpp"
#include "tensorpool/ops/optimizer.hpp"
#include "tensorpool/ops/reduce.hpp"

namespace tp::ops {
namespace {

using testing::Backend;
using testing::make_device;
using testing::random_values;

class MiscOps : public ::testing::TestWithParam<Backend> {};

TEST_P(MiscOps, ReducesAlongEachAxis) {
  auto device = make_device(GetParam());
  const auto values = random_values(2 * 3 * 4, 11);
  Tensor x = Tensor::from_vector<float>(values, Shape{2, 3, 4}, *device);
  for (std::int64_t axis : {0, 1, 2, -1}) {
    SCOPED_TRACE(::testing::Message() << "axis " << axis);
    const std::int64_t normal_axis = axis < 0 ? axis + 3 : axis;
    const std::vector<std::int64_t> dims = {2, 3, 4};
    std::vector<std::int64_t> kept;
    for (std::int64_t dim = 0; dim < 3; ++dim)
      if (dim != normal_axis) kept.push_back(dims[dim]);
    std::vector<double> sum_ref(kept[0] * kept[1], 0.0), max_ref(kept[0] * kept[1], -1e300);
    std::vector<double> argmax_ref(kept[0] * kept[1], 0);
    for (std::int64_t i = 0; i < 2; ++i) {
      for (std::int64_t j = 0; j < 3; ++j) {
        for (std::int64_t l = 0; l < 4; ++l) {
          const std::int64_t index[3] = {i, j, l};
          std::int64_t out_index = 0;
          for (std::int64_t dim = 0, kept_dim = 0; dim < 3; ++dim) {
            if (dim == normal_axis) continue;
            out_index = out_index * kept[kept_dim++] + index[dim];
          }
          const double value = values[(i * 3 + j) * 4 + l];
          sum_ref[out_index] += value;
          if (value > max_ref[out_index]) {
            max_ref[out_index] = value;
            argmax_ref[out_index] = static_cast<double>(index[normal_axis]);
          }
        }
      }
    }
    std::vector<double> mean_ref = sum_ref;
    for (double& mean : mean_ref) mean /= static_cast<double>(dims[normal_axis]);
    Tensor sum = reduce_sum(x, axis);
    EXPECT_EQ(sum.shape(), Shape(kept));
    testing::expect_near_all(sum.to_vector<float>(), sum_ref, 1e-6);
    testing::expect_near_all(reduce_mean(x, axis).to_vector<float>(), mean_ref, 1e-6);
    testing::expect_near_all(reduce_max(x, axis).to_vector<float>(), max_ref, 0);
    const auto indexes = argmax(x, axis).to_vector<std::int64_t>();
    for (std::size_t index = 0; index < indexes.size(); ++index) EXPECT_EQ(indexes[index], argmax_ref[index]);
  }
  EXPECT_THROW(reduce_sum(x, 3), InvalidArgument);
  EXPECT_THROW(reduce_sum(x, -4), InvalidArgument);
}

TEST_P(MiscOps, BinaryOpsBroadcastRowsAndScalarsAndRejectTheRest) {
  auto device = make_device(GetParam());
  Tensor x = Tensor::from_vector<float>(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, *device);
  Tensor same = Tensor::from_vector<float>(std::vector<float>{6, 5, 4, 3, 2, 1}, Shape{2, 3}, *device);
  Tensor row = Tensor::from_vector<float>(std::vector<float>{10, 20, 30}, Shape{3}, *device);
  Tensor scalar = Tensor::from_vector<float>(std::vector<float>{2}, Shape{}, *device);
  EXPECT_EQ(add(x, same).to_vector<float>(), (std::vector<float>{7, 7, 7, 7, 7, 7}));
  EXPECT_EQ(sub(x, row).to_vector<float>(), (std::vector<float>{-9, -18, -27, -6, -15, -24}));
  EXPECT_EQ(mul(x, scalar).to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(div(x, scalar).to_vector<float>(), (std::vector<float>{0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_EQ(scale(x, -1).to_vector<float>(), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  add_scaled(x, 0.5, same);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{4, 4.5, 5, 5.5, 6, 6.5}));
  try {
    (void)add(x, Tensor::empty(Shape{2}, DType::f32, *device));
    FAIL() << "[2,3] + [2] broadcast";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("[2,3]"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("[2]"), std::string::npos) << error.what();
  }
}

TEST_P(MiscOps, CastsRoundTripThroughHalfPrecision) {
  auto device = make_device(GetParam());
  const std::vector<float> values = {1.0F, -2.5F, 65504.0F, 1e-8F, 3.14159F};
  Tensor x = Tensor::from_vector<float>(values, Shape{5}, *device);
  Tensor half = cast(x, DType::f16);
  EXPECT_EQ(half.dtype(), DType::f16);
  EXPECT_EQ(half.nbytes(), 10u);
  const auto back = cast(half, DType::f32).to_vector<float>();
  EXPECT_EQ(back[0], 1.0F);
  EXPECT_EQ(back[1], -2.5F);
  EXPECT_EQ(back[2], 65504.0F);
  EXPECT_NEAR(back[4], 3.14159F, 2e-3F);
  const auto integers = cast(x, DType::i32).to_vector<std::int32_t>();
  EXPECT_EQ(integers, (std::vector<std::int32_t>{1, -2, 65504, 0, 3}));
}

TEST_P(MiscOps, InitialisersAreDeterministicAndInRange) {
  auto device = make_device(GetParam());
  Tensor first = Tensor::empty(Shape{784, 512}, DType::f32, *device);
  Tensor second = Tensor::empty(Shape{784, 512}, DType::f32, *device);
  glorot_uniform(first, 42);
  glorot_uniform(second, 42);
  const auto values = first.to_vector<float>();
  EXPECT_EQ(values, second.to_vector<float>());
  const double limit = std::sqrt(6.0 / (784 + 512));
  double sum = 0;
  for (float value : values) {
    ASSERT_LE(std::abs(value), limit);
    sum += value;
  }
  EXPECT_LT(std::abs(sum / static_cast<double>(values.size())), limit / 100);
  fill(first, 0.25);
  EXPECT_EQ(first.to_vector<float>()[1000], 0.25F);
  EXPECT_THROW(glorot_uniform(Tensor::empty(Shape{3}, DType::f32, *device), 1), InvalidArgument);
  EXPECT_THROW(uniform(first, 1, 0, 7), InvalidArgument);
}

TEST_P(MiscOps, AdamAndSgdFollowTheKerasFormulas) {
  auto device = make_device(GetParam());
  const std::vector<float> param_values = {0.5F, -0.25F, 1.0F};
  const std::vector<float> grad_values = {0.1F, -0.2F, 0.3F};
  Tensor param = Tensor::from_vector<float>(param_values, Shape{3}, *device);
  Tensor grad = Tensor::from_vector<float>(grad_values, Shape{3}, *device);
  Tensor m = Tensor::empty(Shape{3}, DType::f32, *device);
  Tensor v = Tensor::empty(Shape{3}, DType::f32, *device);
  fill(m, 0);
  fill(v, 0);
  const AdamOptions options;
  std::vector<double> p(param_values.begin(), param_values.end()), m_ref(3, 0), v_ref(3, 0);
  for (std::int64_t step = 1; step <= 3; ++step) {
    adam_update(param, grad, m, v, step, options);
    const double alpha =
        options.learning_rate * std::sqrt(1 - std::pow(options.beta2, step)) / (1 - std::pow(options.beta1, step));
    for (std::size_t i = 0; i < 3; ++i) {
      m_ref[i] += (grad_values[i] - m_ref[i]) * (1 - options.beta1);
      v_ref[i] += (double{grad_values[i]} * grad_values[i] - v_ref[i]) * (1 - options.beta2);
      p[i] -= m_ref[i] * alpha / (std::sqrt(v_ref[i]) + options.epsilon);
    }
  }
  testing::expect_near_all(param.to_vector<float>(), p, 1e-6);
  EXPECT_THROW(adam_update(param, grad, m, v, 0, options), InvalidArgument);

  Tensor velocity = Tensor::empty(Shape{3}, DType::f32, *device);
  fill(velocity, 0);
  Tensor sgd_param = Tensor::from_vector<float>(param_values, Shape{3}, *device);
  sgd_update(sgd_param, grad, velocity, {.learning_rate = 0.1, .momentum = 0.9});
  sgd_update(sgd_param, grad, velocity, {.learning_rate = 0.1, .momentum = 0.9});
  std::vector<double> expected(3);
  for (std::size_t i = 0; i < 3; ++i) {
    const double first_velocity = -0.1 * grad_values[i];
    const double second_velocity = 0.9 * first_velocity - 0.1 * grad_values[i];
    expected[i] = param_values[i] + first_velocity + second_velocity;
  }
  testing::expect_near_all(sgd_param.to_vector<float>(), expected, 1e-6);
  EXPECT_THROW(sgd_update(sgd_param, grad, Tensor(), {.learning_rate = 0.1, .momentum = 0.9}), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, MiscOps, ::testing::ValuesIn(device::testing::present_backends()),
                         testing::backend_name);

// A reduction reading a peer device's buffer in place (the in-process ring's reduce-scatter): the sum is
// right, the caller orders the streams (here: the source is ready, and y's stream is synchronised before the
// source is touched again), and a device without peer access (the cpu) is refused naming both devices.
TEST(AddScaledFromPeer, AddsAPeersBufferInPlaceAndRefusesNonPeers) {
  auto first = testing::make_device(testing::Backend::sim, 64 * kMiB, {}, 0);
  auto second = testing::make_device(testing::Backend::sim, 64 * kMiB, {}, 1);
  auto cpu = testing::make_device(testing::Backend::cpu);
  const Tensor y = Tensor::from_vector<float>(std::vector<float>{1, 2, 3}, Shape{3}, *first);
  const Tensor x = Tensor::from_vector<float>(std::vector<float>{10, 20, 30}, Shape{3}, *second);
  first->stream().wait(second->stream().record());
  add_scaled_from_peer(y, 2.0, x);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{21, 42, 63}));
  const Tensor on_cpu = Tensor::from_vector<float>(std::vector<float>{1, 1, 1}, Shape{3}, *cpu);
  tp_test::expect_invalid([&] { add_scaled_from_peer(y, 1.0, on_cpu); }, {"AddScaled", "cpu:0", "sim:0"});
  tp_test::expect_invalid([&] { add_scaled_from_peer(y, 1.0, y); }, {"AddScaled", "sim:0"});
}

}  // namespace
}  // namespace tp::ops
