// SPDX-License-Identifier: Apache-2.0
// Tensor ops of the MLP path on both backends: results against float64 references computed here, and the
// validation errors that name the op and both shapes.
#include <gtest/gtest.h>

#include "ops/ops_test_support.hpp"
#include "tensorpool/ops/linalg.hpp"
#include "tensorpool/ops/nn.hpp"

namespace tp::ops {
namespace {

using testing::Backend;
using testing::make_device;
using testing::random_values;

class MlpOps : public ::testing::TestWithParam<Backend> {};

TEST_P(MlpOps, MatmulMatchesAFloat64ReferenceForEveryTransposeCombination) {
  auto device = make_device(GetParam());
  constexpr std::int64_t m = 7, k = 13, n = 5;
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "transpose_a " << transpose_a << " transpose_b " << transpose_b);
      const auto a_values = random_values(m * k, 1);
      const auto b_values = random_values(k * n, 2);
      const Shape a_shape = transpose_a ? Shape{k, m} : Shape{m, k};
      const Shape b_shape = transpose_b ? Shape{n, k} : Shape{k, n};
      Tensor a = Tensor::from_vector<float>(a_values, a_shape, *device);
      Tensor b = Tensor::from_vector<float>(b_values, b_shape, *device);
      Tensor c = matmul(a, b, {.transpose_a = transpose_a, .transpose_b = transpose_b});
      ASSERT_EQ(c.shape(), (Shape{m, n}));
      std::vector<double> expected(m * n, 0.0);
      for (std::int64_t r = 0; r < m; ++r) {
        for (std::int64_t col = 0; col < n; ++col) {
          for (std::int64_t inner = 0; inner < k; ++inner) {
            expected[r * n + col] += testing::at(a_values, m, k, r, inner, transpose_a) *
                                     testing::at(b_values, k, n, inner, col, transpose_b);
          }
        }
      }
      testing::expect_near_all(c.to_vector<float>(), expected, 1e-5);
    }
  }
}

TEST_P(MlpOps, MismatchedShapesNameBothShapes) {
  auto device = make_device(GetParam());
  Tensor a = Tensor::empty(Shape{32, 784}, DType::f32, *device);
  Tensor b = Tensor::empty(Shape{512, 10}, DType::f32, *device);
  try {
    (void)matmul(a, b);
    FAIL() << "matmul of non-chaining shapes succeeded";
  } catch (const InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("[32,784]"), std::string::npos) << what;
    EXPECT_NE(what.find("[512,10]"), std::string::npos) << what;
    EXPECT_NE(what.find("MatMul"), std::string::npos) << what;
  }
  Tensor doubles = Tensor::empty(Shape{784, 10}, DType::f64, *device);
  EXPECT_THROW(matmul(a, doubles), InvalidArgument);
  Tensor wrong_out = Tensor::empty(Shape{32, 11}, DType::f32, *device);
  EXPECT_THROW(matmul_into(a, Tensor::empty(Shape{784, 10}, DType::f32, *device), wrong_out), InvalidArgument);
  EXPECT_THROW(bias_add(a, Tensor::empty(Shape{783}, DType::f32, *device)), InvalidArgument);
  EXPECT_THROW(relu(Tensor::empty(Shape{3}, DType::i32, *device)), InvalidArgument);
  auto other = make_device(Backend::sim, 64 * kMiB, {}, 1);
  EXPECT_THROW(matmul(a, Tensor::empty(Shape{784, 10}, DType::f32, *other)), InvalidArgument);
}

TEST_P(MlpOps, DenseReluLayerForwardAndBackwardMatchTheReference) {
  auto device = make_device(GetParam());
  constexpr std::int64_t batch = 9, in = 11, out = 6;
  const auto x_values = random_values(batch * in, 3);
  const auto w_values = random_values(in * out, 4);
  const auto b_values = random_values(out, 5);
  const auto dy_values = random_values(batch * out, 6);
  Tensor x = Tensor::from_vector<float>(x_values, Shape{batch, in}, *device);
  Tensor w = Tensor::from_vector<float>(w_values, Shape{in, out}, *device);
  Tensor b = Tensor::from_vector<float>(b_values, Shape{out}, *device);
  Tensor dy = Tensor::from_vector<float>(dy_values, Shape{batch, out}, *device);
  Tensor pre = bias_add(matmul(x, w), b);
  Tensor y = relu(pre);
  Tensor dpre = relu_grad(dy, pre);
  Tensor dw = matmul(x, dpre, {.transpose_a = true});
  Tensor db = bias_add_grad(dpre);
  Tensor dx = matmul(dpre, w, {.transpose_b = true});

  std::vector<double> pre_ref(batch * out), y_ref(batch * out), dpre_ref(batch * out);
  std::vector<double> dw_ref(in * out, 0.0), db_ref(out, 0.0), dx_ref(batch * in, 0.0);
  for (std::int64_t r = 0; r < batch; ++r) {
    for (std::int64_t c = 0; c < out; ++c) {
      double sum = b_values[c];
      for (std::int64_t i = 0; i < in; ++i) sum += double{x_values[r * in + i]} * w_values[i * out + c];
      pre_ref[r * out + c] = sum;
      y_ref[r * out + c] = sum > 0 ? sum : 0;
      dpre_ref[r * out + c] = sum > 0 ? dy_values[r * out + c] : 0;
    }
  }
  for (std::int64_t r = 0; r < batch; ++r) {
    for (std::int64_t c = 0; c < out; ++c) {
      db_ref[c] += dpre_ref[r * out + c];
      for (std::int64_t i = 0; i < in; ++i) {
        dw_ref[i * out + c] += x_values[r * in + i] * dpre_ref[r * out + c];
        dx_ref[r * in + i] += dpre_ref[r * out + c] * w_values[i * out + c];
      }
    }
  }
  testing::expect_near_all(y.to_vector<float>(), y_ref, 1e-5);
  testing::expect_near_all(dw.to_vector<float>(), dw_ref, 1e-5);
  testing::expect_near_all(db.to_vector<float>(), db_ref, 1e-5);
  testing::expect_near_all(dx.to_vector<float>(), dx_ref, 1e-5);
}

TEST_P(MlpOps, SoftmaxCrossEntropyMatchesTheReferenceForBothLabelTypes) {
  auto device = make_device(GetParam());
  constexpr std::int64_t rows = 5, classes = 10;
  const auto logits_values = random_values(rows * classes, 7, -20.0F, 20.0F);
  const std::vector<std::int64_t> labels_values = {0, 9, 3, 3, 7};
  Tensor logits = Tensor::from_vector<float>(logits_values, Shape{rows, classes}, *device);
  std::vector<double> loss_ref(rows), grad_ref(rows * classes), softmax_ref(rows * classes);
  for (std::int64_t r = 0; r < rows; ++r) {
    double max = -1e300, sum = 0;
    for (std::int64_t c = 0; c < classes; ++c) max = std::max(max, double{logits_values[r * classes + c]});
    for (std::int64_t c = 0; c < classes; ++c) sum += std::exp(logits_values[r * classes + c] - max);
    loss_ref[r] = std::log(sum) + max - logits_values[r * classes + labels_values[r]];
    for (std::int64_t c = 0; c < classes; ++c) {
      softmax_ref[r * classes + c] = std::exp(logits_values[r * classes + c] - max) / sum;
      grad_ref[r * classes + c] = softmax_ref[r * classes + c] - (c == labels_values[r] ? 1.0 : 0.0);
    }
  }
  testing::expect_near_all(softmax(logits).to_vector<float>(), softmax_ref, 1e-5);
  Tensor labels64 = Tensor::from_vector<std::int64_t>(labels_values, Shape{rows}, *device);
  const std::vector<std::int32_t> labels32_values(labels_values.begin(), labels_values.end());
  Tensor labels32 = Tensor::from_vector<std::int32_t>(labels32_values, Shape{rows}, *device);
  for (const Tensor& labels : {labels64, labels32}) {
    CrossEntropy result = sparse_cross_entropy(logits, labels);
    testing::expect_near_all(result.loss.to_vector<float>(), loss_ref, 1e-5);
    testing::expect_near_all(result.gradient.to_vector<float>(), grad_ref, 1e-5);
  }
  // From the softmax's probabilities (Keras' from_logits=False): the same loss, up to the 1e-7 clip.
  CrossEntropy from_probabilities = sparse_cross_entropy(softmax(logits), labels32, CrossEntropyInput::probabilities);
  const auto losses = from_probabilities.loss.to_vector<float>();
  for (std::int64_t r = 0; r < rows; ++r) EXPECT_NEAR(losses[r], std::min(loss_ref[r], -std::log(1e-7)), 1e-4);
}

TEST_P(MlpOps, AnOutOfRangeLabelIsAnErrorNamingIt) {
  auto device = make_device(GetParam());
  Tensor logits = Tensor::from_vector<float>(random_values(20, 8), Shape{2, 10}, *device);
  Tensor labels = Tensor::from_vector<std::int32_t>(std::vector<std::int32_t>{1, 12}, Shape{2}, *device);
  try {
    CrossEntropy result = sparse_cross_entropy(logits, labels);
    (void)result.loss.to_vector<float>();  // an asynchronous stream reports it here
    FAIL() << "a label of 12 with 10 classes was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("12"), std::string::npos) << error.what();
  }
  EXPECT_THROW(sparse_cross_entropy(logits, Tensor::empty(Shape{2}, DType::f32, *device)), InvalidArgument);
  EXPECT_THROW(sparse_cross_entropy(logits, Tensor::empty(Shape{3}, DType::i32, *device)), InvalidArgument);
}

TEST_P(MlpOps, OutputsAreTaggedWithTheOpAndTheContextsName) {
  auto device = make_device(GetParam());
  Tensor a = Tensor::from_vector<float>(random_values(6, 9), Shape{2, 3}, *device);
  Tensor y = relu(a, {.output = {.name = "dense/relu", .step = 4}});
  EXPECT_EQ(y.name(), "dense/relu");
  EXPECT_EQ(y.buffer()->tag().op, "Relu");
  EXPECT_EQ(y.buffer()->tag().kind, memory::AllocationKind::activation);
  EXPECT_EQ(y.buffer()->tag().step, 4);
}

INSTANTIATE_TEST_SUITE_P(Backends, MlpOps, ::testing::ValuesIn(device::testing::present_backends()),
                         testing::backend_name);

TEST(MlpOps, OpsRunOnTheGivenStreamInItsOrder) {
  auto device = make_device(Backend::sim, 64 * kMiB, device::DeviceOptions{.num_streams = 2});
  Tensor x = Tensor::from_vector<float>(std::vector<float>{-1, 2, -3, 4}, Shape{2, 2}, *device);
  device->stream(1).wait(device->stream(0).record());  // x's upload happened on stream 0
  Tensor y = relu(x, {.stream = &device->stream(1)});
  EXPECT_EQ(y.to_vector<float>(&device->stream(1)), (std::vector<float>{0, 2, 0, 4}));
}

}  // namespace
}  // namespace tp::ops
