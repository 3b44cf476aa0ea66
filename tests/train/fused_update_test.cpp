// SPDX-License-Identifier: Apache-2.0
// The mirrored Adam update with the gradients' all-reduce folded in (Strategy::fuse_update, the AllReduceAdam
// op, ops::adam_update_across_peers): it is taken exactly where it may be (Adam on sim devices, the ring, no
// loss scaling, no ZeRO), and it trains bitwise as AllReduce followed by ApplyAdam, over two and three
// replicas, with the same variable names (so checkpoints of either path restore into the other).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "device/support/device_test_support.hpp"
#include "ops/peer_sum.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/init.hpp"
#include "tensorpool/ops/optimizer.hpp"
#include "tensorpool/train/distribution_strategy.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/model_graph.hpp"
#include "train/support/synthetic_training.hpp"

namespace tp::train {
namespace {

using testing::expect_bitwise;
using testing::TrainedRun;

constexpr std::int64_t kIn = 12, kHidden = 31, kClasses = 4, kRows = 36;

std::vector<Dense> layers() {
  return {{.units = kHidden, .activation = Activation::relu}, {.units = kClasses, .activation = Activation::softmax}};
}

device::DeviceManagerOptions three_sim_devices() {
  device::DeviceManagerOptions options = runtime::testing::two_sim_devices();
  options.sim_devices = 3;
  return options;
}

std::size_t count_ops(const ModelGraph& model, const std::string& op) {
  std::size_t count = 0;
  for (const graph::Node& node : model.graph.nodes()) count += node.op == op ? 1 : 0;
  return count;
}

ModelSpec spec(bool fuse) {
  ModelSpec made{.input_shape = {kIn}, .layers = layers()};
  made.fuse_update = fuse;
  return made;
}

TEST(FusedUpdate, TakenForAdamOnSimDevicesOnly) {
  const std::vector<std::string> two = {"sim:0", "sim:1"};
  const ModelGraph fused = build_model_graph(spec(true), two);
  EXPECT_EQ(count_ops(fused, "AllReduceAdam"), 1U);
  EXPECT_EQ(count_ops(fused, "AllReduce"), 0U);
  EXPECT_EQ(count_ops(fused, "ApplyAdam"), 0U);
  EXPECT_EQ(fused.updates, std::vector<std::string>{"all_reduce_adam"});

  const ModelGraph plain = build_model_graph(spec(false), two);
  EXPECT_EQ(count_ops(plain, "AllReduceAdam"), 0U);
  EXPECT_EQ(count_ops(plain, "AllReduce"), 1U);
  EXPECT_EQ(count_ops(plain, "ApplyAdam"), 8U);  // 4 parameters x 2 replicas
  EXPECT_EQ(fused.variables, plain.variables);   // the same names, in the same order

  // Where the folded update does not apply, asking for it builds the AllReduce path.
  ModelSpec sgd = spec(true);
  sgd.optimizer = Sgd{};
  ModelSpec reduce_to_one = spec(true);
  reduce_to_one.all_reduce = AllReduce::reduce_to_one;
  ModelSpec scaled = spec(true);
  scaled.policy = DTypePolicy::mixed_float16();
  for (const auto& [what, other, devices] :
       {std::tuple{"sgd", sgd, two}, std::tuple{"reduce_to_one", reduce_to_one, two},
        std::tuple{"loss scaling", scaled, two},
        std::tuple{"cpu devices", spec(true), std::vector<std::string>{"cpu:0", "sim:0"}},
        std::tuple{"one device twice", spec(true), std::vector<std::string>{"sim:0", "sim:0"}}}) {
    EXPECT_EQ(count_ops(build_model_graph(other, devices), "AllReduceAdam"), 0U) << what;
  }
  EXPECT_EQ(count_ops(build_model_graph(spec(true), {"sim:0"}), "AllReduceAdam"), 0U);  // nothing to reduce

  // mixed_bfloat16 (no loss scaling): the folded update sums the bfloat16 gradients.
  ModelSpec bfloat16 = spec(true);
  bfloat16.policy = DTypePolicy::mixed_bfloat16();
  const ModelGraph mixed = build_model_graph(bfloat16, two);
  EXPECT_EQ(count_ops(mixed, "AllReduceAdam"), 1U);
  EXPECT_EQ(count_ops(mixed, "AllReduce"), 0U);
  EXPECT_EQ(count_ops(mixed, "ApplyAdam"), 0U);
}

TEST(FusedUpdate, FoldsBothZeroCollectivesIntoTheUpdate) {
  const std::vector<std::string> two = {"sim:0", "sim:1"};
  for (const Shard shard : {Shard::optimizer, Shard::gradients}) {
    ModelSpec fused_spec = spec(true), plain_spec = spec(false);
    fused_spec.shard = plain_spec.shard = shard;
    const ModelGraph fused = build_model_graph(fused_spec, two);
    const ModelGraph plain = build_model_graph(plain_spec, two);
    EXPECT_EQ(count_ops(fused, "AllReduceAdam"), 1U) << name_of(shard);
    for (const char* op : {"AllReduce", "ReduceScatter", "AllGather", "ApplyAdam"}) {
      EXPECT_EQ(count_ops(fused, op), 0U) << op << " " << name_of(shard);
    }
    EXPECT_EQ(count_ops(plain, "AllGather"), 1U) << name_of(shard);
    EXPECT_EQ(fused.variables, plain.variables) << name_of(shard);  // the same shard_<r>/adam_m, adam_v
  }
}

// float32 values uniform in [-1, 1) from `seed`, on `device`.
Tensor uniform_tensor(const Shape& shape, device::Device& device, std::uint64_t seed) {
  Tensor tensor = Tensor::empty(shape, DType::f32, device);
  ops::uniform(tensor, -1.0, 1.0, seed);
  return tensor;
}

TrainedRun train(device::DeviceManager& manager, std::vector<std::string> devices, bool fuse, Shard shard = Shard::none,
                 DTypePolicy policy = DTypePolicy::float32()) {
  Strategy strategy = Strategy::mirrored(std::move(devices), "ring", shard);
  strategy.fuse_update = fuse;
  Sequential model({kIn}, layers());
  model.compile({.policy = policy}, strategy, {.devices = &manager});
  return testing::record_training(model, manager, 6, kRows, kIn, kClasses);
}

TEST(FusedUpdate, TrainsBitwiseAsAllReduceThenApplyAdamOnTwoReplicas) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const TrainedRun plain = train(manager, {"sim:0", "sim:1"}, false);
  const TrainedRun fused = train(manager, {"sim:0", "sim:1"}, true);
  ASSERT_FALSE(fused.variables.empty());
  expect_bitwise(fused, plain);
}

TEST(FusedUpdate, TrainsBitwiseAsAllReduceThenApplyAdamOnThreeReplicas) {
  // Three addends: the sums' order (replica 0, 1, 2 on every replica) decides the bits.
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  const TrainedRun plain = train(manager, {"sim:0", "sim:1", "sim:2"}, false);
  const TrainedRun fused = train(manager, {"sim:0", "sim:1", "sim:2"}, true);
  expect_bitwise(fused, plain);
}

TEST(FusedUpdate, TrainsBitwiseAsTheZeroCollectivesOnTwoAndThreeReplicas) {
  // Sharded slots: each replica updates its chunk of the parameters laid end to end, which cuts parameters
  // across replicas, and keeps only that chunk's m and v.
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  for (const std::vector<std::string>& devices :
       {std::vector<std::string>{"sim:0", "sim:1"}, std::vector<std::string>{"sim:0", "sim:1", "sim:2"}}) {
    for (const Shard shard : {Shard::optimizer, Shard::gradients}) {
      SCOPED_TRACE(std::to_string(devices.size()) + " replicas, " + std::string(name_of(shard)));
      const TrainedRun plain = train(manager, devices, false, shard);
      const TrainedRun fused = train(manager, devices, true, shard);
      ASSERT_FALSE(fused.variables.empty());
      expect_bitwise(fused, plain);
    }
  }
}

TEST(FusedUpdate, TrainsBitwiseAsAllReduceThenApplyAdamOnBfloat16Gradients) {
  // mixed_bfloat16: every sum of two bfloat16 gradients is rounded once to bfloat16, as the AllReduce rounds it,
  // before the float32 update widens it; whole and sharded slots, two and three replicas.
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  for (const std::vector<std::string>& devices :
       {std::vector<std::string>{"sim:0", "sim:1"}, std::vector<std::string>{"sim:0", "sim:1", "sim:2"}}) {
    for (const Shard shard : {Shard::none, Shard::optimizer, Shard::gradients}) {
      SCOPED_TRACE(std::to_string(devices.size()) + " replicas, " + std::string(name_of(shard)));
      const TrainedRun plain = train(manager, devices, false, shard, DTypePolicy::mixed_bfloat16());
      const TrainedRun fused = train(manager, devices, true, shard, DTypePolicy::mixed_bfloat16());
      ASSERT_FALSE(fused.variables.empty());
      // The folded update keeps persistent bfloat16 copies (the plain path casts each step): each is its
      // parameter's cast; everything else is bitwise the plain path's.
      EXPECT_EQ(fused.variables.size(), plain.variables.size() + 4 * devices.size());
      expect_bitwise(testing::without_compute_copies(fused), plain);
    }
  }
}

TEST(FusedUpdate, OneBfloat16ReplicaKeepsComputeCopiesAndTrainsBitwiseAsApplyAdam) {
  // One device under mixed_bfloat16: AllReduceAdam over the one replica keeps the persistent copies, where
  // ApplyAdam would leave a Cast of every variable each step; nothing else changes, bit for bit.
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  ModelSpec mixed = spec(true);
  mixed.policy = DTypePolicy::mixed_bfloat16();
  const ModelGraph graph = build_model_graph(mixed, {"sim:0"});
  EXPECT_EQ(count_ops(graph, "AllReduceAdam"), 1U);
  EXPECT_EQ(count_ops(graph, "ApplyAdam"), 0U);
  EXPECT_EQ(graph.compute_copies.front(),
            (std::pair<std::string, std::string>{"dense/kernel/bfloat16", "dense/kernel"}));
  mixed.fuse_update = false;
  EXPECT_EQ(count_ops(build_model_graph(mixed, {"sim:0"}), "AllReduceAdam"), 0U);
  mixed.fuse_update = true;
  mixed.policy = DTypePolicy::float32();  // nothing to keep: the plain update
  EXPECT_EQ(count_ops(build_model_graph(mixed, {"sim:0"}), "AllReduceAdam"), 0U);

  auto run = [&](bool fuse) {
    Strategy strategy = Strategy::one_device("sim:0");
    strategy.fuse_update = fuse;
    Sequential model({kIn}, layers());
    model.compile({.policy = DTypePolicy::mixed_bfloat16()}, strategy, {.devices = &manager});
    return testing::record_training(model, manager, 6, kRows, kIn, kClasses);
  };
  const TrainedRun plain = run(false);
  const TrainedRun kept = run(true);
  EXPECT_EQ(kept.variables.size(), plain.variables.size() + 4);
  expect_bitwise(testing::without_compute_copies(kept), plain);
}

TEST(FusedUpdate, Bfloat16ComputeCopiesArePersistentVariablesKeptAsTheCastOfEveryReplicasParameters) {
  // mixed_bfloat16 on the folded update: the layers read "<parameter>/bfloat16" Variables that the update writes
  // (no Cast of a variable each step); after every step and after a restore, on every replica, each equals the
  // cast of its float32 parameter.
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  for (const Shard shard : {Shard::none, Shard::optimizer}) {
    SCOPED_TRACE(std::string(name_of(shard)));
    ModelSpec mixed = spec(true);
    mixed.policy = DTypePolicy::mixed_bfloat16();
    mixed.shard = shard;
    const ModelGraph model = build_model_graph(mixed, {"sim:0", "sim:1"});
    ASSERT_EQ(model.compute_copies.size(), 8U);  // 4 parameters x 2 replicas
    EXPECT_EQ(model.compute_copies[0],
              (std::pair<std::string, std::string>{"replica_0/dense/kernel/bfloat16", "replica_0/dense/kernel"}));
    for (const graph::Node& node : model.graph.nodes()) {
      if (node.op == "Cast") {
        EXPECT_NE(model.graph.node(node.inputs[0].node).op, "Variable") << node.name;
      }
      if (node.name == "replica_1/dense_1/bias/bfloat16") {
        EXPECT_EQ(node.op, "Variable");
        EXPECT_EQ(node.outputs[0].to_string(), "bfloat16[4]");
        EXPECT_EQ(graph::attribute_string(node, "kind"), "parameter");
      }
    }

    Strategy strategy = Strategy::mirrored({"sim:0", "sim:1"}, "ring", shard);
    Sequential trained({kIn}, layers());
    trained.compile({.policy = DTypePolicy::mixed_bfloat16()}, strategy, {.devices = &manager});
    for (int step = 1; step <= 3; ++step) {
      testing::train_synthetic(trained, manager, 1, kRows, kIn, kClasses);
      const auto variables = testing::read_variables(trained);
      EXPECT_EQ(testing::expect_copies_are_casts(variables).size() + 8, variables.size()) << "step " << step;
    }
    // A restore writes the parameters from the host: the copies follow them.
    std::vector<std::pair<std::string, Tensor>> values = trained.variables();
    for (auto& [name, value] : values) {
      if (name.find("adam") == std::string::npos) value = uniform_tensor(value.shape(), value.device(), 7);
    }
    trained.assign_variables(values);
    const auto restored = testing::read_variables(trained);
    EXPECT_EQ(testing::expect_copies_are_casts(restored).size() + 8, restored.size());
  }
}

TEST(FusedUpdate, AutomaticShardingTakesZero1ExactlyWhereTheUpdateFolds) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  auto settled = [&](Strategy strategy, Optimizer optimizer, const char* name) {
    strategy.shard = Shard::automatic;
    Sequential model({kIn}, layers());
    model.compile({.optimizer = std::move(optimizer)}, strategy, {.name = name, .devices = &manager});
    return model.shard();
  };
  EXPECT_EQ(settled(Strategy::mirrored({"sim:0", "sim:1"}), Adam{}, "adam"), Shard::optimizer);
  EXPECT_EQ(settled(Strategy::mirrored({"sim:0", "sim:1", "sim:2"}), Adam{}, "three"), Shard::optimizer);
  EXPECT_EQ(settled(Strategy::mirrored({"sim:0", "sim:1"}), Sgd{}, "sgd"), Shard::none);
  EXPECT_EQ(settled(Strategy::mirrored({"sim:0"}), Adam{}, "one replica"), Shard::none);
  EXPECT_EQ(settled(Strategy::mirrored({"sim:0", "sim:1"}, "reduce_to_one"), Adam{}, "reduce"), Shard::none);
  Strategy unfused = Strategy::mirrored({"sim:0", "sim:1"});
  unfused.fuse_update = false;
  EXPECT_EQ(settled(unfused, Adam{}, "unfused"), Shard::none);
  EXPECT_EQ(settled(Strategy::one_device("sim:0"), Adam{}, "one device"), Shard::none);
  // Other kinds hold none in their description: nothing refuses or shards on automatic's account.
  Strategy one = Strategy::one_device("sim:0");
  one.shard = Shard::automatic;
  EXPECT_EQ(make_distribution_strategy(one)->description().shard, Shard::none);
  EXPECT_EQ(parse_shard("auto"), Shard::automatic);
  EXPECT_EQ(name_of(Shard::automatic), "auto");
}

TEST(AdamAcrossPeers, MatchesTheSumThenAdamBitwise) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  device::Device& home = manager.device("sim:0");
  const Shape shape{5003};  // not a multiple of the kernel's blocks
  auto random = [&](device::Device& device, std::uint64_t seed) { return uniform_tensor(shape, device, seed); };
  // One gradient (no sum), two (summed inside the update's loop) and three (summed block by block).
  for (std::size_t count = 1; count <= 3; ++count) {
    std::vector<Tensor> grads;
    for (std::size_t index = 0; index < count; ++index) {
      grads.push_back(random(manager.device("sim:" + std::to_string(index)), index + 1));
    }
    const Tensor param = random(home, 4);
    const Tensor m = random(home, 5);
    const Tensor v = random(home, 6);
    ops::fill(v, 0.25);
    const ops::AdamOptions options{.learning_rate = 0.01};
    for (device::Device* device : manager.devices()) device->synchronize();

    // The reference: the sum into a fresh tensor, then the ordinary update on copies of the state.
    const Tensor sum = Tensor::empty(shape, DType::f32, home);
    ops::sum_across_peers(std::vector<Tensor>{sum}, grads);
    const Tensor param_ref = param.to(home), m_ref = m.to(home), v_ref = v.to(home);
    ops::adam_update(param_ref, sum, m_ref, v_ref, 3, options);
    ops::adam_update_across_peers(param, grads, m, v, 3, options);
    for (device::Device* device : manager.devices()) device->synchronize();
    EXPECT_EQ(param.to_vector<float>(), param_ref.to_vector<float>()) << count << " gradients";
    EXPECT_EQ(m.to_vector<float>(), m_ref.to_vector<float>()) << count << " gradients";
    EXPECT_EQ(v.to_vector<float>(), v_ref.to_vector<float>()) << count << " gradients";
    EXPECT_NE(param.to_vector<float>(), random(home, 4).to_vector<float>()) << "it did update";
  }
}

TEST(AdamAcrossPeers, SumsSixteenBitGradientsAsSumAcrossPeersThenAdam) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  device::Device& home = manager.device("sim:0");
  const Shape shape{5003};  // not a multiple of the kernel's blocks
  auto random = [&](device::Device& device, std::uint64_t seed) { return uniform_tensor(shape, device, seed); };
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (std::size_t count = 1; count <= 3; ++count) {
      SCOPED_TRACE(std::string(name_of(dtype)) + ", " + std::to_string(count) + " gradients");
      std::vector<Tensor> grads;
      for (std::size_t index = 0; index < count; ++index) {
        grads.push_back(ops::cast(random(manager.device("sim:" + std::to_string(index)), index + 1), dtype));
      }
      // With compute copies (the updated parameter rounded into one beside it and one per mirror), and without.
      for (const bool copies : {false, true}) {
        SCOPED_TRACE(copies ? "with compute copies" : "without compute copies");
        const Tensor param = random(home, 4), m = random(home, 5), v = random(home, 6);
        ops::fill(v, 0.25);
        const Tensor copy = copies ? ops::cast(random(home, 8), dtype) : Tensor{};
        const ops::AdamState mirror{.param = random(manager.device("sim:1"), 7),
                                    .m = {},
                                    .v = {},
                                    .copy = copies ? ops::cast(random(manager.device("sim:1"), 9), dtype) : Tensor{}};
        const ops::AdamOptions options{.learning_rate = 0.01};
        for (device::Device* device : manager.devices()) device->synchronize();
        // The reference: the 16-bit sum (each addition rounded once), then the update widening it.
        const Tensor sum = Tensor::empty(shape, dtype, home);
        ops::sum_across_peers(std::vector<Tensor>{sum}, grads);
        const Tensor param_ref = param.to(home), m_ref = m.to(home), v_ref = v.to(home);
        ops::adam_update(param_ref, sum, m_ref, v_ref, 3, options);
        ops::adam_update_across_peers({.param = param, .m = m, .v = v, .copy = copy}, grads,
                                      std::vector<ops::AdamState>{mirror}, 3, options);
        for (device::Device* device : manager.devices()) device->synchronize();
        EXPECT_EQ(param.to_vector<float>(), param_ref.to_vector<float>());
        EXPECT_EQ(m.to_vector<float>(), m_ref.to_vector<float>());
        EXPECT_EQ(v.to_vector<float>(), v_ref.to_vector<float>());
        EXPECT_EQ(mirror.param.to_vector<float>(), param_ref.to_vector<float>());
        if (!copies) continue;
        // Bit for bit the Cast of the updated parameter (the copies started from other values).
        auto bits = [](const Tensor& tensor) {
          std::vector<std::uint16_t> values;
          if (tensor.dtype() == DType::bf16) {
            for (const BFloat16 value : tensor.to_vector<BFloat16>()) values.push_back(value.bits);
          } else {
            for (const Half value : tensor.to_vector<Half>()) values.push_back(value.bits);
          }
          return values;
        };
        const std::vector<std::uint16_t> cast = bits(ops::cast(param_ref, dtype));
        EXPECT_EQ(bits(copy), cast);
        EXPECT_EQ(bits(mirror.copy), cast);
      }
    }
  }
  {  // A copy of another dtype than the gradients', or a mirror without one, is refused.
    const std::vector<Tensor> grads{ops::cast(random(home, 1), DType::bf16)};
    const Tensor param = random(home, 2), m = random(home, 3), v = random(home, 4);
    EXPECT_THROW(ops::adam_update_across_peers({.param = param, .m = m, .v = v, .copy = ops::cast(param, DType::f16)},
                                               grads, {}, 1, {}),
                 InvalidArgument);
    const ops::AdamState bare{.param = random(manager.device("sim:1"), 5), .m = {}, .v = {}};
    EXPECT_THROW(ops::adam_update_across_peers({.param = param, .m = m, .v = v, .copy = ops::cast(param, DType::bf16)},
                                               grads, std::vector<ops::AdamState>{bare}, 1, {}),
                 InvalidArgument);
  }
  // A 16-bit gradient of a float64 parameter, or gradients of two dtypes, are refused naming the mismatch.
  const Tensor wide = Tensor::empty(shape, DType::f64, home);
  const std::vector<Tensor> half{ops::cast(random(home, 1), DType::bf16)};
  EXPECT_THROW(ops::adam_update_across_peers(wide, half, wide, wide, 1, {}), InvalidArgument);
  const std::vector<Tensor> mixed{half[0], ops::cast(random(home, 2), DType::f16)};
  const Tensor param = random(home, 3);
  EXPECT_THROW(ops::adam_update_across_peers(param, mixed, random(home, 4), random(home, 5), 1, {}), InvalidArgument);
}

TEST(AdamAcrossPeers, StoresTheUpdateIntoEveryMirrorBitwise) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  const Shape shape{4099};  // not a multiple of the kernel's blocks
  auto random = [&](const std::string& device, std::uint64_t seed) {
    Tensor tensor = Tensor::empty(shape, DType::f32, manager.device(device));
    ops::uniform(tensor, -1.0, 1.0, seed);
    return tensor;
  };
  const std::vector<Tensor> grads{random("sim:1", 1), random("sim:2", 2)};
  const ops::AdamState state{.param = random("sim:0", 3), .m = random("sim:0", 4), .v = random("sim:0", 5)};
  ops::fill(state.v, 0.5);
  // The mirrors start from other values: what they end with can only come from the update's copies.
  const std::vector<ops::AdamState> mirrors{
      {.param = random("sim:1", 6), .m = random("sim:1", 7), .v = random("sim:1", 8)},
      {.param = random("sim:2", 9), .m = random("sim:2", 10), .v = random("sim:2", 11)}};
  const ops::AdamOptions options{.learning_rate = 0.01};
  for (device::Device* device : manager.devices()) device->synchronize();
  const Tensor param_ref = state.param.to(state.param.device()), m_ref = state.m.to(state.m.device()),
               v_ref = state.v.to(state.v.device());
  ops::adam_update_across_peers(param_ref, grads, m_ref, v_ref, 2, options);
  ops::adam_update_across_peers(state, grads, mirrors, 2, options);
  for (device::Device* device : manager.devices()) device->synchronize();
  EXPECT_EQ(state.param.to_vector<float>(), param_ref.to_vector<float>());
  EXPECT_EQ(state.m.to_vector<float>(), m_ref.to_vector<float>());
  EXPECT_EQ(state.v.to_vector<float>(), v_ref.to_vector<float>());
  for (const ops::AdamState& mirror : mirrors) {
    EXPECT_EQ(mirror.param.to_vector<float>(), param_ref.to_vector<float>()) << mirror.param.device().name();
    EXPECT_EQ(mirror.m.to_vector<float>(), m_ref.to_vector<float>()) << mirror.param.device().name();
    EXPECT_EQ(mirror.v.to_vector<float>(), v_ref.to_vector<float>()) << mirror.param.device().name();
  }
}

TEST(AdamAcrossPeers, RefusesAMirrorItCannotWrite) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  auto make = [&](const std::string& device, std::int64_t elements) {
    return Tensor::empty(Shape{elements}, DType::f32, manager.device(device));
  };
  const ops::AdamState state{.param = make("sim:0", 8), .m = make("sim:0", 8), .v = make("sim:0", 8)};
  const std::vector<Tensor> grads{make("sim:0", 8)};
  auto refuse = [&](const ops::AdamState& mirror, std::vector<std::string> words) {
    tp_test::expect_invalid([&] { ops::adam_update_across_peers(state, grads, std::vector{mirror}, 1, {}); },
                            std::move(words));
  };
  refuse({.param = make("sim:1", 7), .m = make("sim:1", 7), .v = make("sim:1", 7)}, {"AdamAcrossPeers", "mirror"});
  refuse({.param = make("cpu:0", 8), .m = make("cpu:0", 8), .v = make("cpu:0", 8)},
         {"AdamAcrossPeers", "mirror", "cpu:0", "cannot reach"});
  refuse({.param = make("sim:1", 8), .m = make("sim:0", 8), .v = make("sim:1", 8)}, {"share one device"});
  refuse({.param = make("sim:1", 8), .m = Tensor{}, .v = make("sim:1", 8)}, {"m and v both defined"});
  refuse({.param = Tensor{}, .m = Tensor{}, .v = Tensor{}}, {"needs a defined param"});
  const Tensor f64 = Tensor::empty(Shape{8}, DType::f64, manager.device("sim:1"));
  refuse({.param = f64, .m = f64, .v = f64}, {"AdamAcrossPeers", "mirror"});
}

TEST(AdamAcrossPeers, RefusesWhatItCannotSum) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  device::Device& home = manager.device("sim:0");
  const Tensor param = Tensor::empty(Shape{8}, DType::f32, home);
  const Tensor m = Tensor::empty(Shape{8}, DType::f32, home);
  const Tensor v = Tensor::empty(Shape{8}, DType::f32, home);
  const Tensor short_grad = Tensor::empty(Shape{7}, DType::f32, manager.device("sim:1"));
  const Tensor host_grad = Tensor::empty(Shape{8}, DType::f32, manager.device("cpu:0"));
  tp_test::expect_invalid([&] { ops::adam_update_across_peers(param, {}, m, v, 1, {}); }, {"no gradients"});
  tp_test::expect_invalid([&] { ops::adam_update_across_peers(param, std::vector<Tensor>{short_grad}, m, v, 1, {}); },
                          {"AdamAcrossPeers", "grad"});
  tp_test::expect_invalid([&] { ops::adam_update_across_peers(param, std::vector<Tensor>{host_grad}, m, v, 1, {}); },
                          {"AdamAcrossPeers", "cpu:0", "cannot reach"});
  const Tensor grad = Tensor::empty(Shape{8}, DType::f32, home);
  tp_test::expect_invalid([&] { ops::adam_update_across_peers(param, std::vector<Tensor>{grad}, m, v, 0, {}); },
                          {"step 0"});
}

}  // namespace
}  // namespace tp::train
