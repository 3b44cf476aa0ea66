// SPDX-License-Identifier: Apache-2.0
// The executor runs the kernel each node resolved when its step was prepared: an op's bind_kernel is called
// once per node and prepared step, never per run, and each node keeps its own bound kernel. A launch replays
// the context its step kept from the previous run: the results are bitwise those of contexts built afresh
// (the planner off), also when another step grows the arena under it, and a kept context never holds a
// tensor that belongs to one run (a feed bound in place).
#include "runtime/executor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/graph/builder.hpp"
#include "tensorpool/graph/op_registry.hpp"
#include "tensorpool/runtime/session.hpp"

namespace tp::runtime {
namespace {

std::atomic<int> binds{0};

// "TestBoundScale" [factor]: out = factor * x (one float), with a kernel bound to each node: the factor is
// read from the node's attributes when the step is prepared, and each bind is counted.
void register_bound_scale() {
  graph::OpRegistry& registry = graph::OpRegistry::global();
  if (registry.find("TestBoundScale") != nullptr) return;
  graph::OpDef op;
  op.name = "TestBoundScale";
  op.num_inputs = 1;
  op.infer = [](const graph::InferenceContext& context) { return context.inputs; };
  auto unbound = [](graph::KernelContext&) { FAIL() << "the executor ran the unbound kernel"; };
  op.kernels[device::DeviceKind::cpu] = unbound;
  op.kernels[device::DeviceKind::sim] = unbound;
  op.bind_kernel = [](const graph::Node& node, device::DeviceKind) -> std::function<void(graph::KernelContext&)> {
    binds.fetch_add(1);
    const auto factor = static_cast<float>(graph::attribute_float(node, "factor"));
    return [factor](graph::KernelContext& context) {
      const Tensor input = context.inputs[0];
      const Tensor output = context.outputs[0];
      context.stream.enqueue([input, output, factor] { output.data<float>()[0] = factor * input.data<float>()[0]; });
    };
  };
  registry.add(std::move(op));
}

TEST(Executor, KernelsAreBoundOncePerPreparedStepAndNodeNotPerRun) {
  register_bound_scale();
  device::DeviceManager manager(testing::two_sim_devices(), testing::kNoEnv);
  graph::Graph graph;
  const graph::Output x = graph::placeholder(graph, "x", DType::f32, {1});
  const graph::Output doubled = graph.add("TestBoundScale", {x}, {{"factor", 2.0}}, "doubled");
  graph.add("TestBoundScale", {doubled}, {{"factor", -3.0}}, "scaled");
  for (graph::NodeId id = 0; id < static_cast<graph::NodeId>(graph.size()); ++id)
    graph.mutable_node(id).device = "sim:0";
  Session session(graph, {.devices = &manager});
  device::Device& cpu = manager.device("cpu:0");
  binds = 0;
  for (int run = 1; run <= 3; ++run) {
    const FeedMap feeds{{"x", Tensor::from_vector<float>(std::vector<float>{static_cast<float>(run)}, Shape{1}, cpu)}};
    const std::vector<Tensor> fetched = session.run(feeds, {"doubled", "scaled"});
    EXPECT_EQ(fetched.at(0).to_vector<float>().at(0), 2.0F * static_cast<float>(run));
    EXPECT_EQ(fetched.at(1).to_vector<float>().at(0), -6.0F * static_cast<float>(run));
  }
  EXPECT_EQ(binds.load(), 2) << "one bind per node of the one prepared step";
  const FeedMap feeds{{"x", Tensor::from_vector<float>(std::vector<float>{1.0F}, Shape{1}, cpu)}};
  EXPECT_EQ(session.run(feeds, {"doubled"}).at(0).to_vector<float>().at(0), 2.0F);
  EXPECT_EQ(binds.load(), 3) << "a new step (other fetches) binds its own node";
}

constexpr std::int64_t kIn = 12, kHidden = 16, kClasses = 4;

struct Trained {
  std::vector<float> losses;
  std::vector<float> kernel;  // the first layer's, after the last step
};

// Training steps on sim:0 whose batch alternates between a small and a large one: each size is a step of its
// own, and the first large one grows the device's arena, moving the small step's values to the new arena.
Trained train_alternating_batches(bool planner) {
  device::DeviceManager manager(testing::two_sim_devices(), testing::kNoEnv);
  const testing::MlpGraph mlp = testing::build_mlp(kIn, kHidden, kClasses, "sim:0");
  Session session(mlp.graph, {.planner = planner, .devices = &manager});
  Trained trained;
  for (std::int64_t step = 1; step <= 8; ++step) {
    const std::int64_t rows = step % 3 == 0 ? 96 : 8;
    const testing::HostBatch batch =
        testing::host_batch(manager, testing::make_batch(rows, kIn, kClasses, static_cast<std::uint32_t>(step)), kIn);
    const FeedMap feeds{{"x", batch.x}, {"labels", batch.labels}};
    trained.losses.push_back(
        session.run(feeds, {mlp.loss}, mlp.updates, {.step = step}).at(0).to_vector<float>().at(0));
  }
  trained.kernel = session.read_variable("dense/kernel").to_vector<float>();
  return trained;
}

TEST(Executor, ReplayedContextsTrainBitwiseAsContextsBuiltForEachLaunch) {
  const Trained fresh = train_alternating_batches(/*planner=*/false);  // no context outlives its launch
  const Trained replayed = train_alternating_batches(/*planner=*/true);
  ASSERT_EQ(fresh.losses.size(), 8u);
  EXPECT_EQ(replayed.losses, fresh.losses);
  EXPECT_EQ(replayed.kernel, fresh.kernel);
}

// A feed bound in place is the caller's tensor of one run: once the run is waited for, nothing of the session
// holds it (no kept context in particular), so its memory goes back when the caller drops it.
TEST(Executor, NoContextKeepsAFeedBoundInPlace) {
  device::DeviceManager manager(testing::two_sim_devices(), testing::kNoEnv);
  const testing::MlpGraph mlp = testing::build_mlp(kIn, kHidden, kClasses, "sim:0");
  Session session(mlp.graph, {.devices = &manager});
  device::Device& sim = manager.device("sim:0");
  for (std::int64_t step = 1; step <= 3; ++step) {
    const testing::Batch batch = testing::make_batch(8, kIn, kClasses, static_cast<std::uint32_t>(step));
    const Tensor x = Tensor::from_vector<float>(batch.x, Shape{8, kIn}, sim);
    const Tensor labels = Tensor::from_vector<std::int32_t>(batch.labels, Shape{8}, sim);
    session.run({{"x", x}, {"labels", labels}}, {mlp.loss}, mlp.updates, {.step = step});
    EXPECT_EQ(x.buffer().use_count(), 1) << "step " << step << ": the session still holds the fed x";
    EXPECT_EQ(labels.buffer().use_count(), 1) << "step " << step << ": the session still holds the fed labels";
  }
}

}  // namespace
}  // namespace tp::runtime
