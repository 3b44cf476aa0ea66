// SPDX-License-Identifier: Apache-2.0
// The op layer's float16 / bfloat16 wiring on both backends: matmul, bias_add, relu and their gradients
// dispatch to the half kernels (results equal to the float32 ops on the same rounded inputs, rounded once),
// all_finite and the conditional optimizer updates validate their arguments, and mixed dtypes are refused
// naming the op and both arguments.
#include <gtest/gtest.h>

#include "backend/cpu/kernel_test_support.hpp"
#include "ops/ops_test_support.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/elementwise.hpp"
#include "tensorpool/ops/finite.hpp"
#include "tensorpool/ops/linalg.hpp"
#include "tensorpool/ops/nn.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::ops {
namespace {

using testing::Backend;
using tp_test::expect_invalid;

struct Case {
  Backend backend;
  DType dtype;
};

class HalfOps : public ::testing::TestWithParam<Case> {};

// The float32 op on inputs already rounded to the half type, rounded to it again: what the half op must give
// up to the float32 GEMM's summation order (within one half ulp).
TEST_P(HalfOps, MlpOpsMatchFloat32OnTheRoundedInputs) {
  const auto [backend, dtype] = GetParam();
  auto device = testing::make_device(backend);
  const double u = dtype == DType::f16 ? 0x1p-11 : 0x1p-8;
  const auto half = [&](std::vector<float> values, Shape shape) {
    return cast(Tensor::from_vector<float>(values, shape, *device), dtype);
  };
  const Tensor x = half(testing::random_values(6 * 20, 1), Shape{6, 20});
  const Tensor w = half(testing::random_values(20 * 9, 2), Shape{20, 9});
  const Tensor bias = half(testing::random_values(9, 3), Shape{9});
  const Tensor y = relu(bias_add(matmul(x, w), bias));
  EXPECT_EQ(y.dtype(), dtype);
  const Tensor y32 = relu(bias_add(matmul(cast(x, DType::f32), cast(w, DType::f32)), cast(bias, DType::f32)));
  const std::vector<float> got = cast(y, DType::f32).to_vector<float>();
  const std::vector<float> expected = y32.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], 3 * u * (1 + std::fabs(expected[i]))) << "at " << i;
  }
  const Tensor dx = relu_grad(y, y);
  const Tensor dbias = bias_add_grad(dx);
  EXPECT_EQ(dbias.dtype(), dtype);
  EXPECT_EQ(dbias.shape(), Shape{9});
  const Tensor dw = matmul(x, dx, {.transpose_a = true});
  EXPECT_EQ(dw.shape(), (Shape{20, 9}));
}

TEST_P(HalfOps, MixedDtypesAndIntegersAreRefusedNamingTheOp) {
  const auto [backend, dtype] = GetParam();
  auto device = testing::make_device(backend);
  const Tensor half = cast(Tensor::from_vector<float>(testing::random_values(4, 4), Shape{2, 2}, *device), dtype);
  const Tensor single = Tensor::from_vector<float>(testing::random_values(4, 5), Shape{2, 2}, *device);
  expect_invalid([&] { (void)matmul(half, single); },
                 {"MatMul", "a is " + std::string(name_of(dtype)), "share a dtype"});
  expect_invalid([&] { (void)relu(cast(single, DType::i32)); }, {"Relu", "int32", "float16 / bfloat16"});
  expect_invalid([&] { (void)all_finite(cast(single, DType::i32)); }, {"AllFinite", "int32"});
  // A 16-bit gradient goes only into a float32 parameter (mixed precision's master weights).
  const Tensor half_vector = cast(Tensor::from_vector<float>(std::vector<float>{1, 2}, Shape{2}, *device), dtype);
  const Tensor double_param = Tensor::from_vector<double>(std::vector<double>{1, 2}, Shape{2}, *device);
  expect_invalid([&] { sgd_update(double_param, half_vector, Tensor{}, {}); },
                 {"SgdUpdate", "grad", std::string(name_of(dtype))});
  const Tensor other_half = cast(half_vector, dtype == DType::f16 ? DType::bf16 : DType::f16);
  expect_invalid([&] { add_scaled(half_vector, 1.0, other_half); }, {"AddScaled", "x"});
}

// The collectives' reduction and the loss-scaling check on 16-bit tensors, through the op layer on both
// backends: one float32 sum rounded once per element; AllFinite sees an overflow.
TEST_P(HalfOps, AddScaledAndAllFiniteTake16BitTensors) {
  const auto [backend, dtype] = GetParam();
  auto device = testing::make_device(backend);
  const Tensor y = cast(Tensor::from_vector<float>(std::vector<float>{1.5F, -2.0F, 100.0F}, Shape{3}, *device), dtype);
  const Tensor x = cast(Tensor::from_vector<float>(std::vector<float>{0.25F, 4.0F, -36.0F}, Shape{3}, *device), dtype);
  add_scaled(y, 2.0, x);
  EXPECT_EQ(y.dtype(), dtype);
  EXPECT_EQ(cast(y, DType::f32).to_vector<float>(), (std::vector<float>{2.0F, 6.0F, 28.0F}));
  EXPECT_EQ(all_finite(y).to_vector<float>(), std::vector<float>{1.0F});
  const Tensor huge = cast(Tensor::from_vector<float>(std::vector<float>{1e38F}, Shape{1}, *device), DType::f32);
  const Tensor overflowed = cast(ops::scale(huge, 10.0), dtype);  // Inf in both 16-bit formats
  EXPECT_EQ(all_finite(overflowed).to_vector<float>(), std::vector<float>{0.0F});
}

// Mixed precision's update: a float32 parameter, a 16-bit gradient still multiplied by the loss scale, and
// the factor 1 / scale as `apply`. Equal, bitwise, to the float32 update on the widened gradient / scale.
TEST_P(HalfOps, UpdatesWidenAndUnscaleA16BitGradient) {
  const auto [backend, dtype] = GetParam();
  auto device = testing::make_device(backend);
  const std::vector<float> start = testing::random_values(6, 11);
  std::vector<float> scaled_values = testing::random_values(6, 12);
  for (float& value : scaled_values) value *= 4096.0F;
  const Tensor gradient = cast(Tensor::from_vector<float>(scaled_values, Shape{2, 3}, *device), dtype);
  const Tensor unscaled = ops::scale(cast(gradient, DType::f32), 1.0 / 4096.0);
  const float factor = 1.0F / 4096.0F;
  const Tensor apply = Tensor::from_vector<float>(std::span<const float>(&factor, 1), Shape{}, *device);
  const auto zeros = [&] { return Tensor::from_vector<float>(std::vector<float>(6, 0.0F), Shape{2, 3}, *device); };
  const Tensor param = Tensor::from_vector<float>(start, Shape{2, 3}, *device), m = zeros(), v = zeros();
  const Tensor ref = Tensor::from_vector<float>(start, Shape{2, 3}, *device), ref_m = zeros(), ref_v = zeros();
  adam_update_if(apply, param, gradient, m, v, 1, {});
  adam_update(ref, unscaled, ref_m, ref_v, 1, {});
  EXPECT_EQ(param.to_vector<float>(), ref.to_vector<float>());
  EXPECT_EQ(m.to_vector<float>(), ref_m.to_vector<float>());
  EXPECT_NE(param.to_vector<float>(), start);
  const Tensor sgd_param = Tensor::from_vector<float>(start, Shape{2, 3}, *device);
  const Tensor sgd_ref = Tensor::from_vector<float>(start, Shape{2, 3}, *device);
  sgd_update_if(apply, sgd_param, gradient, Tensor{}, {.learning_rate = 0.5});
  sgd_update(sgd_ref, unscaled, Tensor{}, {.learning_rate = 0.5});
  EXPECT_EQ(sgd_param.to_vector<float>(), sgd_ref.to_vector<float>());
}

// Both 16-bit dtypes on every backend present (cpu, sim, opencl where an OpenCL device exists).
std::vector<Case> half_cases() {
  std::vector<Case> cases;
  for (const Backend backend : device::testing::present_backends()) {
    for (const DType dtype : {DType::f16, DType::bf16}) cases.push_back(Case{backend, dtype});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, HalfOps, ::testing::ValuesIn(half_cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(device::testing::backend_label(param.param.backend)) + "_" +
                                  std::string(name_of(param.param.dtype));
                         });

TEST(ConditionalUpdates, TheFlagMustBeAFloat32ScalarOnTheParametersDevice) {
  auto device = testing::make_device(Backend::cpu);
  auto other = testing::make_device(Backend::sim);
  const Tensor param = Tensor::from_vector<float>(std::vector<float>{1, 2}, Shape{2}, *device);
  const Tensor grad = Tensor::from_vector<float>(std::vector<float>{1, 1}, Shape{2}, *device);
  const Tensor m = Tensor::from_vector<float>(std::vector<float>{0, 0}, Shape{2}, *device);
  const Tensor v = Tensor::from_vector<float>(std::vector<float>{0, 0}, Shape{2}, *device);
  const float one = 1.0F;
  const Tensor vector_flag = Tensor::from_vector<float>(std::vector<float>{1, 1}, Shape{2}, *device);
  const Tensor double_flag = Tensor::from_vector<double>(std::vector<double>{1}, Shape{}, *device);
  const Tensor far_flag = Tensor::from_vector<float>(std::span<const float>(&one, 1), Shape{}, *other);
  expect_invalid([&] { adam_update_if(vector_flag, param, grad, m, v, 1, {}); }, {"AdamUpdate", "apply", "[2]"});
  expect_invalid([&] { adam_update_if(double_flag, param, grad, m, v, 1, {}); },
                 {"AdamUpdate", "float64", "float32 scalar"});
  expect_invalid([&] { sgd_update_if(far_flag, param, grad, Tensor{}, {}); }, {"SgdUpdate", "apply"});
  const Tensor zero = Tensor::from_vector<float>(std::vector<float>{0}, Shape{}, *device);
  sgd_update_if(zero, param, grad, Tensor{}, {.learning_rate = 1.0});
  EXPECT_EQ(param.to_vector<float>(), (std::vector<float>{1, 2})) << "flag 0: untouched";
  sgd_update_if(Tensor::from_vector<float>(std::span<const float>(&one, 1), Shape{}, *device), param, grad, Tensor{},
                {.learning_rate = 1.0});
  EXPECT_EQ(param.to_vector<float>(), (std::vector<float>{0, 1})) << "flag 1: updated";
}

}  // namespace
}  // namespace tp::ops
