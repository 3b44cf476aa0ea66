// fit() on synthetic data: learning with validation and callbacks, and resuming after a crash from the latest
// checkpoint at the same step with bitwise the same final weights as an uninterrupted run.
#include "tensorpool/train/fit.hpp"

#include <gtest/gtest.h>

#include <filesystem>

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
      std::vector<std::int64_t>{kIn},
      std::vector<Dense>{{.units = 32, .activation = Activation::relu}, {.units = kClasses, .activation = Activation::softmax}});
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

TEST(Fit, LearnsAndReportsAHistory) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  auto sequential = model(manager, Strategy::mirrored({"sim:0", "sim:1"}));
  const data::Dataset train = synthetic(manager, 512, 1, 32);
  const data::Dataset validation = synthetic(manager, 256, 2, 64);
  const FitResult result = fit(*sequential, train, {.epochs = 4, .validation = &validation});
  ASSERT_EQ(result.history.epochs.size(), 4u);
  EXPECT_EQ(result.steps, 4 * 16);
  EXPECT_LT(result.history.epochs.back().loss, result.history.epochs.front().loss);
  EXPECT_GT(*result.history.epochs.back().val_accuracy, 0.8);
  const Evaluation evaluation = evaluate(*sequential, validation);
  EXPECT_EQ(evaluation.examples, 256);
  EXPECT_NEAR(evaluation.accuracy, *result.history.epochs.back().val_accuracy, 1e-12);
}

TEST(Fit, ResumesAfterACrashAtTheSameStepWithTheSameWeights) {
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("tp_fit_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 320, 3, 32);  // 10 steps per epoch
  // Uninterrupted reference.
  auto reference = model(manager, Strategy::one_device("sim:0"));
  fit(*reference, train, {.epochs = 3});
  // Crash at step 17 (mid-epoch 2), after the checkpoint of step 15.
  {
    auto crashing = model(manager, Strategy::one_device("sim:1"));
    FitOptions options{.epochs = 3, .checkpoint_dir = directory, .checkpoint_every_steps = 5};
    options.callbacks.push_back(std::make_shared<Crash>(17));
    EXPECT_THROW(fit(*crashing, train, options), std::runtime_error);
  }
  auto resumed = model(manager, Strategy::one_device("sim:0"));
  const FitResult result = fit(*resumed, train, {.epochs = 3, .checkpoint_dir = directory, .checkpoint_every_steps = 5});
  EXPECT_EQ(result.resumed_from_step, 15);
  EXPECT_EQ(result.steps, 30);
  const auto expected = reference->variables();
  const auto actual = resumed->variables();
  ASSERT_EQ(expected.size(), actual.size());
  for (std::size_t index = 0; index < expected.size(); ++index) {
    EXPECT_EQ(expected[index].second.to_vector<float>(), actual[index].second.to_vector<float>()) << expected[index].first;
  }
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace tp::train
