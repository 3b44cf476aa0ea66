// SPDX-License-Identifier: Apache-2.0
// The multi-tensor optimizer updates of a training step (Strategy::multi_tensor_update, train/update_grouping):
// the plain updates of each device, and only those, become one ApplyAdamMulti / ApplySgdMulti node; training
// is bitwise the same with and without it (one device, mirrored with gradient buckets, ZeRO-1 without the
// folded update; Adam and SGD; 1 and 3 intra-op threads); the variables keep their names, so a checkpoint
// taken with the grouping resumes without it.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/graph/builder.hpp"
#include "tensorpool/ops/kernel_table.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/model_graph.hpp"
#include "train/support/synthetic_training.hpp"
#include "train/update_grouping.hpp"

namespace tp::train {
namespace {

using testing::expect_bitwise;
using testing::TrainedRun;

constexpr std::int64_t kIn = 12, kHidden = 31, kClasses = 4, kRows = 36;

std::vector<Dense> layers() {
  return {{.units = kHidden, .activation = Activation::relu}, {.units = kClasses, .activation = Activation::softmax}};
}

std::size_t count_ops(const ModelGraph& model, const std::string& op) {
  std::size_t count = 0;
  for (const graph::Node& node : model.graph.nodes()) count += node.op == op ? 1 : 0;
  return count;
}

ModelSpec spec(bool multi, Optimizer optimizer = Adam{}) {
  ModelSpec made{.input_shape = {kIn}, .layers = layers(), .optimizer = std::move(optimizer)};
  made.multi_tensor_update = multi;
  return made;
}

TEST(MultiTensorUpdate, GroupsEachDevicesPlainUpdatesIntoOneNode) {
  const std::vector<std::string> two = {"sim:0", "sim:1"};
  const ModelGraph grouped = build_model_graph(spec(true), two);
  const ModelGraph plain = build_model_graph(spec(false), two);
  EXPECT_EQ(count_ops(plain, "ApplyAdam"), 8U);  // 4 parameters x 2 replicas
  EXPECT_EQ(count_ops(grouped, "ApplyAdam"), 0U);
  EXPECT_EQ(count_ops(grouped, "ApplyAdamMulti"), 2U);
  EXPECT_EQ(grouped.updates, (std::vector<std::string>{"replica_0/ApplyAdamMulti", "replica_1/ApplyAdamMulti"}));
  EXPECT_EQ(grouped.variables, plain.variables);  // the same names, in the same order: checkpoints match
  for (std::size_t replica = 0; replica < 2; ++replica) {
    const graph::Node& node = grouped.graph.node(*grouped.graph.find(grouped.updates[replica]));
    EXPECT_EQ(node.device, two[replica]);
    ASSERT_EQ(node.inputs.size(), 16U);  // 4 lists of 4
    const std::string prefix = "replica_" + std::to_string(replica) + "/";
    for (std::size_t index = 0; index < 4; ++index) {  // the vars: this replica's parameters, in order
      EXPECT_EQ(grouped.graph.node(node.inputs[index].node).name, grouped.variables[replica][index]);
      EXPECT_EQ(grouped.graph.node(node.inputs[index].node).name.rfind(prefix, 0), 0U);
    }
    EXPECT_TRUE(node.attributes.contains("slices")) << "the updates read their ranges of the bucket";
  }
  EXPECT_EQ(count_ops(build_model_graph(spec(true, Sgd{.momentum = 0.9}), two), "ApplySgdMulti"), 2U);
  EXPECT_EQ(count_ops(build_model_graph(spec(true), {"sim:0"}), "ApplyAdamMulti"), 1U);
  ModelSpec zero = spec(true);
  zero.shard = Shard::optimizer;
  const ModelGraph sharded = build_model_graph(zero, two);  // replica 0's shard holds part of one parameter
  EXPECT_EQ(count_ops(sharded, "ApplyAdamMulti"), 1U);
  EXPECT_EQ(count_ops(sharded, "ApplyAdam"), 1U);

  // Left alone: loss scaling's conditional updates and 16-bit gradients.
  ModelSpec scaled = spec(true);
  scaled.policy = DTypePolicy::mixed_float16();
  const ModelGraph conditional = build_model_graph(scaled, two);
  EXPECT_EQ(count_ops(conditional, "ApplyAdamIf"), 8U);
  EXPECT_EQ(count_ops(conditional, "ApplyAdamMulti"), 0U);
  ModelSpec bf16 = spec(true);
  bf16.policy = DTypePolicy::mixed_bfloat16();
  EXPECT_EQ(count_ops(build_model_graph(bf16, {"sim:0"}), "ApplyAdamMulti"), 0U);
}

TEST(MultiTensorUpdate, TakenOnlyWhereEveryDevicesBackendHasTheKernels) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  (void)manager.device("sim:0");  // registers the CPU table for sim
  const ops::kernels::KernelTable* registered = ops::kernels::kernels_for(device::DeviceKind::sim);
  ASSERT_NE(registered, nullptr);
  EXPECT_TRUE(multi_tensor_updates_supported({"sim:0", "sim:1"}));
  static ops::kernels::KernelTable without_multi{};  // registered tables need static storage
  without_multi = *registered;
  without_multi.adam_multi = nullptr;
  ops::kernels::register_kernels(device::DeviceKind::sim, without_multi);
  EXPECT_FALSE(multi_tensor_updates_supported({"cpu:0", "sim:0"}));
  EXPECT_EQ(count_ops(build_model_graph(spec(true), {"sim:0"}), "ApplyAdamMulti"), 0U);
  EXPECT_EQ(count_ops(build_model_graph(spec(true), {"sim:0"}), "ApplyAdam"), 4U);
  ops::kernels::register_kernels(device::DeviceKind::sim, *registered);
  EXPECT_EQ(count_ops(build_model_graph(spec(true), {"sim:0"}), "ApplyAdamMulti"), 1U);
}

TEST(MultiTensorUpdate, AddUpdatesGroupsExactlyOneDevicesMatchingUpdates) {
  graph::Graph g;
  auto var = [&](const std::string& name) { return graph::variable(g, name, DType::f32, {3}); };
  const graph::Output apply = graph::placeholder(g, "apply", DType::f32, {});
  const graph::Attributes adam{{"learning_rate", 0.001}};
  const graph::Attributes faster{{"learning_rate", 0.01}};
  std::vector<UpdateRequest> requests;
  auto request = [&](std::string op, const std::string& name, const std::string& device,
                     const graph::Attributes& attributes, bool with_apply = false) {
    std::vector<graph::Output> inputs{var(name), var(name + "/grad"), var(name + "/m"), var(name + "/v")};
    if (with_apply) inputs.push_back(apply);
    requests.push_back({.op = std::move(op),
                        .inputs = std::move(inputs),
                        .attributes = attributes,
                        .name = name + "/update",
                        .device = device,
                        .prefix = device + "/"});
  };
  request("ApplyAdam", "a", "sim:0", adam);
  request("ApplyAdam", "b", "sim:1", adam);
  request("ApplyAdam", "c", "sim:0", adam);
  request("ApplyAdam", "d", "sim:0", faster);  // other hyperparameters: alone
  request("ApplyAdamIf", "e", "sim:0", adam, true);
  request("ApplyAdam", "f", "sim:1", adam);
  request("ApplyAdam", "g", "sim:0", adam);

  graph::Graph ungrouped = g;
  EXPECT_EQ(
      add_updates(ungrouped, requests, false),
      (std::vector<std::string>{"a/update", "b/update", "c/update", "d/update", "e/update", "f/update", "g/update"}));
  const std::vector<std::string> names = add_updates(g, requests, true);
  EXPECT_EQ(names, (std::vector<std::string>{"sim:0/ApplyAdamMulti", "sim:1/ApplyAdamMulti", "d/update", "e/update"}));
  std::map<std::string, std::set<std::string>> grouped_vars;  // node -> its var inputs
  for (const std::string& name : names) {
    const graph::Node& node = g.node(*g.find(name));
    const std::size_t lists = node.op == "ApplyAdamMulti" ? node.inputs.size() / 4 : 1;
    for (std::size_t index = 0; index < lists; ++index) grouped_vars[name].insert(g.node(node.inputs[index].node).name);
  }
  EXPECT_EQ(grouped_vars["sim:0/ApplyAdamMulti"], (std::set<std::string>{"a", "c", "g"}));
  EXPECT_EQ(grouped_vars["sim:1/ApplyAdamMulti"], (std::set<std::string>{"b", "f"}));
  EXPECT_EQ(g.node(*g.find("sim:0/ApplyAdamMulti")).device, "sim:0");
  EXPECT_EQ(g.node(*g.find("d/update")).op, "ApplyAdam");
  EXPECT_EQ(g.node(*g.find("e/update")).op, "ApplyAdamIf");
  EXPECT_FALSE(g.node(*g.find("sim:0/ApplyAdamMulti")).attributes.contains("slices")) << "no entry has a slice";
}

TrainedRun train(device::DeviceManager& manager, Strategy strategy, bool multi, Optimizer optimizer, int threads) {
  strategy.multi_tensor_update = multi;
  Sequential model({kIn}, layers());
  model.compile({.optimizer = std::move(optimizer)}, strategy, {.intra_op_threads = threads, .devices = &manager});
  return testing::record_training(model, manager, 6, kRows, kIn, kClasses);
}

TEST(MultiTensorUpdate, TrainsBitwiseAsOneUpdatePerVariable) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  Strategy unfused = Strategy::mirrored({"sim:0", "sim:1"}, "ring");
  unfused.fuse_update = false;  // AllReduce buckets and ApplyAdam with slices
  Strategy sharded = Strategy::mirrored({"sim:0", "sim:1"}, "ring", Shard::optimizer);
  sharded.fuse_update = false;  // ZeRO-1's ReduceScatter, sliced updates of the shard, AllGather
  const std::vector<std::pair<std::string, Strategy>> strategies = {{"one sim:0", Strategy::one_device("sim:0")},
                                                                    {"one cpu:0", Strategy::one_device("cpu:0")},
                                                                    {"mirrored", unfused},
                                                                    {"zero-1", sharded}};
  for (const auto& [what, strategy] : strategies) {
    for (const Optimizer& optimizer : {Optimizer{Adam{}}, Optimizer{Sgd{.momentum = 0.9, .nesterov = true}}}) {
      for (const int threads : {1, 3}) {
        SCOPED_TRACE(what + (std::holds_alternative<Adam>(optimizer) ? " adam " : " sgd ") + std::to_string(threads) +
                     " threads");
        const TrainedRun plain = train(manager, strategy, false, optimizer, threads);
        const TrainedRun multi = train(manager, strategy, true, optimizer, threads);
        ASSERT_FALSE(multi.variables.empty());
        expect_bitwise(multi, plain);
      }
    }
  }
}

TEST(MultiTensorUpdate, ACheckpointOfTheGroupedStepResumesWithoutIt) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  auto compiled = [&](bool multi, const char* name) {
    Strategy strategy = Strategy::one_device("sim:0");
    strategy.multi_tensor_update = multi;
    auto model = std::make_unique<Sequential>(std::vector<std::int64_t>{kIn}, layers());
    model->compile({}, strategy, {.name = name, .devices = &manager});
    return model;
  };
  auto steps = [&](Sequential& model, int first, int last) {
    for (int step = first; step <= last; ++step) {
      const auto data = testing::synthetic_batch(manager, kRows, kIn, kClasses, static_cast<std::uint32_t>(step % 4));
      model.train_step(data.x, data.labels, step);
    }
  };
  const auto straight = compiled(true, "straight");
  steps(*straight, 1, 6);
  const auto first = compiled(true, "first");
  steps(*first, 1, 3);
  const auto resumed = compiled(false, "resumed");
  resumed->assign_variables(first->variables());  // what a checkpoint restore does
  steps(*resumed, 4, 6);
  const auto expected = straight->variables();
  const auto got = resumed->variables();
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t index = 0; index < got.size(); ++index) {
    EXPECT_EQ(got[index].first, expected[index].first);
    EXPECT_EQ(got[index].second.to_vector<float>(), expected[index].second.to_vector<float>()) << got[index].first;
  }
}

}  // namespace
}  // namespace tp::train
