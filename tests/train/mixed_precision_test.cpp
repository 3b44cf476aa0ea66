// SPDX-License-Identifier: Apache-2.0
// Mixed precision end to end on a small synthetic problem: where the graph puts the casts for each policy
// (per model and per layer), a forced float16 overflow that skips the step and halves the scale (and Adam's
// step not counting it), gradients that underflow float16 unless the loss is scaled, training that lowers the
// loss (one device and mirrored, replicas bitwise equal), a step that runs from its memory plan on every
// accelerator, and the loss-scale state through a checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "tensorpool/train/fit.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/model_graph.hpp"
#include "train/support/synthetic_training.hpp"

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kClasses = 4, kRows = 32;

using testing::Data;

Data batch(device::DeviceManager& manager, std::uint32_t seed, std::int64_t rows = kRows) {
  return testing::synthetic_batch(manager, rows, kIn, kClasses, seed);
}

std::vector<Dense> mlp_layers(std::optional<DTypePolicy> last = std::nullopt) {
  return {{.units = 32, .activation = Activation::relu},
          {.units = kClasses, .activation = Activation::softmax, .policy = last}};
}

DType dtype_of_node(const graph::Graph& graph, const std::string& name) {
  const std::optional<graph::NodeId> id = graph.find(name);
  EXPECT_TRUE(id.has_value()) << "no node " << name;
  return id ? graph.node(*id).outputs.at(0).dtype : DType::boolean;
}

TEST(MixedPrecision, CastsAndDtypesFollowThePolicy) {
  const ModelGraph f16 = build_model_graph(
      {.input_shape = {kIn}, .layers = mlp_layers(), .policy = DTypePolicy::mixed_float16()}, {"sim:0"});
  const graph::Graph& g = f16.graph;
  EXPECT_EQ(f16.input_dtype, DType::f16);
  EXPECT_EQ(dtype_of_node(g, "x"), DType::f16) << "the batch is fed in the compute dtype";
  EXPECT_EQ(dtype_of_node(g, "dense/kernel"), DType::f32) << "master weights stay float32";
  EXPECT_EQ(dtype_of_node(g, "dense/kernel/Cast"), DType::f16);
  EXPECT_EQ(dtype_of_node(g, "dense/MatMul"), DType::f16);
  EXPECT_EQ(dtype_of_node(g, "dense/Relu"), DType::f16);
  EXPECT_EQ(dtype_of_node(g, "dense_1/Cast_output"), DType::f32);
  EXPECT_EQ(dtype_of_node(g, "dense_1/Softmax"), DType::f32) << "softmax and the loss in float32";
  EXPECT_EQ(dtype_of_node(g, "loss"), DType::f32);
  EXPECT_EQ(f16.loss_scale, "loss_scale");
  ASSERT_TRUE(g.find("dense/kernel/ApplyAdam").has_value());
  EXPECT_EQ(g.node(*g.find("dense/kernel/ApplyAdam")).op, "ApplyAdamIf") << "the update is gated on AllFinite";
  // The weight gradients stay in the compute dtype (and scaled) up to the float32 update, which unscales them
  // by the factor all_finite / scale as it reads them.
  ASSERT_EQ(f16.replicas[0].gradients.size(), 4U);
  for (const std::string& gradient : f16.replicas[0].gradients) EXPECT_EQ(dtype_of_node(g, gradient), DType::f16);
  const graph::Node& update = g.node(*g.find("dense/kernel/ApplyAdam"));
  EXPECT_EQ(g.type_of(update.inputs[1]).dtype, DType::f16) << "the update reads the 16-bit gradient";
  EXPECT_EQ(g.node(update.inputs[4].node).name, "loss_scale/update_factor");
  EXPECT_EQ(g.node(update.inputs[4].node).op, "Div");
  for (const graph::Node& node : g.nodes()) {
    EXPECT_FALSE(node.op == "Cast" && node.outputs[0].dtype == DType::f32 && node.name.starts_with("gradients/"))
        << node.name << ": no float32 copy of a weight gradient";
  }

  const ModelGraph bf16 = build_model_graph(
      {.input_shape = {kIn}, .layers = mlp_layers(), .policy = DTypePolicy::mixed_bfloat16()}, {"sim:0"});
  EXPECT_EQ(dtype_of_node(bf16.graph, "dense/MatMul"), DType::bf16);
  EXPECT_TRUE(bf16.loss_scale.empty()) << "bfloat16 needs no loss scaling";
  ASSERT_TRUE(bf16.graph.find("dense/kernel/ApplyAdam").has_value());
  EXPECT_EQ(bf16.graph.node(*bf16.graph.find("dense/kernel/ApplyAdam")).op, "ApplyAdam");

  // Per layer, as Keras's dtype=: the output layer in float32 casts its float16 input back.
  const ModelGraph mixed = build_model_graph(
      {.input_shape = {kIn}, .layers = mlp_layers(DTypePolicy::float32()), .policy = DTypePolicy::mixed_float16()},
      {"sim:0"});
  EXPECT_EQ(dtype_of_node(mixed.graph, "dense/MatMul"), DType::f16);
  EXPECT_EQ(dtype_of_node(mixed.graph, "dense_1/Cast"), DType::f32);
  EXPECT_EQ(dtype_of_node(mixed.graph, "dense_1/MatMul"), DType::f32);
  EXPECT_FALSE(mixed.graph.find("dense_1/kernel/Cast").has_value());
  EXPECT_EQ(dtype_of_node(mixed.graph, mixed.replicas[0].gradients[0]), DType::f16);
  EXPECT_EQ(dtype_of_node(mixed.graph, mixed.replicas[0].gradients[2]), DType::f32) << "the float32 layer's";
  // Mirrored with two gradient dtypes: one AllReduce (one bucket) per dtype.
  const ModelGraph mixed_mirrored = build_model_graph(
      {.input_shape = {kIn}, .layers = mlp_layers(DTypePolicy::float32()), .policy = DTypePolicy::mixed_float16()},
      {"sim:0", "sim:1"});
  EXPECT_TRUE(mixed_mirrored.graph.find("all_reduce/gradients_float16").has_value());
  EXPECT_TRUE(mixed_mirrored.graph.find("all_reduce/gradients_float32").has_value());

  const ModelGraph f32 = build_model_graph({.input_shape = {kIn}, .layers = mlp_layers()}, {"sim:0"});
  for (const graph::Node& node : f32.graph.nodes()) EXPECT_NE(node.op, "Cast") << "float32 adds no cast";
}

TEST(MixedPrecision, PlanShowsHalvedActivationsAndTheCasts) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  // Wide enough that the float32 loss tensors ([B, 4]) are small next to the hidden layer, as in the MLP.
  const std::vector<Dense> wide{{.units = 256, .activation = Activation::relu},
                                {.units = kClasses, .activation = Activation::softmax}};
  Sequential f32({64}, wide);
  f32.compile({}, Strategy::one_device("sim:0"), {.name = "f32", .devices = &manager});
  Sequential f16({64}, wide);
  f16.compile({.policy = DTypePolicy::mixed_float16()}, Strategy::one_device("sim:0"),
              {.name = "f16", .devices = &manager});
  const runtime::MemoryPlan plan32 = f32.plan(256), plan16 = f16.plan(256);
  const auto cast = std::find_if(plan16.tensors.begin(), plan16.tensors.end(),
                                 [](const auto& tensor) { return tensor.name == "dense/kernel/Cast:0"; });
  ASSERT_NE(cast, plan16.tensors.end()) << "the variable's cast is a planned tensor";
  EXPECT_EQ(cast->dtype, "float16");
  EXPECT_EQ(cast->bytes, static_cast<std::size_t>(64 * 256 * 2));
  const StepBytes bytes32 = f32.step_bytes(plan32, "sim:0"), bytes16 = f16.step_bytes(plan16, "sim:0");
  EXPECT_GT(bytes32.activation_bytes, 0U);
  EXPECT_NEAR(static_cast<double>(bytes16.activation_bytes) / static_cast<double>(bytes32.activation_bytes), 0.5, 0.05);
  EXPECT_NEAR(
      static_cast<double>(bytes16.activation_gradient_bytes) / static_cast<double>(bytes32.activation_gradient_bytes),
      0.5, 0.05);
  EXPECT_NEAR(static_cast<double>(bytes16.weight_gradient_bytes) / static_cast<double>(bytes32.weight_gradient_bytes),
              0.5, 0.05)
      << "weight gradients stay 16-bit up to the update";
}

// Mirrored: the AllReduce bucket (and its working space) is 16-bit too, so every gradient byte halves; with
// ZeRO-2 the reduced shards as well.
TEST(MixedPrecision, MirroredWeightGradientsHalve) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const std::vector<Dense> wide{{.units = 256, .activation = Activation::relu},
                                {.units = kClasses, .activation = Activation::softmax}};
  for (const Shard shard : {Shard::none, Shard::gradients}) {
    SCOPED_TRACE(std::string(name_of(shard)));
    Sequential f32({64}, wide), f16({64}, wide);
    // Both with the AllReduce's bucket: float32 would otherwise fold it into the update (loss scaling keeps it).
    Strategy strategy = Strategy::mirrored({"sim:0", "sim:1"}, "ring", shard);
    strategy.fuse_update = false;
    f32.compile({}, strategy, {.name = "f32" + std::string(name_of(shard)), .devices = &manager});
    f16.compile({.policy = DTypePolicy::mixed_float16()}, strategy,
                {.name = "f16" + std::string(name_of(shard)), .devices = &manager});
    const StepBytes bytes32 = f32.step_bytes(f32.plan(32), "sim:1"), bytes16 = f16.step_bytes(f16.plan(32), "sim:1");
    EXPECT_GT(bytes32.weight_gradient_bytes, 64U * 256U * 4U);
    EXPECT_NEAR(static_cast<double>(bytes16.weight_gradient_bytes) / static_cast<double>(bytes32.weight_gradient_bytes),
                0.5, 0.05);
  }
}

// Two devices of every accelerator kind: sim:0 and sim:1, opencl:0 and opencl:1 (on PoCL's one device).
device::DeviceManagerOptions two_of_each() {
  device::DeviceManagerOptions options = runtime::testing::two_sim_devices();
  options.opencl_devices = 2;
  return options;
}

// The training cases run on every accelerator backend present; the parameter is the first device of the
// kind under test ("sim:0", "opencl:0").
class MixedPrecisionOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  // Device `index` of the parameter's kind.
  std::string on(int index) const { return GetParam().substr(0, GetParam().find(':')) + ":" + std::to_string(index); }
};

// An initial scale of 2^40 makes the float16 logits' gradient overflow: the step updates nothing and the scale
// halves, until it is small enough. The first step that runs then equals one step of a model started at that
// scale: Adam's step counter did not count the skipped ones.
TEST_P(MixedPrecisionOnDevice, OverflowSkipsTheStepAndHalvesTheScale) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  Sequential model({kIn}, mlp_layers());
  model.compile({.policy = DTypePolicy::mixed_float16(), .loss_scale = {.initial_scale = 0x1p40}},
                Strategy::one_device(on(0)), {.devices = &manager});
  const Data data = batch(manager, 1);
  model.train_step(data.x, data.labels, 1);  // creates the variables; skipped
  EXPECT_EQ(*model.loss_scale_state(), (LossScaleState{.scale = 0x1p39, .good_steps = 0, .skipped_steps = 1}));
  const auto before = model.variables();
  const auto slot =
      std::find_if(before.begin(), before.end(), [](const auto& v) { return v.first == "dense/kernel/adam_m"; });
  ASSERT_NE(slot, before.end());
  const std::vector<float> adam_m = slot->second.to_vector<float>();
  EXPECT_TRUE(std::all_of(adam_m.begin(), adam_m.end(), [](float m) { return m == 0.0F; })) << "no update ran";
  model.train_step(data.x, data.labels, 2);
  EXPECT_EQ(*model.loss_scale_state(), (LossScaleState{.scale = 0x1p38, .good_steps = 0, .skipped_steps = 2}));
  const auto after = model.variables();
  for (std::size_t index = 0; index + 3 < before.size(); ++index) {  // the last three are the loss scale's
    EXPECT_EQ(before[index].second.to_vector<float>(), after[index].second.to_vector<float>())
        << before[index].first << " changed on a skipped step";
  }
  std::int64_t step = 2;
  while (model.loss_scale_state()->skipped_steps == step && step < 40) model.train_step(data.x, data.labels, ++step);
  const LossScaleState state = *model.loss_scale_state();
  ASSERT_EQ(state.skipped_steps, step - 1) << "one step finally ran";
  EXPECT_LT(state.scale, 0x1p25);
  EXPECT_EQ(state.good_steps, 1);
  Sequential fresh({kIn}, mlp_layers());
  fresh.compile({.policy = DTypePolicy::mixed_float16(), .loss_scale = {.initial_scale = state.scale}},
                Strategy::one_device(on(0)), {.name = "fresh", .devices = &manager});
  fresh.train_step(data.x, data.labels, 1);
  const auto ran = model.variables(), reference = fresh.variables();
  for (std::size_t index = 0; index + 3 < ran.size(); ++index) {
    EXPECT_EQ(ran[index].second.to_vector<float>(), reference[index].second.to_vector<float>()) << ran[index].first;
  }
  EXPECT_NE(ran[0].second.to_vector<float>(), before[0].second.to_vector<float>());
}

// A step's loss scale follows from the previous step's gradients, so a step cannot be launched before the
// previous one is read: launch_train_step refuses; fit() runs such steps one at a time whatever
// steps_in_flight asks, and trains exactly as with steps_in_flight = 1.
TEST_P(MixedPrecisionOnDevice, LossScaledStepsAreNeverLaunchedAhead) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  const Data data = batch(manager, 1);
  std::vector<std::vector<float>> kernels;
  for (const std::int64_t in_flight : {1, 2}) {
    Sequential model({kIn}, mlp_layers());
    model.compile({.policy = DTypePolicy::mixed_float16(), .loss_scale = {.initial_scale = 0x1p40}},
                  Strategy::one_device(on(0)), {.name = "in_flight_" + std::to_string(in_flight), .devices = &manager});
    EXPECT_THROW(model.launch_train_step(data.x, data.labels, 1), InvalidArgument);
    const data::Dataset train = data::Dataset::from_tensors(data.x, data.labels)
                                    .batch(data.x.shape().dim(0) / 4)
                                    .stage_on(manager.device("cpu:0"));
    fit(model, train, {.epochs = 3, .steps_in_flight = in_flight});
    EXPECT_EQ(model.loss_scale_state()->skipped_steps + model.loss_scale_state()->good_steps, 12);
    kernels.push_back(model.session().read_variable("dense/kernel").to_vector<float>());
  }
  EXPECT_EQ(kernels[0], kernels[1]);
}

// Inputs of 1..4 x 2^-24 (float16's smallest subnormals) give kernel gradients of +-0.125 or +-0.375 x 2^-24:
// below half float16's smallest subnormal, they flush to zero unless the loss is scaled; scaled by 2^15 they
// match float32 within float16 precision.
TEST_P(MixedPrecisionOnDevice, UnderflowingGradientsAreRescuedByLossScaling) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  device::Device& cpu = manager.device("cpu:0");
  constexpr std::int64_t kRowsHere = 4, kInHere = 3;
  const std::vector<Dense> layers{{.units = kClasses, .activation = Activation::softmax}};
  std::vector<float> tiny;
  for (std::int64_t row = 0; row < kRowsHere; ++row)
    tiny.insert(tiny.end(), kInHere, 0x1p-24F * static_cast<float>(row + 1));
  const std::vector<std::int32_t> labels{0, 1, 2, 3};
  const auto kernel_gradient = [&](DTypePolicy policy, float scale) {
    const ModelGraph model = build_model_graph({.input_shape = {kInHere}, .layers = layers, .policy = policy}, {on(0)});
    runtime::Session session(model.graph, {.name = std::string(policy.name()), .devices = &manager});
    const float inverse = 1.0F / kRowsHere;
    runtime::FeedMap feeds;
    feeds["x"] = ops::cast(Tensor::from_vector<float>(tiny, Shape{kRowsHere, kInHere}, cpu), model.input_dtype);
    feeds["labels"] = Tensor::from_vector<std::int32_t>(labels, Shape{kRowsHere}, cpu);
    feeds[model.inv_global_batch] = Tensor::from_vector<float>(std::span<const float>(&inverse, 1), Shape{}, cpu);
    if (!model.loss_scale.empty()) {
      feeds[model.loss_scale] = Tensor::from_vector<float>(std::span<const float>(&scale, 1), Shape{}, cpu);
    }
    // The gradient in the compute dtype, still scaled: widened and unscaled here as the update does.
    const Tensor gradient = session.run(feeds, {model.replicas[0].gradients[0]})[0];
    std::vector<float> values = ops::cast(gradient, DType::f32).to_vector<float>();
    for (float& value : values) value /= scale;
    return values;
  };
  const std::vector<float> reference = kernel_gradient(DTypePolicy::float32(), 1.0F);
  const std::vector<float> unscaled = kernel_gradient(DTypePolicy::mixed_float16(), 1.0F);
  const std::vector<float> scaled = kernel_gradient(DTypePolicy::mixed_float16(), 32768.0F);
  ASSERT_EQ(reference.size(), static_cast<std::size_t>(kInHere * kClasses));
  for (std::size_t i = 0; i < reference.size(); ++i) {
    ASSERT_NE(reference[i], 0.0F) << "float32 keeps the gradient";
    EXPECT_EQ(unscaled[i], 0.0F) << "float16 flushes it without scaling";
    EXPECT_NEAR(scaled[i], reference[i], 2e-3 * std::fabs(reference[i])) << "element " << i;
  }
}

// A mixed-precision step keeps the planner's promise on every accelerator: the device's peak is the plan's to
// the byte, and steps after the first make no call into the device's allocator (a 16-bit kernel that took
// float32 scratch from the device's memory would break both).
TEST_P(MixedPrecisionOnDevice, TheStepRunsFromItsPlanWithNoAllocations) {
  for (const DTypePolicy policy : {DTypePolicy::mixed_float16(), DTypePolicy::mixed_bfloat16()}) {
    SCOPED_TRACE(::testing::Message() << policy.name() << " on " << on(0));
    device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
    device::Device& accelerator = manager.device(on(0));
    const ModelGraph model =
        build_model_graph({.input_shape = {kIn}, .layers = mlp_layers(), .policy = policy}, {on(0)});
    runtime::Session session(model.graph, {.name = std::string(policy.name()), .devices = &manager});
    const std::string& loss = model.replicas[0].loss;
    runtime::FeedTypes types = {{"x", {model.input_dtype, {kRows, kIn}}},
                                {"labels", {DType::i32, {kRows}}},
                                {model.inv_global_batch, {DType::f32, {}}}};
    if (!model.loss_scale.empty()) types[model.loss_scale] = {DType::f32, {}};
    const runtime::MemoryPlan plan = session.plan(types, {loss}, model.updates);
    const auto planned = std::find_if(plan.devices.begin(), plan.devices.end(),
                                      [&](const runtime::DevicePlan& device) { return device.device == on(0); });
    ASSERT_NE(planned, plan.devices.end()) << "no plan for " << on(0);

    device::Device& cpu = manager.device("cpu:0");
    const Data data = batch(manager, 1);
    const float inverse = 1.0F / kRows, scale = 1024.0F;
    runtime::FeedMap feeds;
    feeds["x"] = ops::cast(data.x, model.input_dtype);
    feeds["labels"] = data.labels;
    feeds[model.inv_global_batch] = Tensor::from_vector<float>(std::span<const float>(&inverse, 1), Shape{}, cpu);
    if (!model.loss_scale.empty()) {
      feeds[model.loss_scale] = Tensor::from_vector<float>(std::span<const float>(&scale, 1), Shape{}, cpu);
    }
    accelerator.memory().reset_peak();
    session.run(feeds, {loss}, model.updates, {.step = 1});
    EXPECT_EQ(accelerator.memory().stats().peak_bytes_requested, planned->planned_peak_bytes);
    const std::uint64_t allocations = accelerator.memory().stats().num_allocs;
    for (int step = 2; step <= 4; ++step) session.run(feeds, {loss}, model.updates, {.step = step});
    EXPECT_EQ(accelerator.memory().stats().num_allocs, allocations) << "steady-state steps called the allocator";
  }
}

std::vector<double> train(Sequential& model, device::DeviceManager& manager, int steps) {
  return testing::train_synthetic(model, manager, steps, kRows, kIn, kClasses);
}

TEST_P(MixedPrecisionOnDevice, TrainingLowersTheLossLikeFloat32) {
  device::DeviceManager manager(two_of_each(), runtime::testing::kNoEnv);
  Sequential reference({kIn}, mlp_layers());
  reference.compile({.optimizer = Adam{.learning_rate = 0.01}}, Strategy::one_device(on(0)),
                    {.name = "float32", .devices = &manager});
  const std::vector<double> reference_losses = train(reference, manager, 60);
  int run = 0;
  for (const DTypePolicy policy : {DTypePolicy::mixed_float16(), DTypePolicy::mixed_bfloat16()}) {
    for (const Strategy& strategy : {Strategy::one_device(on(0)), Strategy::mirrored({on(0), on(1)})}) {
      SCOPED_TRACE(::testing::Message() << policy.name() << " on " << strategy.devices.size() << " device(s)");
      Sequential model({kIn}, mlp_layers());
      model.compile({.optimizer = Adam{.learning_rate = 0.01}, .policy = policy}, strategy,
                    {.name = "run" + std::to_string(run++), .devices = &manager});
      const std::vector<double> losses = train(model, manager, 60);
      EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << " last " << losses.back();
      for (std::size_t step = 0; step < losses.size(); step += 10) {
        EXPECT_NEAR(losses[step], reference_losses[step], 0.05 + 0.05 * reference_losses[step]) << "step " << step;
      }
      const Data held_out = batch(manager, 99, 200);
      EXPECT_GT(model.test_step(held_out.x, held_out.labels).correct / 200.0, 0.7);
      if (model.replicas() == 2) {
        EXPECT_EQ(model.session().read_variable("replica_0/dense/kernel").to_vector<float>(),
                  model.session().read_variable("replica_1/dense/kernel").to_vector<float>())
            << "mirrored replicas stay bitwise identical";
      }
    }
  }
}

TEST(MixedPrecision, LossScaleStateIsCheckpointed) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  Sequential model({kIn}, mlp_layers());
  model.compile({.policy = DTypePolicy::mixed_float16(), .loss_scale = {.initial_scale = 0x1p40}},
                Strategy::one_device("sim:0"), {.devices = &manager});
  train(model, manager, 3);  // three overflows: scale 2^37, three skipped
  const LossScaleState saved = *model.loss_scale_state();
  EXPECT_EQ(saved, (LossScaleState{.scale = 0x1p37, .good_steps = 0, .skipped_steps = 3}));
  CheckpointState state;
  for (const auto& [name, tensor] : model.variables()) state.tensors[name] = to_host(tensor);
  EXPECT_TRUE(state.tensors.contains("loss_scale/current"));
  const std::filesystem::path directory = std::filesystem::temp_directory_path() / "tp_mixed_precision_checkpoint";
  std::filesystem::remove_all(directory);
  save_checkpoint(directory, state);
  const CheckpointState loaded = *load_latest_checkpoint(directory);
  std::filesystem::remove_all(directory);
  Sequential restored({kIn}, mlp_layers());
  restored.compile({.policy = DTypePolicy::mixed_float16(), .loss_scale = {.initial_scale = 0x1p40}},
                   Strategy::one_device("sim:0"), {.name = "restored", .devices = &manager});
  std::vector<std::pair<std::string, Tensor>> values;
  for (const auto& [name, host] : loaded.tensors) values.emplace_back(name, to_device(host, manager.device("cpu:0")));
  restored.assign_variables(values);
  EXPECT_EQ(*restored.loss_scale_state(), saved);
  values.erase(
      std::remove_if(values.begin(), values.end(), [](const auto& v) { return v.first == "loss_scale/good_steps"; }),
      values.end());
  try {
    restored.assign_variables(values);
    ADD_FAILURE() << "a state without the loss scale was accepted";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("loss_scale/good_steps"), std::string::npos) << error.what();
  }
}

TEST(MixedPrecision, BadLossScaleOptionsAreRejectedAtCompile) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  Sequential model({kIn}, mlp_layers());
  tp_test::expect_invalid(
      [&] {
        model.compile({.policy = DTypePolicy::mixed_float16(), .loss_scale = {.growth_interval = 0}},
                      Strategy::one_device("sim:0"), {.devices = &manager});
      },
      {"growth_interval 0"});
  Sequential bfloat({kIn}, mlp_layers());
  bfloat.compile({.policy = DTypePolicy::mixed_bfloat16()}, Strategy::one_device("sim:0"),
                 {.name = "bf16", .devices = &manager});
  EXPECT_FALSE(bfloat.loss_scale_state().has_value());
}

INSTANTIATE_TEST_SUITE_P(Accelerators, MixedPrecisionOnDevice,
                         ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::train
