// SPDX-License-Identifier: Apache-2.0
// Resuming from a checkpoint directory: a checkpoint of another model is refused naming the file, the variable
// and both shapes (fit() and the parameter-server run); a run whose checkpoint is already at the last epoch
// trains nothing and says so in its result.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "tensorpool/train/fit.hpp"
#include "tensorpool/train/parameter_server.hpp"

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kClasses = 4;

data::Dataset synthetic(device::DeviceManager& manager, std::int64_t rows) {
  const auto made = runtime::testing::make_batch(rows, kIn, kClasses, 3);
  device::Device& cpu = manager.device("cpu:0");
  return data::Dataset::from_tensors(Tensor::from_vector<float>(made.x, Shape{rows, kIn}, cpu),
                                     Tensor::from_vector<std::int32_t>(made.labels, Shape{rows}, cpu))
      .shuffle(7)
      .batch(32)
      .stage_on(cpu);
}

std::unique_ptr<Sequential> model(device::DeviceManager& manager, const Strategy& strategy, std::int64_t units) {
  auto sequential = std::make_unique<Sequential>(
      std::vector<std::int64_t>{kIn}, std::vector<Dense>{{.units = units, .activation = Activation::relu},
                                                         {.units = kClasses, .activation = Activation::softmax}});
  sequential->compile({.optimizer = Adam{.learning_rate = 0.01}}, strategy, {.devices = &manager});
  return sequential;
}

class CheckpointResume : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ =
        std::filesystem::temp_directory_path() / ("tp_checkpoint_resume_" + std::to_string(::getpid()) + "_" +
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::filesystem::path directory_;
};

void expect_refusal_naming(const std::string& text, const std::filesystem::path& file) {
  EXPECT_NE(text.find("the checkpoint " + file.string()), std::string::npos) << text;
  EXPECT_NE(text.find("does not fit this model"), std::string::npos) << text;
  EXPECT_NE(text.find("dense/kernel"), std::string::npos) << text;
  EXPECT_NE(text.find("[12,16]"), std::string::npos) << "this model's shape: " << text;
  EXPECT_NE(text.find("[12,32]"), std::string::npos) << "the checkpoint's shape: " << text;
  EXPECT_NE(text.find("another checkpoint directory"), std::string::npos) << text;
}

TEST_F(CheckpointResume, ACheckpointOfAnotherModelIsRefusedNamingTheFileTheVariableAndBothShapes) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 64);  // 2 steps per epoch
  fit(*model(manager, Strategy::one_device("sim:0"), 32), train, {.epochs = 1, .checkpoint_dir = directory_});
  auto narrower = model(manager, Strategy::one_device("sim:0"), 16);
  try {
    fit(*narrower, train, {.epochs = 2, .checkpoint_dir = directory_});
    ADD_FAILURE() << "a checkpoint of 32 hidden units resumed into 16";
  } catch (const InvalidArgument& error) {
    expect_refusal_naming(error.what(), directory_ / checkpoint_file_name(2));
  }
}

TEST_F(CheckpointResume, TheParameterServerRefusesACheckpointOfAnotherModelToo) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 64);
  const Strategy strategy = Strategy::parameter_server({"sim:0", "sim:1"}, "cpu:0");
  fit_parameter_server(*model(manager, strategy, 32), train, {.fit = {.epochs = 1, .checkpoint_dir = directory_}});
  const std::optional<CheckpointState> saved = load_latest_checkpoint(directory_);
  ASSERT_TRUE(saved.has_value());
  try {
    fit_parameter_server(*model(manager, strategy, 16), train, {.fit = {.epochs = 2, .checkpoint_dir = directory_}});
    ADD_FAILURE() << "a checkpoint of 32 hidden units resumed into 16";
  } catch (const InvalidArgument& error) {
    expect_refusal_naming(error.what(), directory_ / checkpoint_file_name(saved->step));
  }
}

TEST_F(CheckpointResume, ARunWhoseCheckpointIsAtTheLastEpochTrainsNothing) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 64);
  const FitResult first =
      fit(*model(manager, Strategy::one_device("sim:0"), 32), train, {.epochs = 2, .checkpoint_dir = directory_});
  EXPECT_EQ(first.first_epoch, 0);
  EXPECT_EQ(first.train_samples, 128);
  const FitResult again =
      fit(*model(manager, Strategy::one_device("sim:0"), 32), train, {.epochs = 2, .checkpoint_dir = directory_});
  EXPECT_EQ(again.first_epoch, 2) << "the checkpoint's epoch";
  EXPECT_EQ(again.resumed_from_step, 4);
  EXPECT_EQ(again.steps, 4);
  EXPECT_EQ(again.train_samples, 0);
  EXPECT_TRUE(again.history.epochs.empty());
}

}  // namespace
}  // namespace tp::train
