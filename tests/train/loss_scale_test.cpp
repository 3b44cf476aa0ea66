// SPDX-License-Identifier: Apache-2.0
// Dynamic loss scaling's host-side state machine (Keras defaults: 2^15, x2 after 2000 finite steps, /2 and
// skip on a non-finite step, never below 1), the fixed-scale mode, restore validation, and the dtype
// policies' names and errors.
#include "tensorpool/train/loss_scale.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu/kernel_test_support.hpp"
#include "tensorpool/train/dtype_policy.hpp"

namespace tp::train {
namespace {

using tp_test::expect_invalid;

TEST(DynamicLossScale, KerasDefaults) {
  const DynamicLossScale scale;
  EXPECT_EQ(scale.scale(), 32768.0);
  EXPECT_TRUE(scale.options().dynamic);
  EXPECT_EQ(scale.options().growth_interval, 2000);
  EXPECT_EQ(scale.state(), (LossScaleState{.scale = 32768.0, .good_steps = 0, .skipped_steps = 0}));
}

TEST(DynamicLossScale, DoublesAfterGrowthIntervalFiniteStepsInARow) {
  DynamicLossScale scale;
  for (int step = 1; step < 2000; ++step) ASSERT_TRUE(scale.update(true));
  EXPECT_EQ(scale.scale(), 32768.0);
  EXPECT_EQ(scale.state().good_steps, 1999);
  EXPECT_TRUE(scale.update(true));
  EXPECT_EQ(scale.scale(), 65536.0);
  EXPECT_EQ(scale.state().good_steps, 0);
}

TEST(DynamicLossScale, NonFiniteStepIsSkippedHalvesAndRestartsTheCount) {
  DynamicLossScale scale({.initial_scale = 1024.0, .growth_interval = 3});
  EXPECT_TRUE(scale.update(true));
  EXPECT_TRUE(scale.update(true));
  EXPECT_FALSE(scale.update(false));  // overflow: skip, halve, reset the run of good steps
  EXPECT_EQ(scale.state(), (LossScaleState{.scale = 512.0, .good_steps = 0, .skipped_steps = 1}));
  EXPECT_TRUE(scale.update(true));
  EXPECT_TRUE(scale.update(true));
  EXPECT_EQ(scale.scale(), 512.0) << "two good steps are not three";
  EXPECT_TRUE(scale.update(true));
  EXPECT_EQ(scale.scale(), 1024.0);
}

TEST(DynamicLossScale, NeverGoesBelowOne) {
  DynamicLossScale scale({.initial_scale = 4.0});
  for (int step = 0; step < 10; ++step) EXPECT_FALSE(scale.update(false));
  EXPECT_EQ(scale.scale(), 1.0);
  EXPECT_EQ(scale.state().skipped_steps, 10);
}

TEST(DynamicLossScale, FixedScaleNeverChangesButStillSkipsOverflow) {
  DynamicLossScale scale({.dynamic = false, .initial_scale = 128.0, .growth_interval = 1});
  EXPECT_TRUE(scale.update(true));
  EXPECT_FALSE(scale.update(false));
  EXPECT_EQ(scale.scale(), 128.0);
  EXPECT_EQ(scale.state().skipped_steps, 1);
}

TEST(DynamicLossScale, RejectsBadOptionsAndStatesNamingThem) {
  expect_invalid([] { DynamicLossScale({.initial_scale = 0.5}); }, {"initial_scale 0.5", ">= 1"});
  expect_invalid([] { DynamicLossScale({.initial_scale = std::numeric_limits<double>::infinity()}); },
                 {"initial_scale inf"});
  expect_invalid([] { DynamicLossScale({.growth_interval = 0}); }, {"growth_interval 0", ">= 1"});
  DynamicLossScale scale({.growth_interval = 10});
  expect_invalid([&] { scale.set_state({.scale = 64.0, .good_steps = 10, .skipped_steps = 0}); },
                 {"good_steps 10", "growth_interval 10"});
  expect_invalid([&] { scale.set_state({.scale = 0.25, .good_steps = 0, .skipped_steps = 0}); }, {"scale 0.25"});
  scale.set_state({.scale = 64.0, .good_steps = 9, .skipped_steps = 4});
  EXPECT_FALSE(scale.update(false));
  EXPECT_EQ(scale.state(), (LossScaleState{.scale = 32.0, .good_steps = 0, .skipped_steps = 5}));
}

TEST(DTypePolicy, NamesComputeDtypesAndScaling) {
  EXPECT_EQ(DTypePolicy{}, DTypePolicy::float32());
  EXPECT_EQ(DTypePolicy::from_name("mixed_float16").compute_dtype(), DType::f16);
  EXPECT_EQ(DTypePolicy::from_name("mixed_bfloat16").compute_dtype(), DType::bf16);
  EXPECT_EQ(DTypePolicy::from_name("float32").compute_dtype(), DType::f32);
  for (const DTypePolicy policy :
       {DTypePolicy::float32(), DTypePolicy::mixed_float16(), DTypePolicy::mixed_bfloat16()}) {
    EXPECT_EQ(DTypePolicy::from_name(policy.name()), policy);
    EXPECT_EQ(policy.variable_dtype(), DType::f32) << "master weights stay float32";
  }
  EXPECT_TRUE(DTypePolicy::mixed_float16().needs_loss_scaling());
  EXPECT_FALSE(DTypePolicy::mixed_bfloat16().needs_loss_scaling()) << "bfloat16 has float32's range";
  EXPECT_FALSE(DTypePolicy::float32().is_mixed());
}

TEST(DTypePolicy, UnknownNameListsTheAcceptedOnes) {
  expect_invalid([] { (void)DTypePolicy::from_name("float16", "--precision"); },
                 {"--precision 'float16'", "float32, mixed_float16, mixed_bfloat16"});
  expect_invalid([] { (void)DTypePolicy::from_name(""); }, {"dtype policy ''"});
}

}  // namespace
}  // namespace tp::train
