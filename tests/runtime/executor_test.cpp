// SPDX-License-Identifier: Apache-2.0
// The executor runs the kernel each node resolved when its step was prepared: an op's bind_kernel is called
// once per node and prepared step, never per run, and each node keeps its own bound kernel.
#include "runtime/executor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>

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

}  // namespace
}  // namespace tp::runtime
