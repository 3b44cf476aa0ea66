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
#include "tensorpool/ops/init.hpp"
#include "tensorpool/ops/optimizer.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/model_graph.hpp"
#include "train/support/synthetic_training.hpp"

namespace tp::train {
namespace {

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
  ModelSpec sharded = spec(true);
  sharded.shard = Shard::optimizer;
  ModelSpec scaled = spec(true);
  scaled.policy = DTypePolicy::mixed_float16();
  for (const auto& [what, other, devices] :
       {std::tuple{"sgd", sgd, two}, std::tuple{"reduce_to_one", reduce_to_one, two},
        std::tuple{"zero-1", sharded, two}, std::tuple{"loss scaling", scaled, two},
        std::tuple{"cpu devices", spec(true), std::vector<std::string>{"cpu:0", "sim:0"}},
        std::tuple{"one device twice", spec(true), std::vector<std::string>{"sim:0", "sim:0"}}}) {
    EXPECT_EQ(count_ops(build_model_graph(other, devices), "AllReduceAdam"), 0U) << what;
  }
  EXPECT_EQ(count_ops(build_model_graph(spec(true), {"sim:0"}), "AllReduceAdam"), 0U);  // nothing to reduce
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<std::pair<std::string, std::vector<float>>> variables;  // every replica's, slots included
};

TrainedRun train(device::DeviceManager& manager, std::vector<std::string> devices, bool fuse) {
  Strategy strategy = Strategy::mirrored(std::move(devices));
  strategy.fuse_update = fuse;
  Sequential model({kIn}, layers());
  model.compile({}, strategy, {.devices = &manager});
  TrainedRun run;
  for (int step = 1; step <= 6; ++step) {
    const auto data = testing::synthetic_batch(manager, kRows, kIn, kClasses, static_cast<std::uint32_t>(step % 4));
    run.losses.push_back(model.train_step(data.x, data.labels, step).loss);
  }
  for (const std::string& name : model.session().variable_names()) {
    run.variables.emplace_back(name, model.session().read_variable(name).to_vector<float>());
  }
  return run;
}

void expect_bitwise(const TrainedRun& fused, const TrainedRun& plain) {
  EXPECT_EQ(fused.losses, plain.losses);
  ASSERT_EQ(fused.variables.size(), plain.variables.size());
  for (std::size_t index = 0; index < fused.variables.size(); ++index) {
    EXPECT_EQ(fused.variables[index].first, plain.variables[index].first);
    EXPECT_EQ(fused.variables[index].second, plain.variables[index].second) << fused.variables[index].first;
  }
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

TEST(AdamAcrossPeers, MatchesTheSumThenAdamBitwise) {
  device::DeviceManager manager(three_sim_devices(), runtime::testing::kNoEnv);
  device::Device& home = manager.device("sim:0");
  const Shape shape{5003};  // not a multiple of the kernel's blocks
  auto random = [&](device::Device& device, std::uint64_t seed) {
    Tensor tensor = Tensor::empty(shape, DType::f32, device);
    ops::uniform(tensor, -1.0, 1.0, seed);
    return tensor;
  };
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
