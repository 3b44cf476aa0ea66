// SPDX-License-Identifier: Apache-2.0
// Strategy::parameter_server in-process: one worker trains exactly as one device does; asynchronous workers
// lower the loss; bounded staleness keeps every update within its proven bound and the workers within K + 1
// steps of each other; without a bound a slow worker holds nobody back; a rerun resumes from the checkpoint;
// bad strategies are refused by name.
#include "tensorpool/train/parameter_server.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "train/support/synthetic_training.hpp"

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kHidden = 24, kClasses = 4, kBatch = 16;

// Three devices of every accelerator kind: sim:0..2, and opencl:0..2 on the OpenCL devices there are.
device::DeviceManagerOptions three_sim_devices() {
  device::DeviceManagerOptions options = runtime::testing::two_sim_devices();
  options.sim_devices = 3;
  options.opencl_devices = 3;
  return options;
}

// The training cases run on every accelerator backend present; the parameter is the first device of the
// kind under test ("sim:0", "opencl:0").
class ParameterServerOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  // Device `index` of the parameter's kind.
  std::string on(int index) const { return GetParam().substr(0, GetParam().find(':')) + ":" + std::to_string(index); }
};

data::Dataset synthetic(device::DeviceManager& manager, std::int64_t rows, std::uint32_t seed) {
  const testing::Data data = testing::synthetic_batch(manager, rows, kIn, kClasses, seed);
  return data::Dataset::from_tensors(data.x, data.labels).shuffle(seed).batch(kBatch).stage_on(manager.device("cpu:0"));
}

std::unique_ptr<Sequential> compiled(device::DeviceManager& manager, const Strategy& strategy,
                                     CompileOptions options = {}) {
  auto model = std::make_unique<Sequential>(std::vector<std::int64_t>{kIn},
                                            std::vector<Dense>{{.units = kHidden, .activation = Activation::relu},
                                                               {.units = kClasses, .activation = Activation::softmax}});
  model->compile(options, strategy, {.intra_op_threads = 1, .devices = &manager});
  return model;
}

std::map<std::string, std::vector<float>> values(Sequential& model) {
  std::map<std::string, std::vector<float>> result;
  for (const auto& [name, tensor] : model.variables()) result[name] = tensor.to_vector<float>();
  return result;
}

// Every variable (parameters and optimizer slots) of `actual` within 1e-6 of `expected`'s; `what` says otherwise.
void expect_same_variables(Sequential& expected_model, Sequential& actual_model, const std::string& what) {
  const auto expected = values(expected_model);
  const auto actual = values(actual_model);
  ASSERT_EQ(expected.size(), actual.size());
  double largest = 0;
  for (const auto& [name, want] : expected) {
    ASSERT_TRUE(actual.contains(name)) << name;
    for (std::size_t i = 0; i < want.size(); ++i) {
      largest = std::max(largest, static_cast<double>(std::abs(want[i] - actual.at(name)[i])));
    }
  }
  EXPECT_LE(largest, 1e-6) << what;
}

// Worker w's completed steps just after each update, replayed from the server's log.
std::vector<std::vector<std::int64_t>> progress(const std::vector<UpdateRecord>& updates, std::size_t workers) {
  std::vector<std::int64_t> done(workers, 0);
  std::vector<std::vector<std::int64_t>> after;
  for (const UpdateRecord& update : updates) {
    ++done[static_cast<std::size_t>(update.worker)];
    after.push_back(done);
  }
  return after;
}

TEST_P(ParameterServerOnDevice, OneWorkerTrainsExactlyAsOneDevice) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 160, 7);
  for (const Optimizer& optimizer : {Optimizer{Adam{}}, Optimizer{Sgd{.learning_rate = 0.05, .momentum = 0.9}}}) {
    std::unique_ptr<Sequential> one = compiled(manager, Strategy::one_device(on(0)), {.optimizer = optimizer});
    const FitResult reference = fit(*one, train, {.epochs = 2});
    std::unique_ptr<Sequential> served =
        compiled(manager, Strategy::parameter_server({on(1)}, "cpu:0", 0), {.optimizer = optimizer});
    const FitResult result = fit(*served, train, {.epochs = 2});  // fit() runs the parameter server
    EXPECT_EQ(result.steps, reference.steps);
    expect_same_variables(*one, *served, "variables (parameters and optimizer slots) differ from one-device training");
    ASSERT_EQ(reference.history.epochs.size(), result.history.epochs.size());
    for (std::size_t epoch = 0; epoch < reference.history.epochs.size(); ++epoch) {
      EXPECT_NEAR(reference.history.epochs[epoch].loss, result.history.epochs[epoch].loss, 1e-6);
    }
  }
}

// The checkpoint written at the end holds the variables, the optimizer state and the version (Adam's step): a
// new run of the same job resumes there. One worker trains as one device does, so one epoch, a resume and a
// second epoch end where two epochs on one device do.
TEST(ParameterServer, ARerunResumesFromTheCheckpointAtItsVersion) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 160, 7);
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("tp_ps_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  std::unique_ptr<Sequential> one = compiled(manager, Strategy::one_device("sim:0"));
  const FitResult reference = fit(*one, train, {.epochs = 2});
  const Strategy strategy = Strategy::parameter_server({"sim:1"}, "cpu:0", 0);
  std::unique_ptr<Sequential> first = compiled(manager, strategy);
  const FitResult first_result = fit(*first, train, {.epochs = 1, .checkpoint_dir = directory});
  ASSERT_EQ(first_result.steps, reference.steps / 2);
  const std::optional<CheckpointState> saved = load_latest_checkpoint(directory);
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->step, first_result.steps);
  EXPECT_EQ(saved->epoch, 1);
  EXPECT_TRUE(saved->tensors.contains("dense/kernel/adam_m"));
  std::unique_ptr<Sequential> second = compiled(manager, strategy);
  const FitResult resumed = fit(*second, train, {.epochs = 2, .checkpoint_dir = directory});
  EXPECT_EQ(resumed.resumed_from_step, first_result.steps);
  EXPECT_EQ(resumed.steps, reference.steps);
  ASSERT_EQ(resumed.history.epochs.size(), 1U) << "only the second epoch runs";
  expect_same_variables(*one, *second, "resumed parameter-server training differs from two epochs on one device");
  EXPECT_EQ(load_latest_checkpoint(directory)->step, reference.steps);
  std::filesystem::remove_all(directory);
}

TEST_P(ParameterServerOnDevice, TwoAsynchronousWorkersLowerTheLoss) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  const data::Dataset train = synthetic(manager, 1024, 3);
  const data::Dataset test = synthetic(manager, 256, 99);
  std::unique_ptr<Sequential> model =
      compiled(manager, Strategy::parameter_server({on(0), on(1)}, on(2)), {.optimizer = Adam{.learning_rate = 0.01}});
  const Evaluation before = evaluate(*model, test);
  const ParameterServerResult result = fit_parameter_server(*model, train, {.fit = {.epochs = 3}});
  const Evaluation after = evaluate(*model, test);
  EXPECT_LT(after.loss, 0.5 * before.loss) << "before " << before.loss << ", after " << after.loss;
  EXPECT_GE(after.accuracy, 0.8);
  // Each worker ran its own half of the data: 512 examples = 32 batches, 3 epochs.
  EXPECT_EQ(result.worker_steps, (std::vector<std::int64_t>{96, 96}));
  EXPECT_EQ(result.fit.steps, 192);
  EXPECT_EQ(result.updates.size(), 192u);
  EXPECT_EQ(result.fit.train_samples, 3 * 1024);
  ASSERT_EQ(result.fit.history.epochs.size(), 3u);
  EXPECT_LT(result.fit.history.epochs.back().loss, result.fit.history.epochs.front().loss);
  for (std::size_t index = 0; index < result.updates.size(); ++index) {
    const UpdateRecord& update = result.updates[index];
    EXPECT_EQ(update.applied_version, static_cast<std::int64_t>(index) + 1);
    EXPECT_EQ(update.staleness, update.applied_version - 1 - update.pulled_version);
  }
}

TEST(ParameterServer, BoundedStalenessStaysWithinItsBound) {
  constexpr std::int64_t kWorkers = 3;
  for (const std::int64_t bound : {0, 1, 3}) {
    device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
    const data::Dataset train = synthetic(manager, 480, 5);  // 160 examples = 10 batches per worker
    std::unique_ptr<Sequential> model =
        compiled(manager, Strategy::parameter_server({"sim:0", "sim:1", "sim:2"}, "cpu:0", bound));
    ParameterServerOptions options{.fit = {.epochs = 1}};
    options.before_step = [](std::int32_t worker, std::int64_t) {  // worker 2 is slow
      if (worker == 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    };
    const ParameterServerResult result = fit_parameter_server(*model, train, options);
    ASSERT_EQ(result.updates.size(), 30u);
    const std::int64_t proven = (kWorkers - 1) * (2 * bound + 1);  // parameter_server.hpp
    const std::vector<std::vector<std::int64_t>> after = progress(result.updates, kWorkers);
    for (std::size_t index = 0; index < result.updates.size(); ++index) {
      const UpdateRecord& update = result.updates[index];
      EXPECT_LE(update.staleness, proven) << "bound " << bound << ", update " << index;
      // When worker w pulled for step s it had pushed s - 1 and every running worker at least s - 1 - K.
      for (std::size_t other = 0; other < kWorkers; ++other) {
        const bool running = after[index][other] < result.worker_steps[other];
        if (running) {
          EXPECT_GE(after[index][other], update.worker_step - 1 - bound) << "bound " << bound;
        }
      }
    }
    EXPECT_LE(staleness_stats(result.updates).max, proven);
  }
}

TEST(ParameterServer, WithoutABoundASlowWorkerHoldsNobodyBack) {
  for (const std::optional<std::int64_t> bound : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{1}}) {
    device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
    const data::Dataset train = synthetic(manager, 512, 11);  // 16 batches per worker
    std::unique_ptr<Sequential> model =
        compiled(manager, Strategy::parameter_server({"sim:0", "sim:1"}, "cpu:0", bound));
    ParameterServerOptions options{.fit = {.epochs = 1}};
    options.before_step = [](std::int32_t worker, std::int64_t) {
      if (worker == 1) std::this_thread::sleep_for(std::chrono::milliseconds(40));
    };
    const ParameterServerResult result = fit_parameter_server(*model, train, options);
    const std::vector<std::vector<std::int64_t>> after = progress(result.updates, 2);
    std::int64_t slow_when_fast_ended = -1;
    for (std::size_t index = 0; index < result.updates.size(); ++index) {
      if (result.updates[index].worker == 0 && after[index][0] == 16) slow_when_fast_ended = after[index][1];
    }
    ASSERT_GE(slow_when_fast_ended, 0);
    if (!bound) {
      EXPECT_LT(slow_when_fast_ended, 8) << "the fast worker waited for the slow one";
    } else {
      EXPECT_GE(slow_when_fast_ended, 16 - *bound - 1) << "the fast worker ran past the staleness bound";
    }
  }
}

void expect_refused(device::DeviceManager& manager, const Strategy& strategy, const std::string& words,
                    CompileOptions options = {}) {
  try {
    compiled(manager, strategy, options);
    ADD_FAILURE() << "accepted; expected an error mentioning '" << words << "'";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(ParameterServer, BadStrategiesAreRefusedByName) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  expect_refused(manager, Strategy::parameter_server({}, "cpu:0"), "at least one worker");
  expect_refused(manager, Strategy::parameter_server({"sim:0"}, "sim:0"), "both the parameter device and a worker");
  expect_refused(manager, Strategy::parameter_server({"sim:0", "sim:0"}), "listed twice");
  expect_refused(manager, Strategy::parameter_server({"sim:7"}), "sim:7");
  expect_refused(manager, Strategy::parameter_server({"sim:0"}, "sim:9"), "sim:9");
  expect_refused(manager, Strategy::parameter_server({"sim:0"}, "cpu:0", -1), "max_staleness -1");
  expect_refused(manager, Strategy::parameter_server({"sim:0"}), "float32",
                 {.policy = DTypePolicy::from_name("mixed_float16")});
  Strategy sharded = Strategy::parameter_server({"sim:0", "sim:1"});
  sharded.shard = Shard::optimizer;
  expect_refused(manager, sharded, "shard");

  std::unique_ptr<Sequential> model = compiled(manager, Strategy::parameter_server({"sim:0"}));
  const testing::Data data = testing::synthetic_batch(manager, 8, kIn, kClasses, 1);
  EXPECT_THROW(model->train_step(data.x, data.labels, 1), InvalidArgument);
  std::unique_ptr<Sequential> mirrored = compiled(manager, Strategy::mirrored({"sim:0", "sim:1"}));
  EXPECT_THROW(fit_parameter_server(*mirrored, synthetic(manager, 32, 1)), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Accelerators, ParameterServerOnDevice,
                         ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::train
