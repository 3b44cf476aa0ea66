// SPDX-License-Identifier: Apache-2.0
// ZeRO (Strategy::shard): sharded optimizer state (ZeRO-1) and gradients (ZeRO-2) train like the unsharded
// mirrored strategy (within float tolerance), keep the replicas' parameters bitwise identical, hold 1/R of
// the optimizer state per device, checkpoint every shard, and refuse a strategy that cannot shard. The
// training comparison runs on every accelerator backend present (sim, and opencl where an OpenCL device
// exists: three opencl devices on PoCL's one).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/support/synthetic_training.hpp"

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kHidden = 31, kClasses = 4, kRows = 36;
// Parameters laid end to end: 12x31 + 31 + 31x4 + 4 = 531 elements, not a multiple of 2 or 3 (padding).
constexpr std::int64_t kParameters = kIn * kHidden + kHidden + kHidden * kClasses + kClasses;

// Three devices of every accelerator kind: sim:0..2, and opencl:0..2 on the OpenCL devices there are.
device::DeviceManagerOptions three_sim_devices() {
  device::DeviceManagerOptions options = runtime::testing::two_sim_devices();
  options.sim_devices = 3;
  options.opencl_devices = 3;
  return options;
}

using testing::Data;

// `loud`: the last feature x1000, so that under float16 only its weights' gradients (and the layer after's)
// overflow a moderate loss scale, not the first replica's chunk.
Data batch(device::DeviceManager& manager, std::uint32_t seed, bool loud = false) {
  auto made = runtime::testing::make_batch(kRows, kIn, kClasses, seed);
  for (std::int64_t row = 0; loud && row < kRows; ++row) made.x[static_cast<std::size_t>(row * kIn + kIn - 1)] *= 1000;
  return runtime::testing::host_batch(manager, made, kIn);
}

Sequential mlp() {
  return Sequential({kIn}, {{.units = kHidden, .activation = Activation::relu},
                            {.units = kClasses, .activation = Activation::softmax}});
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<std::pair<std::string, std::vector<float>>> parameters;  // replica 0's, by base name
};

TrainedRun train(device::DeviceManager& manager, const Strategy& strategy, const Optimizer& optimizer, int steps = 8) {
  Sequential model = mlp();
  model.compile({.optimizer = optimizer}, strategy, {.devices = &manager});
  TrainedRun run;
  for (int step = 1; step <= steps; ++step) {
    const Data data = batch(manager, static_cast<std::uint32_t>(step % 5));
    run.losses.push_back(model.train_step(data.x, data.labels, step).loss);
  }
  const std::size_t replicas = strategy.devices.size();
  for (const std::string& name : model.session().variable_names()) {
    if (name.rfind("replica_0/", 0) != 0 || name.find("adam") != std::string::npos ||
        name.find("momentum") != std::string::npos) {
      continue;
    }
    const std::vector<float> values = model.session().read_variable(name).to_vector<float>();
    for (std::size_t replica = 1; replica < replicas; ++replica) {
      const std::string twin = "replica_" + std::to_string(replica) + "/" + name.substr(10);
      EXPECT_EQ(model.session().read_variable(twin).to_vector<float>(), values) << name << " and " << twin;
    }
    run.parameters.emplace_back(name.substr(10), values);
  }
  return run;
}

void expect_close(const TrainedRun& sharded, const TrainedRun& mirrored, const std::string& what) {
  ASSERT_EQ(sharded.losses.size(), mirrored.losses.size());
  for (std::size_t step = 0; step < sharded.losses.size(); ++step) {
    EXPECT_NEAR(sharded.losses[step], mirrored.losses[step], 1e-5 * (1 + std::abs(mirrored.losses[step])))
        << what << " step " << step + 1;
  }
  ASSERT_EQ(sharded.parameters.size(), mirrored.parameters.size()) << what;
  for (std::size_t index = 0; index < sharded.parameters.size(); ++index) {
    ASSERT_EQ(sharded.parameters[index].first, mirrored.parameters[index].first);
    const auto& a = sharded.parameters[index].second;
    const auto& b = mirrored.parameters[index].second;
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], b[i], 1e-5F) << what << " " << sharded.parameters[index].first << "[" << i << "]";
    }
  }
}

// The parameter: the first accelerator of the kind under test ("sim:0", "opencl:0").
class ShardedTrainingOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  // Device `index` of the parameter's kind.
  std::string on(int index) const { return GetParam().substr(0, GetParam().find(':')) + ":" + std::to_string(index); }
};

TEST_P(ShardedTrainingOnDevice, Zero1AndZero2MatchUnshardedMirroredTraining) {
  for (const auto& devices : {std::vector<std::string>{on(0), on(1)}, {on(0), on(1), on(2)}}) {
    for (const Optimizer& optimizer : {Optimizer{Adam{.learning_rate = 0.01}}, Optimizer{Sgd{.momentum = 0.9}}}) {
      for (const char* algorithm : {"ring", "reduce_to_one"}) {
        device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
        const TrainedRun mirrored = train(manager, Strategy::mirrored(devices, algorithm), optimizer);
        EXPECT_LT(mirrored.losses.back(), mirrored.losses.front());
        for (const Shard shard : {Shard::optimizer, Shard::gradients}) {
          const std::string what = std::to_string(devices.size()) + " replicas, " + algorithm + ", " +
                                   std::string(name_of(shard)) +
                                   (std::holds_alternative<Adam>(optimizer) ? ", adam" : ", sgd");
          expect_close(train(manager, Strategy::mirrored(devices, algorithm, shard), optimizer), mirrored, what);
        }
      }
    }
  }
}

std::size_t variable_bytes(Sequential& model, const std::string& device) {
  for (const runtime::DevicePlan& plan : model.plan(kRows).devices) {
    if (plan.device == device) return plan.variable_bytes;
  }
  ADD_FAILURE() << "no plan for " << device;
  return 0;
}

TEST(ShardedTraining, EachDeviceHoldsItsShareOfTheOptimizerState) {
  for (std::size_t replicas : {2, 3}) {
    device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
    std::vector<std::string> devices;
    for (std::size_t index = 0; index < replicas; ++index) devices.push_back("sim:" + std::to_string(index));
    const std::size_t parameter_bytes = kParameters * sizeof(float);
    const std::size_t shard = (kParameters + replicas - 1) / replicas;
    for (const Shard mode : {Shard::none, Shard::optimizer, Shard::gradients}) {
      Sequential model = mlp();
      model.compile({}, Strategy::mirrored(devices, "ring", mode), {.devices = &manager});
      for (const std::string& device : devices) {
        const std::size_t state = variable_bytes(model, device) - parameter_bytes;  // Adam's m and v
        if (mode == Shard::none) {
          EXPECT_EQ(state, 2 * parameter_bytes) << device;
        } else {  // 1/R of it, rounded up to whole elements: at most R - 1 padding elements per slot
          EXPECT_EQ(state, 2 * shard * sizeof(float)) << device << " " << name_of(mode);
          EXPECT_LE(state * replicas, 2 * (parameter_bytes + (replicas - 1) * sizeof(float)));
        }
      }
    }
  }
}

// The updates read their chunks in the gradient collective's bucket: per device the collective's outputs are one
// bucket of every gradient and the ring's working space, no unpacked copy of each reduced gradient (ZeRO-1) and
// no separate shard (ZeRO-2).
TEST(ShardedTraining, TheUpdatesReadTheReducedBucketWithoutCopies) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  const std::vector<std::string> devices{"sim:0", "sim:1"};
  const std::size_t parameter_bytes = kParameters * sizeof(float);
  const std::size_t scratch_bytes = (kParameters + 1) / 2 * sizeof(float);
  for (const Shard mode : {Shard::optimizer, Shard::gradients}) {
    Sequential model = mlp();
    Strategy strategy = Strategy::mirrored(devices, "ring", mode);
    strategy.fuse_update = false;  // folded into the update there is no bucket (fused_update_test)
    model.compile({}, strategy, {.devices = &manager});
    std::map<std::string, std::size_t> collective_bytes;
    for (const runtime::PlannedTensor& tensor : model.plan(kRows).tensors) {
      if (tensor.name.starts_with("all_reduce/gradients:") || tensor.name.starts_with("reduce_scatter/gradients:")) {
        collective_bytes[tensor.device] += tensor.bytes;
      }
    }
    for (const std::string& device : devices) {
      EXPECT_EQ(collective_bytes[device], parameter_bytes + scratch_bytes) << device << " " << name_of(mode);
    }
  }
}

TEST(ShardedTraining, CheckpointStateHoldsEveryShardAndRestoresIt) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  const Strategy strategy = Strategy::mirrored({"sim:0", "sim:1"}, "ring", Shard::gradients);
  Sequential model = mlp();
  model.compile({}, strategy, {.devices = &manager});
  for (int step = 1; step <= 3; ++step) {
    const Data data = batch(manager, static_cast<std::uint32_t>(step));
    model.train_step(data.x, data.labels, step);
  }
  const auto saved = model.variables();
  std::vector<std::string> names;
  for (const auto& [name, tensor] : saved) names.push_back(name);
  for (const char* expected :
       {"dense/kernel", "dense_1/bias", "shard_0/adam_m", "shard_0/adam_v", "shard_1/adam_m", "shard_1/adam_v"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  Sequential restored = mlp();
  restored.compile({}, strategy, {.devices = &manager});
  restored.assign_variables(saved);
  const Data data = batch(manager, 4);
  EXPECT_EQ(restored.train_step(data.x, data.labels, 4).loss, model.train_step(data.x, data.labels, 4).loss);
  EXPECT_EQ(restored.session().read_variable("shard_1/adam_v").to_vector<float>(),
            model.session().read_variable("shard_1/adam_v").to_vector<float>());
}

// mixed_float16 with a loss scale under which the first steps overflow in some chunks only (the last
// feature's weight gradients and the output layer's, not replica 0's chunk): every mode skips the same steps
// (ZeRO-2 decides from the all-reduced chunk flags, not each replica from its own chunk) and halves the scale
// alike, then trains alike.
TEST(ShardedTraining, LossScaledMixedPrecisionSkipsTheSameStepsInEveryMode) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  const std::vector<std::string> devices = {"sim:0", "sim:1", "sim:2"};
  std::vector<std::vector<double>> losses;
  std::vector<LossScaleState> states;
  for (const Shard shard : {Shard::none, Shard::optimizer, Shard::gradients}) {
    Sequential model = mlp();
    model.compile({.optimizer = Adam{.learning_rate = 0.01},
                   .policy = DTypePolicy::mixed_float16(),
                   .loss_scale = {.initial_scale = 4096.0}},
                  Strategy::mirrored(devices, "ring", shard), {.devices = &manager});
    std::vector<double> run;
    for (int step = 1; step <= 8; ++step) {
      const Data data = batch(manager, static_cast<std::uint32_t>(step % 5), true);
      run.push_back(model.train_step(data.x, data.labels, step).loss);
    }
    losses.push_back(run);
    states.push_back(*model.loss_scale_state());
  }
  EXPECT_GT(states[0].skipped_steps, 0) << "the loss scale never overflowed; the test checks nothing";
  EXPECT_LT(states[0].skipped_steps, 8) << "every step was skipped; the test checks nothing";
  for (std::size_t mode = 1; mode < states.size(); ++mode) {
    EXPECT_EQ(states[mode].skipped_steps, states[0].skipped_steps) << "mode " << mode;
    EXPECT_EQ(states[mode].scale, states[0].scale) << "mode " << mode;
    for (std::size_t step = 0; step < losses[0].size(); ++step) {
      EXPECT_NEAR(losses[mode][step], losses[0][step], 1e-4 * (1 + std::abs(losses[0][step])))
          << "mode " << mode << " step " << step + 1;
    }
  }
}

TEST(ShardedTraining, ShardingNeedsMirroredOverSeveralDevicesAndAKnownMode) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  Sequential model = mlp();
  Strategy one = Strategy::one_device("sim:0");
  one.shard = Shard::optimizer;
  try {
    model.compile({}, one, {.devices = &manager});
    FAIL() << "sharding one device was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("shard = optimizer"), std::string::npos) << error.what();
  }
  try {
    parse_shard("zero3");
    FAIL() << "an unknown shard mode was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("'zero3'"), std::string::npos) << error.what();
  }
  EXPECT_EQ(parse_shard("gradients"), Shard::gradients);
}

INSTANTIATE_TEST_SUITE_P(Accelerators, ShardedTrainingOnDevice,
                         ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::train
