// SPDX-License-Identifier: Apache-2.0
// Inter-op threads: independent ops of a step run at once (host threads for inline cpu streams, one stream
// per lane on sim and opencl devices), and the results, the plan and its measured peak stay those of the
// serial run, on every backend present (cpu:0, sim:0, opencl:0 where an OpenCL device exists).
// The step order constraints hold: every op that reuses arena memory follows everything that used it, and
// updates on different devices do not wait for each other.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "runtime/executable.hpp"
#include "runtime/step_dependencies.hpp"
#include "runtime/support/failing_op.hpp"
#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/graph/op_registry.hpp"
#include "tensorpool/runtime/session.hpp"

namespace tp::runtime {
namespace {

using testing::build_mlp;
using testing::make_batch;

constexpr std::int64_t kIn = 12, kHidden = 16, kClasses = 4, kRows = 32;

device::DeviceManagerOptions devices_with_streams(std::size_t streams) {
  device::DeviceManagerOptions options = testing::two_sim_devices();
  options.device_options.num_streams = streams;
  return options;
}

FeedMap feeds_of(device::DeviceManager& manager, const testing::Batch& batch) {
  device::Device& cpu = manager.device("cpu:0");
  return {{"x", Tensor::from_vector<float>(batch.x, Shape{kRows, kIn}, cpu)},
          {"labels", Tensor::from_vector<std::int32_t>(batch.labels, Shape{kRows}, cpu)}};
}

struct Trained {
  std::vector<float> losses;
  std::vector<float> kernel;  // dense/kernel after the last step
};

Trained train(device::DeviceManager& manager, const std::string& device, int inter_op_threads, bool planner) {
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, device);
  Session session(mlp.graph, {.planner = planner, .inter_op_threads = inter_op_threads, .devices = &manager});
  Trained trained;
  for (int step = 1; step <= 6; ++step) {
    const auto batch = make_batch(kRows, kIn, kClasses, static_cast<std::uint32_t>(step % 3));
    trained.losses.push_back(
        session.run(feeds_of(manager, batch), {mlp.loss}, mlp.updates, {.step = step}).at(0).to_vector<float>().at(0));
  }
  trained.kernel = session.read_variable("dense/kernel").to_vector<float>();
  return trained;
}

class InterOp : public ::testing::TestWithParam<std::string> {};

TEST_P(InterOp, TrainingGivesBitwiseTheSerialResultsWithThePlannerOnAndOff) {
  device::DeviceManager manager(devices_with_streams(4), testing::kNoEnv);
  const Trained serial = train(manager, GetParam(), 1, true);
  for (const bool planner : {true, false}) {
    for (const int threads : {2, 4}) {
      const Trained concurrent = train(manager, GetParam(), threads, planner);
      EXPECT_EQ(concurrent.losses, serial.losses) << threads << " threads, planner " << planner;
      EXPECT_EQ(concurrent.kernel, serial.kernel) << threads << " threads, planner " << planner;
    }
  }
}

TEST_P(InterOp, ThePlannedPeakIsUnchangedAndMeasuredExactly) {
  device::DeviceManager manager(devices_with_streams(4), testing::kNoEnv);
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, GetParam());
  const FeedTypes types = {{"x", {DType::f32, {kRows, kIn}}}, {"labels", {DType::i32, {kRows}}}};
  Session serial(mlp.graph, {.devices = &manager});
  const MemoryPlan serial_plan = serial.plan(types, {mlp.loss}, mlp.updates);
  serial.close();
  Session session(mlp.graph, {.inter_op_threads = 4, .devices = &manager});
  const MemoryPlan plan = session.plan(types, {mlp.loss}, mlp.updates);
  ASSERT_EQ(plan.devices.size(), 1u);
  EXPECT_EQ(plan.devices[0].planned_peak_bytes, serial_plan.devices[0].planned_peak_bytes);
  // Measured on the accelerators only: on cpu:0 the test's feeds and the fetched loss share the budget.
  if (GetParam() == "cpu:0") return;
  device::Device& device = manager.device(GetParam());
  device.memory().reset_peak();
  const std::size_t before = device.memory().stats().bytes_requested;
  const auto batch = make_batch(kRows, kIn, kClasses, 1);
  session.run(feeds_of(manager, batch), {mlp.loss}, mlp.updates, {.step = 1});
  EXPECT_EQ(device.memory().stats().peak_bytes_requested - before, plan.devices[0].planned_peak_bytes);
  const std::uint64_t allocations = device.memory().stats().num_allocs;
  for (int step = 2; step <= 4; ++step) session.run(feeds_of(manager, batch), {mlp.loss}, mlp.updates, {.step = step});
  EXPECT_EQ(device.memory().stats().num_allocs, allocations) << "steady-state steps called the allocator";
}

// Two ops that meet: each waits (up to its `timeout_ms`) until both are running, and records how many ran at
// once; then copies its input to its output on its stream (a copy reaches every backend's device memory).
std::atomic<int> running{0};
std::atomic<int> most_at_once{0};

void register_rendezvous() {
  graph::OpRegistry& registry = graph::OpRegistry::global();
  if (registry.find("TestRendezvous") != nullptr) return;
  graph::OpDef rendezvous;
  rendezvous.name = "TestRendezvous";
  rendezvous.num_inputs = 1;
  rendezvous.infer = [](const graph::InferenceContext& context) { return context.inputs; };
  auto kernel = [](graph::KernelContext& context) {
    const auto timeout = std::chrono::milliseconds(graph::attribute_int(context.node, "timeout_ms", 0));
    const Tensor input = context.inputs[0];
    const Tensor output = context.outputs[0];
    context.stream.enqueue([timeout] {
      const int now = running.fetch_add(1) + 1;
      int seen = most_at_once.load();
      while (now > seen && !most_at_once.compare_exchange_weak(seen, now)) {}
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (most_at_once.load() < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      running.fetch_sub(1);
    });
    device::copy(context.stream, input.buffer(), input.offset_bytes(), context.stream, output.buffer(),
                 output.offset_bytes(), input.nbytes());
  };
  rendezvous.kernels[device::DeviceKind::cpu] = kernel;
  rendezvous.kernels[device::DeviceKind::sim] = kernel;
  rendezvous.kernels[device::DeviceKind::opencl] = kernel;
  registry.add(std::move(rendezvous));
}

int most_ops_at_once(device::DeviceManager& manager, const std::string& device, int threads, std::int64_t timeout_ms) {
  register_rendezvous();
  graph::Graph g;
  const graph::Output x = graph::placeholder(g, "x", DType::f32, {4});
  g.mutable_node(x.node).device = device;
  for (const char* name : {"left", "right"}) {
    const graph::Output met = g.add("TestRendezvous", {x}, {{"timeout_ms", timeout_ms}}, name);
    g.mutable_node(met.node).device = device;
  }
  Session session(g, {.inter_op_threads = threads, .devices = &manager});
  running = 0;
  most_at_once = 0;
  const FeedMap feeds = {
      {"x", Tensor::from_vector<float>(std::vector<float>{1, 2, 3, 4}, Shape{4}, manager.device("cpu:0"))}};
  const auto fetched = session.run(feeds, {"left", "right"});
  EXPECT_EQ(fetched.at(0).to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(fetched.at(1).to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  return most_at_once.load();
}

TEST_P(InterOp, IndependentOpsRunAtOnce) {
  device::DeviceManager manager(devices_with_streams(2), testing::kNoEnv);
  EXPECT_EQ(most_ops_at_once(manager, GetParam(), 2, 20000), 2) << "the two independent ops never overlapped";
  EXPECT_EQ(most_ops_at_once(manager, GetParam(), 1, 20), 1) << "one inter-op thread ran two ops at once";
}

TEST_P(InterOp, ADeviceWithOneStreamRunsOneKernelAtATime) {
  device::DeviceManager manager(devices_with_streams(1), testing::kNoEnv);
  EXPECT_EQ(most_ops_at_once(manager, GetParam(), 4, 20), 1);
}

INSTANTIATE_TEST_SUITE_P(Devices, InterOp, ::testing::ValuesIn(device::testing::present_device_names()),
                         backend::testing::backend_test_name);

TEST_P(InterOp, AFailingOpFailsTheRunAndTheSessionRunsOn) {
  testing::register_fail_on_negative();
  device::DeviceManager manager(devices_with_streams(4), testing::kNoEnv);
  graph::Graph g;
  const graph::Output x = graph::placeholder(g, "x", DType::f32, {1});
  g.add("Relu", {g.add("TestFailOnNegative", {x}, {}, "check")}, {}, "relu");
  g.add("Scale", {x}, {{"alpha", 2.0}}, "double");
  Session session(g, {.default_device = GetParam(), .inter_op_threads = 4, .devices = &manager});
  auto feeds = [&](float value) {
    return FeedMap{{"x", Tensor::from_vector<float>(std::vector<float>{value}, Shape{1}, manager.device("cpu:0"))}};
  };
  EXPECT_THROW(session.run(feeds(-1), {"relu", "double"}), InvalidArgument);
  const auto fetched = session.run(feeds(3), {"relu", "double"});
  EXPECT_EQ(fetched.at(0).to_vector<float>().at(0), 3.0F);
  EXPECT_EQ(fetched.at(1).to_vector<float>().at(0), 6.0F);
}

// With the planner off a value goes back to the allocator after its last reader; a step that reads it twice
// (Mul(r, r)) counts once, so a later reader still finds it.
TEST_P(InterOp, AValueReadTwiceByOneStepLivesUntilItsLastReader) {
  device::DeviceManager manager(devices_with_streams(2), testing::kNoEnv);
  graph::Graph g;
  const graph::Output x = graph::placeholder(g, "x", DType::f32, {3});
  const graph::Output r = g.add("Relu", {x}, {}, "r");
  const graph::Output squared = g.add("Mul", {r, r}, {}, "squared");
  g.add("Add", {squared, r}, {}, "out");
  for (const int threads : {1, 2}) {
    Session session(g,
                    {.default_device = GetParam(), .planner = false, .inter_op_threads = threads, .devices = &manager});
    const FeedMap feeds = {
        {"x", Tensor::from_vector<float>(std::vector<float>{-1, 2, 3}, Shape{3}, manager.device("cpu:0"))}};
    EXPECT_EQ(session.run(feeds, {"out"}).at(0).to_vector<float>(), (std::vector<float>{0, 6, 12})) << threads;
  }
}

TEST(InterOpErrors, NegativeThreadCountsAreRefused) {
  device::DeviceManager manager(devices_with_streams(1), testing::kNoEnv);
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, "sim:0");
  try {
    Session session(mlp.graph, {.inter_op_threads = -2, .devices = &manager});
    FAIL() << "a negative inter_op_threads was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("inter_op_threads = -2"), std::string::npos) << error.what();
  }
}

// Step order constraints on the training step's executable: every `after` entry is earlier, and a value that
// reuses arena memory is produced only after (transitively) every step that read or wrote what was there.
TEST(StepDependencies, ArenaReuseFollowsEveryEarlierUserOfTheMemory) {
  device::DeviceManager manager(devices_with_streams(4), testing::kNoEnv);
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, "sim:0");
  compile::PlacementOptions placement{manager.devices(), &manager.device("sim:0"), true};
  const std::map<std::string, graph::TensorType, std::less<>> feeds = {{"x", {DType::f32, {kRows, kIn}}},
                                                                       {"labels", {DType::i32, {kRows}}}};
  std::unique_ptr<Executable> executable = prepare(mlp.graph, feeds, {mlp.loss}, mlp.updates, placement);
  const std::size_t steps = executable->steps.size();
  std::vector<std::vector<bool>> follows(steps, std::vector<bool>(steps, false));  // follows[a][b]: a after b
  for (std::size_t index = 0; index < steps; ++index) {
    for (std::size_t earlier : executable->steps[index].after) {
      ASSERT_LT(earlier, index);
      follows[index][earlier] = true;
      for (std::size_t before = 0; before < steps; ++before) {
        if (follows[earlier][before]) follows[index][before] = true;
      }
    }
  }
  std::size_t reuses = 0;
  for (const DeviceLayout& layout : executable->layouts) {
    for (std::size_t later : layout.values) {
      const Value& value = executable->values[later];
      for (std::size_t earlier : layout.values) {
        const Value& old = executable->values[earlier];
        if (earlier == later || old.first_step >= value.first_step || old.last_step > value.first_step) continue;
        if (old.bytes() == 0 || value.bytes() == 0) continue;
        if (old.offset >= value.offset + value.bytes() || value.offset >= old.offset + old.bytes()) continue;
        ++reuses;
        EXPECT_TRUE(follows[value.first_step][old.first_step]) << value.name << " reuses " << old.name;
        for (std::size_t reader : old.readers) {
          if (reader != value.first_step) {
            EXPECT_TRUE(follows[value.first_step][reader]) << value.name << " reuses " << old.name;
          }
        }
      }
    }
  }
  EXPECT_GT(reuses, 0u) << "the plan reused no memory; the test checks nothing";
  assign_streams(mlp.graph, *executable, 4);
  EXPECT_TRUE(executable->multi_lane) << "four lanes on a four-stream device and no kernel left lane 0";
}

// Updates on different devices share no memory, so none waits for another (the replicas of a mirrored step
// update at the same time); on one device they keep their schedule order.
TEST(StepDependencies, UpdatesOnDifferentDevicesDoNotWaitForEachOther) {
  device::DeviceManager manager(testing::two_sim_devices(), testing::kNoEnv);
  graph::Graph g;
  std::vector<std::string> updates;
  std::map<std::string, graph::TensorType, std::less<>> feeds;
  // Schedule order alternates between the devices: sim:0, sim:1, sim:0, sim:1.
  for (const std::string name : {"a", "b", "c", "d"}) {
    const std::string device = name == "a" || name == "c" ? "sim:0" : "sim:1";
    auto on = [&](graph::Output output) {
      g.mutable_node(output.node).device = device;
      return output;
    };
    auto variable = [&](const std::string& suffix) {
      const graph::Output output = on(graph::variable(g, name + suffix, DType::f32, {8}));
      g.mutable_node(output.node).attributes["initializer"] = std::string("zeros");
      return output;
    };
    const graph::Output param = variable("");
    const graph::Output m = variable("/m");
    const graph::Output v = variable("/v");
    const graph::Output grad = on(graph::placeholder(g, name + "/grad", DType::f32, {8}));
    feeds[name + "/grad"] = {DType::f32, {8}};
    const graph::NodeId update = g.add_node("ApplyAdam", {param, grad, m, v}, {}, name + "/ApplyAdam");
    g.mutable_node(update).device = device;
    updates.push_back(name + "/ApplyAdam");
  }
  compile::PlacementOptions placement{manager.devices(), &manager.device("sim:0"), true};
  std::unique_ptr<Executable> executable = prepare(g, feeds, {}, updates, placement);
  std::map<std::string, std::size_t> step_of;
  for (std::size_t index = 0; index < executable->steps.size(); ++index) {
    const Step& step = executable->steps[index];
    if (step.kind == Step::Kind::kernel) step_of[g.node(step.node).name] = index;
  }
  // follows(a, b): step a waits, directly or through other steps, for step b.
  std::function<bool(std::size_t, std::size_t)> follows = [&](std::size_t later, std::size_t earlier) {
    for (std::size_t before : executable->steps[later].after) {
      if (before == earlier || follows(before, earlier)) return true;
    }
    return false;
  };
  const std::size_t a = step_of.at("a/ApplyAdam"), b = step_of.at("b/ApplyAdam");
  const std::size_t c = step_of.at("c/ApplyAdam"), d = step_of.at("d/ApplyAdam");
  EXPECT_TRUE(follows(c, a)) << "updates on one device keep their schedule order";
  EXPECT_TRUE(follows(d, b));
  for (const auto& [later, earlier] : {std::pair{b, a}, std::pair{c, b}, std::pair{d, a}, std::pair{d, c}}) {
    EXPECT_FALSE(follows(later, earlier)) << g.node(executable->steps[later].node).name << " waits for "
                                          << g.node(executable->steps[earlier].node).name << " on another device";
  }
}

}  // namespace
}  // namespace tp::runtime
