// SPDX-License-Identifier: Apache-2.0
// train::step_bytes: every planned tensor gets one kind from the graph (gradients are never activations), the
// sums of sizes count each tensor once, and the split taken at the arena's fullest planned step lies between
// the plan's liveness lower bound and the arena, on one device and mirrored (with its all-reduce bucket),
// in float32 and mixed precision.
#include "tensorpool/train/plan_bytes.hpp"

#include <gtest/gtest.h>

#include <string>

#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::train {
namespace {

struct Case {
  const char* name;
  bool mirrored;
  bool mixed;
};

class StepBytesOfThePlan : public ::testing::TestWithParam<Case> {};

TEST_P(StepBytesOfThePlan, KindsAndTheSplitAtTheFullestStep) {
  const Case c = GetParam();
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  Sequential model({64},
                   {{.units = 256, .activation = Activation::relu}, {.units = 10, .activation = Activation::softmax}});
  model.compile({.policy = c.mixed ? DTypePolicy::mixed_float16() : DTypePolicy::float32()},
                c.mirrored ? Strategy::mirrored({"sim:0", "sim:1"}) : Strategy::one_device("sim:0"),
                {.name = c.name, .devices = &manager});
  const runtime::MemoryPlan plan = model.plan(32);
  for (const runtime::DevicePlan& device : plan.devices) {
    SCOPED_TRACE(device.device);
    const StepBytes bytes = model.step_bytes(plan, device.device);
    ASSERT_EQ(bytes.kinds.size(), plan.tensors.size());
    std::size_t sums = 0;
    for (std::size_t index = 0; index < plan.tensors.size(); ++index) {
      const runtime::PlannedTensor& tensor = plan.tensors[index];
      if (tensor.device != device.device) continue;
      const bool gradient =
          tensor.name.starts_with("gradients/") || tensor.name.find("/gradients/") != std::string::npos;
      if (gradient) {
        EXPECT_NE(bytes.kinds[index], StepTensorKind::activation) << tensor.name;
      }
      if (tensor.name.find("MatMul_1:0") != std::string::npos && gradient) {
        EXPECT_EQ(bytes.kinds[index], StepTensorKind::weight_gradient) << tensor.name;  // dW: the kernel's shape
      }
      if (!tensor.in_place && tensor.planned_bytes > 0) sums += tensor.bytes;
    }
    EXPECT_EQ(
        bytes.activation_bytes + bytes.activation_gradient_bytes + bytes.weight_gradient_bytes + bytes.other_bytes,
        sums);
    EXPECT_GT(bytes.weight_gradient_bytes, 0u);
    EXPECT_LE(bytes.live_bytes(), device.arena_bytes);
    EXPECT_GE(bytes.live_bytes(), device.lower_bound_bytes);
    EXPECT_GT(bytes.live_weight_gradient_bytes, 0u);
  }
  EXPECT_EQ(model.step_bytes(plan, "sim:7").live_bytes(), 0u) << "a device the plan does not mention";
}

INSTANTIATE_TEST_SUITE_P(OneDeviceAndMirrored, StepBytesOfThePlan,
                         ::testing::Values(Case{"one32", false, false}, Case{"one16", false, true},
                                           Case{"mirrored32", true, false}, Case{"mirrored16", true, true}),
                         [](const ::testing::TestParamInfo<Case>& param) { return std::string(param.param.name); });

TEST(StepTensorKind, NamesAreTheSharedVocabulary) {
  EXPECT_EQ(to_string(StepTensorKind::activation), "activation");
  EXPECT_EQ(to_string(StepTensorKind::activation_gradient), "activation_gradient");
  EXPECT_EQ(to_string(StepTensorKind::weight_gradient), "weight_gradient");
  EXPECT_EQ(to_string(StepTensorKind::other), "other");
}

}  // namespace
}  // namespace tp::train
