// SPDX-License-Identifier: Apache-2.0
// The Keras-like model on synthetic data: training lowers the loss on one device and mirrored over two;
// mirrored replicas stay bitwise identical; mirrored matches one device within float tolerance; the plan is
// known before the first step; bad inputs are rejected naming them. The device cases run on every
// accelerator backend present (sim, and opencl where an OpenCL device exists), and on opencl the losses and
// held-out accuracy also stay within float tolerance of the same training on sim.
#include "tensorpool/train/sequential.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "train/support/synthetic_training.hpp"

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kClasses = 4, kRows = 32;

using testing::Data;

Data batch(device::DeviceManager& manager, std::uint32_t seed, std::int64_t rows = kRows) {
  return testing::synthetic_batch(manager, rows, kIn, kClasses, seed);
}

Sequential mlp() {
  return Sequential(
      {kIn}, {{.units = 32, .activation = Activation::relu}, {.units = kClasses, .activation = Activation::softmax}});
}

std::vector<double> train(Sequential& model, device::DeviceManager& manager, int steps) {
  return testing::train_synthetic(model, manager, steps, kRows, kIn, kClasses);
}

// Two devices of every accelerator kind: sim:0 and sim:1, opencl:0 and opencl:1 (on PoCL's one device).
device::DeviceManagerOptions two_of_each() {
  device::DeviceManagerOptions options = runtime::testing::two_sim_devices();
  options.opencl_devices = 2;
  return options;
}

// The parameter: the first accelerator of the kind under test ("sim:0", "opencl:0").
class SequentialOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  // Device `index` of the parameter's kind.
  std::string on(int index) const { return GetParam().substr(0, GetParam().find(':')) + ":" + std::to_string(index); }
};

struct Learned {
  std::vector<double> losses;
  double held_out_accuracy = 0;
};

Learned learn(const Strategy& strategy) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  Sequential model = mlp();
  model.compile({.optimizer = Adam{.learning_rate = 0.01}}, strategy, {.devices = &manager});
  Learned learned{train(model, manager, 60)};
  const Data held_out = batch(manager, 99, 200);
  learned.held_out_accuracy = static_cast<double>(model.test_step(held_out.x, held_out.labels).correct) / 200.0;
  return learned;
}

TEST_P(SequentialOnDevice, LearnsOnOneDeviceAndMirrored) {
  const std::vector<Strategy> strategies = {Strategy::one_device(on(0)), Strategy::mirrored({on(0), on(1)}),
                                            Strategy::mirrored({on(0), on(1)}, "reduce_to_one")};
  const std::vector<Strategy> on_sim = {Strategy::one_device("sim:0"), Strategy::mirrored({"sim:0", "sim:1"}),
                                        Strategy::mirrored({"sim:0", "sim:1"}, "reduce_to_one")};
  for (std::size_t index = 0; index < strategies.size(); ++index) {
    const Learned learned = learn(strategies[index]);
    const std::vector<double>& losses = learned.losses;
    EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << " last " << losses.back();
    EXPECT_GT(learned.held_out_accuracy, 0.7);
    if (GetParam() == "sim:0") continue;
    // The same training on sim: the same learning to float tolerance (kernels differ in rounding only).
    const Learned sim = learn(on_sim[index]);
    ASSERT_EQ(losses.size(), sim.losses.size());
    for (std::size_t step = 0; step < losses.size(); ++step) {
      EXPECT_NEAR(losses[step], sim.losses[step], 1e-3 * std::abs(sim.losses[step])) << "step " << step + 1;
    }
    EXPECT_NEAR(learned.held_out_accuracy, sim.held_out_accuracy, 2.0 / 200)
        << "at most two of 200 held-out examples may change class";
  }
}

TEST_P(SequentialOnDevice, MirroredReplicasStayBitwiseIdenticalAndMatchOneDevice) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  Sequential mirrored = mlp();
  mirrored.compile({}, Strategy::mirrored({on(0), on(1)}), {.devices = &manager});
  Sequential single = mlp();
  single.compile({}, Strategy::one_device(on(0)), {.name = "single", .devices = &manager});
  const std::vector<double> mirrored_losses = train(mirrored, manager, 10);
  const std::vector<double> single_losses = train(single, manager, 10);
  for (std::size_t step = 0; step < mirrored_losses.size(); ++step) {
    EXPECT_NEAR(mirrored_losses[step], single_losses[step], 1e-5 * (1 + std::abs(single_losses[step])));
  }
  for (const std::string& name : mirrored.session().variable_names()) {
    if (name.rfind("replica_0/", 0) != 0) continue;
    const std::string twin = "replica_1/" + name.substr(10);
    EXPECT_EQ(mirrored.session().read_variable(name).to_vector<float>(),
              mirrored.session().read_variable(twin).to_vector<float>())
        << name << " and " << twin << " diverged";
  }
  const auto single_variables = single.variables();
  const auto mirrored_variables = mirrored.variables();
  ASSERT_EQ(single_variables.size(), mirrored_variables.size());
  for (std::size_t index = 0; index < single_variables.size(); ++index) {
    EXPECT_EQ(single_variables[index].first, mirrored_variables[index].first);
    const auto a = single_variables[index].second.to_vector<float>();
    const auto b = mirrored_variables[index].second.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << single_variables[index].first;
  }
}

TEST_P(SequentialOnDevice, ThePlanCoversEveryReplicaAndAnOddBatchSplits) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  Sequential model = mlp();
  model.compile({}, Strategy::mirrored({on(0), on(1)}), {.devices = &manager});
  const runtime::MemoryPlan plan = model.plan(33);
  EXPECT_EQ(plan.devices.size(), 2u);
  const Data odd = batch(manager, 3, 33);
  const StepResult result = model.train_step(odd.x, odd.labels, 1);
  EXPECT_EQ(result.examples, 33);
  EXPECT_TRUE(std::isfinite(result.loss));
}

TEST_P(SequentialOnDevice, MeanSquaredErrorRegressionLearns) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  Sequential model({kIn}, {{.units = 16, .activation = Activation::relu}, {.units = 2}});
  model.compile({.optimizer = Sgd{.learning_rate = 0.05, .momentum = 0.9}, .loss = Loss::mean_squared_error},
                Strategy::mirrored({on(0), on(1)}), {.devices = &manager});
  std::vector<double> losses;
  for (int step = 1; step <= 80; ++step) {
    const auto made = runtime::testing::make_batch(kRows, kIn, kClasses, static_cast<std::uint32_t>(step % 8));
    std::vector<float> targets;  // regress the first two features
    for (std::int64_t row = 0; row < kRows; ++row) {
      targets.push_back(made.x[static_cast<std::size_t>(row * kIn)]);
      targets.push_back(made.x[static_cast<std::size_t>(row * kIn + 1)]);
    }
    device::Device& cpu = manager.device("cpu:0");
    losses.push_back(model
                         .train_step(Tensor::from_vector<float>(made.x, Shape{kRows, kIn}, cpu),
                                     Tensor::from_vector<float>(targets, Shape{kRows, 2}, cpu), step)
                         .loss);
  }
  EXPECT_LT(losses.back(), 0.2 * losses.front()) << "first " << losses.front() << " last " << losses.back();
  EXPECT_FALSE(model.has_accuracy());
}

TEST(Sequential, BadInputsAreRejectedNamingThem) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  Sequential model = mlp();
  EXPECT_THROW(model.train_step(Tensor(), Tensor(), 1), InvalidArgument);  // not compiled
  model.compile({}, Strategy::one_device("sim:0"), {.devices = &manager});
  EXPECT_THROW(model.add({.units = 3}), InvalidArgument);
  const Data data = batch(manager, 1);
  EXPECT_THROW(model.train_step(data.x.reshape(Shape{kRows * 2, kIn / 2}), data.labels, 1), InvalidArgument);
  EXPECT_THROW(model.train_step(data.x, data.labels.slice(0, 5), 1), InvalidArgument);
  Sequential empty({kIn});
  EXPECT_THROW(empty.compile({}, Strategy::one_device("sim:0"), {.devices = &manager}), InvalidArgument);
  Sequential elsewhere = mlp();
  EXPECT_THROW(elsewhere.compile({}, Strategy::one_device("sim:7"), {.devices = &manager}), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Accelerators, SequentialOnDevice,
                         ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::train
