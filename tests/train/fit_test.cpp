// SPDX-License-Identifier: Apache-2.0
// fit() on synthetic data: learning with validation and callbacks, and resuming after a crash from the latest
// checkpoint at the same step with bitwise the same final weights as an uninterrupted run. Each case runs on
// every accelerator backend present (sim, and opencl where an OpenCL device exists: two devices of the kind
// for the mirrored runs); on opencl the losses and accuracy also stay within float tolerance of sim's.
#include "tensorpool/train/fit.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kClasses = 4;

data::Dataset synthetic(device::DeviceManager& manager, std::int64_t rows, std::uint32_t seed, std::int64_t batch) {
  const auto made = runtime::testing::make_batch(rows, kIn, kClasses, seed);
  device::Device& cpu = manager.device("cpu:0");
  return data::Dataset::from_tensors(Tensor::from_vector<float>(made.x, Shape{rows, kIn}, cpu),
                                     Tensor::from_vector<std::int32_t>(made.labels, Shape{rows}, cpu))
      .shuffle(7)
      .batch(batch)
      .stage_on(cpu);
}

std::unique_ptr<Sequential> model(device::DeviceManager& manager, const Strategy& strategy) {
  auto sequential = std::make_unique<Sequential>(
      std::vector<std::int64_t>{kIn}, std::vector<Dense>{{.units = 32, .activation = Activation::relu},
                                                         {.units = kClasses, .activation = Activation::softmax}});
  sequential->compile({.optimizer = Adam{.learning_rate = 0.01}}, strategy, {.devices = &manager});
  return sequential;
}

class Crash final : public Callback {
 public:
  explicit Crash(std::int64_t at_step) : at_step_(at_step) {}
  void on_batch_end(const BatchLogs& logs) override {
    if (logs.step == at_step_) throw std::runtime_error("simulated crash");
  }

 private:
  std::int64_t at_step_;
};

// Two devices of every accelerator kind: sim:0 and sim:1, opencl:0 and opencl:1 (on PoCL's one device).
device::DeviceManagerOptions two_of_each() {
  device::DeviceManagerOptions options = runtime::testing::two_sim_devices();
  options.opencl_devices = 2;
  return options;
}

// The parameter: the first accelerator of the kind under test ("sim:0", "opencl:0").
class FitOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  // Device `index` of the parameter's kind.
  std::string on(int index) const { return GetParam().substr(0, GetParam().find(':')) + ":" + std::to_string(index); }
};

TEST_P(FitOnDevice, LearnsAndReportsAHistory) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 512, 1, 32);
  const data::Dataset validation = synthetic(manager, 256, 2, 64);
  auto sequential = model(manager, Strategy::mirrored({on(0), on(1)}));
  const FitResult result = fit(*sequential, train, {.epochs = 4, .validation = &validation});
  ASSERT_EQ(result.history.epochs.size(), 4u);
  EXPECT_EQ(result.steps, 4 * 16);
  EXPECT_LT(result.history.epochs.back().loss, result.history.epochs.front().loss);
  EXPECT_GT(*result.history.epochs.back().val_accuracy, 0.8);
  const Evaluation evaluation = evaluate(*sequential, validation);
  EXPECT_EQ(evaluation.examples, 256);
  EXPECT_NEAR(evaluation.accuracy, *result.history.epochs.back().val_accuracy, 1e-12);
  // The same run on sim: the same learning to float tolerance (kernels differ in rounding, not in maths).
  auto on_sim = model(manager, Strategy::mirrored({"sim:0", "sim:1"}));
  const FitResult sim = fit(*on_sim, train, {.epochs = 4, .validation = &validation});
  for (std::size_t epoch = 0; epoch < 4; ++epoch) {
    const double expected = sim.history.epochs[epoch].loss;
    EXPECT_NEAR(result.history.epochs[epoch].loss, expected, 1e-3 * std::abs(expected)) << "epoch " << epoch + 1;
  }
  EXPECT_NEAR(*result.history.epochs.back().val_accuracy, *sim.history.epochs.back().val_accuracy, 2.0 / 256)
      << "at most two of 256 validation examples may change class";
}

TEST_P(FitOnDevice, ResumesAfterACrashAtTheSameStepWithTheSameWeights) {
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("tp_fit_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 320, 3, 32);  // 10 steps per epoch
  // Uninterrupted reference.
  auto reference = model(manager, Strategy::one_device(on(0)));
  fit(*reference, train, {.epochs = 3});
  // Crash at step 17 (mid-epoch 2), after the checkpoint of step 15.
  {
    auto crashing = model(manager, Strategy::one_device(on(1)));
    FitOptions options{.epochs = 3, .checkpoint_dir = directory, .checkpoint_every_steps = 5};
    options.callbacks.push_back(std::make_shared<Crash>(17));
    EXPECT_THROW(fit(*crashing, train, options), std::runtime_error);
  }
  auto resumed = model(manager, Strategy::one_device(on(0)));
  const FitResult result =
      fit(*resumed, train, {.epochs = 3, .checkpoint_dir = directory, .checkpoint_every_steps = 5});
  EXPECT_EQ(result.resumed_from_step, 15);
  EXPECT_EQ(result.steps, 30);
  const auto expected = reference->variables();
  const auto actual = resumed->variables();
  ASSERT_EQ(expected.size(), actual.size());
  for (std::size_t index = 0; index < expected.size(); ++index) {
    EXPECT_EQ(expected[index].second.to_vector<float>(), actual[index].second.to_vector<float>())
        << expected[index].first;
  }
  std::filesystem::remove_all(directory);
}

// Records every on_batch_end, to compare the batch logs of two runs.
class BatchRecorder final : public Callback {
 public:
  void on_batch_end(const BatchLogs& logs) override { seen.push_back(logs); }
  std::vector<BatchLogs> seen;
};

struct Trained {
  std::vector<BatchLogs> batches;
  History history;
  std::vector<std::pair<std::string, Tensor>> variables;
};

Trained fit_with(device::DeviceManager& manager, const Strategy& strategy, std::int64_t steps_in_flight) {
  auto sequential = model(manager, strategy);
  const data::Dataset train = synthetic(manager, 320, 4, 32);
  const data::Dataset validation = synthetic(manager, 128, 5, 64);
  auto recorder = std::make_shared<BatchRecorder>();
  const FitResult result =
      fit(*sequential, train,
          {.epochs = 2, .validation = &validation, .callbacks = {recorder}, .steps_in_flight = steps_in_flight});
  return {recorder->seen, result.history, sequential->variables()};
}

// Steps launched ahead of the one whose results are read train bitwise as steps run one at a time, and the
// callbacks see every step once, in order, with the same logs.
TEST_P(FitOnDevice, StepsInFlightTrainExactlyAsStepsOneAtATime) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  for (const Strategy& strategy : {Strategy::one_device(on(0)), Strategy::mirrored({on(0), on(1)})}) {
    const Trained serial = fit_with(manager, strategy, 1);
    ASSERT_EQ(serial.batches.size(), 20u);
    for (const std::int64_t in_flight : {2, 4}) {
      const Trained overlapped = fit_with(manager, strategy, in_flight);
      ASSERT_EQ(overlapped.batches.size(), serial.batches.size()) << in_flight;
      for (std::size_t index = 0; index < serial.batches.size(); ++index) {
        const BatchLogs& expected = serial.batches[index];
        const BatchLogs& actual = overlapped.batches[index];
        EXPECT_EQ(actual.step, expected.step);
        EXPECT_EQ(actual.epoch, expected.epoch);
        EXPECT_EQ(actual.batch, expected.batch);
        EXPECT_EQ(actual.loss, expected.loss) << "step " << expected.step << ", " << in_flight << " in flight";
        EXPECT_EQ(actual.accuracy, expected.accuracy);
      }
      ASSERT_EQ(overlapped.history.epochs.size(), 2u);
      for (std::size_t epoch = 0; epoch < 2; ++epoch) {
        EXPECT_EQ(overlapped.history.epochs[epoch].loss, serial.history.epochs[epoch].loss);
        EXPECT_EQ(overlapped.history.epochs[epoch].val_loss, serial.history.epochs[epoch].val_loss);
      }
      ASSERT_EQ(overlapped.variables.size(), serial.variables.size());
      for (std::size_t index = 0; index < serial.variables.size(); ++index) {
        const auto& [name, expected] = serial.variables[index];
        EXPECT_EQ(overlapped.variables[index].second.to_vector<float>(), expected.to_vector<float>()) << name;
      }
    }
  }
}

TEST(Fit, StepsInFlightBelowOneAreRefused) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  auto sequential = model(manager, Strategy::one_device("sim:0"));
  const data::Dataset train = synthetic(manager, 64, 6, 32);
  try {
    fit(*sequential, train, {.epochs = 1, .steps_in_flight = 0});
    FAIL() << "steps_in_flight = 0 was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("steps_in_flight = 0"), std::string::npos) << error.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Accelerators, FitOnDevice, ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::train
