// SPDX-License-Identifier: Apache-2.0
// Sessions: a training step through the placer, the static planner and the executor; the plan is known before
// the first run and matches what the device measures; steady-state steps make no allocator calls; planner on
// and off agree; placement across devices and soft placement; feed errors; feeds already on the device bound in
// place; variables; close(). Every case
// runs on each accelerator backend present (sim:0, and opencl:0 where an OpenCL device exists).
#include "tensorpool/runtime/session.hpp"

#include <gtest/gtest.h>

#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::runtime {
namespace {

using testing::build_mlp;
using testing::make_batch;

constexpr std::int64_t kIn = 12, kHidden = 16, kClasses = 4, kRows = 32;

FeedMap feeds_of(device::DeviceManager& manager, const testing::Batch& batch) {
  device::Device& cpu = manager.device("cpu:0");
  return {{"x", Tensor::from_vector<float>(batch.x, Shape{kRows, kIn}, cpu)},
          {"labels", Tensor::from_vector<std::int32_t>(batch.labels, Shape{kRows}, cpu)}};
}

std::vector<float> train(device::DeviceManager& manager, bool planner, int steps, const std::string& device) {
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, device);
  Session session(mlp.graph, {.name = planner ? "planned" : "online", .planner = planner, .devices = &manager});
  std::vector<float> losses;
  for (int step = 1; step <= steps; ++step) {
    const auto batch = make_batch(kRows, kIn, kClasses, static_cast<std::uint32_t>(step % 4));
    const auto fetched = session.run(feeds_of(manager, batch), {mlp.loss}, mlp.updates, {.step = step});
    losses.push_back(fetched.at(0).to_vector<float>().at(0));
  }
  return losses;
}

// Two devices of every accelerator kind (sim:0 and sim:1, opencl:0 and opencl:1 on PoCL's one device).
device::DeviceManagerOptions two_of_each() {
  device::DeviceManagerOptions options = testing::two_sim_devices();
  options.opencl_devices = 2;
  return options;
}

// The parameter: the accelerator the graph is placed on ("sim:0", "opencl:0").
class SessionOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  // The second device of the parameter's kind ("sim:1", "opencl:1").
  std::string second() const { return GetParam().substr(0, GetParam().find(':')) + ":1"; }
};

TEST_P(SessionOnDevice, TrainsTheMlpAndTheLossFalls) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  const std::vector<float> losses = train(manager, true, 40, GetParam());
  EXPECT_LT(losses.back(), 0.6F * losses.front()) << "first " << losses.front() << " last " << losses.back();
}

TEST_P(SessionOnDevice, PlannerOnAndOffComputeTheSameNumbers) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  EXPECT_EQ(train(manager, true, 5, GetParam()), train(manager, false, 5, GetParam()));
}

TEST_P(SessionOnDevice, ThePlanIsKnownBeforeTheFirstRunAndTheDeviceMeasuresExactlyIt) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, GetParam());
  Session session(mlp.graph, {.devices = &manager});
  device::Device& accelerator = manager.device(GetParam());
  const FeedTypes types = {{"x", {DType::f32, {kRows, kIn}}}, {"labels", {DType::i32, {kRows}}}};
  const MemoryPlan plan = session.plan(types, {mlp.loss}, mlp.updates);
  EXPECT_EQ(accelerator.memory().stats().bytes_requested, 0u) << "plan() allocated";
  ASSERT_EQ(plan.devices.size(), 1u);
  const DevicePlan& device_plan = plan.devices[0];
  EXPECT_EQ(device_plan.device, GetParam());
  const std::size_t parameters = (kIn * kHidden + kHidden + kHidden * kClasses + kClasses) * sizeof(float);
  EXPECT_EQ(device_plan.variable_bytes, 3 * parameters);  // weights plus Adam's m and v
  EXPECT_GE(device_plan.arena_bytes, device_plan.lower_bound_bytes);
  EXPECT_LE(static_cast<double>(device_plan.arena_bytes), 1.02 * static_cast<double>(device_plan.lower_bound_bytes));
  EXPECT_FALSE(plan.tensors.empty());

  accelerator.memory().reset_peak();
  const auto batch = make_batch(kRows, kIn, kClasses, 1);
  session.run(feeds_of(manager, batch), {mlp.loss}, mlp.updates, {.step = 1});
  EXPECT_EQ(accelerator.memory().stats().peak_bytes_requested, device_plan.planned_peak_bytes);
  // Steady state: later steps make no call into the device's allocator.
  const std::uint64_t allocations = accelerator.memory().stats().num_allocs;
  for (int step = 2; step <= 4; ++step) session.run(feeds_of(manager, batch), {mlp.loss}, mlp.updates, {.step = step});
  EXPECT_EQ(accelerator.memory().stats().num_allocs, allocations);
}

TEST_P(SessionOnDevice, CloseReturnsAllOfTheSessionsMemory) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  device::Device& accelerator = manager.device(GetParam());
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, GetParam());
  Session session(mlp.graph, {.devices = &manager});
  session.run(feeds_of(manager, make_batch(kRows, kIn, kClasses, 1)), {mlp.loss}, mlp.updates);
  EXPECT_GT(accelerator.memory().stats().bytes_requested, 0u);
  EXPECT_GT(session.memory_stats(GetParam()).bytes_requested, 0u);
  session.close();
  EXPECT_EQ(accelerator.memory().stats().bytes_requested, 0u);
  EXPECT_THROW(session.run({}, {mlp.loss}), InvalidArgument);
}

TEST_P(SessionOnDevice, VariablesPersistAndCanBeReadAndAssigned) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, GetParam());
  Session session(mlp.graph, {.devices = &manager});
  const auto batch = make_batch(kRows, kIn, kClasses, 1);
  session.run(feeds_of(manager, batch), {mlp.loss}, mlp.updates, {.step = 1});
  const std::vector<float> after_one = session.read_variable("dense/bias").to_vector<float>();
  EXPECT_NE(after_one, std::vector<float>(kHidden, 0.0F));  // Adam moved it
  const std::vector<float> ones(kHidden, 1.0F);
  session.assign_variable("dense/bias", Tensor::from_vector<float>(ones, Shape{kHidden}, manager.device("cpu:0")));
  EXPECT_EQ(session.read_variable("dense/bias").to_vector<float>(), ones);
  EXPECT_THROW(session.assign_variable(
                   "dense/bias", Tensor::from_vector<float>(ones, Shape{kHidden / 2, 2}, manager.device("cpu:0"))),
               InvalidArgument);
  EXPECT_THROW(session.read_variable("nope"), InvalidArgument);
}

TEST_P(SessionOnDevice, BadFeedsAndNamesFailBeforeAnyKernelRuns) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, GetParam());
  Session session(mlp.graph, {.devices = &manager});
  device::Device& cpu = manager.device("cpu:0");
  const auto batch = make_batch(kRows, kIn, kClasses, 1);
  FeedMap feeds = feeds_of(manager, batch);
  auto expect_error = [&](const FeedMap& bad, const std::vector<std::string>& fetches, const std::string& needle) {
    try {
      session.run(bad, fetches, mlp.updates);
      FAIL() << "no error; expected one naming " << needle;
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  };
  FeedMap missing = feeds;
  missing.erase("labels");
  expect_error(missing, {mlp.loss}, "labels");
  FeedMap wrong_dtype = feeds;
  wrong_dtype["labels"] = Tensor::from_vector<float>(std::vector<float>(kRows), Shape{kRows}, cpu);
  expect_error(wrong_dtype, {mlp.loss}, "labels");
  FeedMap wrong_shape = feeds;
  wrong_shape["x"] = Tensor::from_vector<float>(std::vector<float>(kRows * 3), Shape{kRows, 3}, cpu);
  expect_error(wrong_shape, {mlp.loss}, "x");
  expect_error(feeds, {"no_such_node"}, "no_such_node");
  EXPECT_EQ(manager.device(GetParam()).memory().stats().bytes_requested, 0u) << "an error left memory behind";
}

TEST_P(SessionOnDevice, PlacesAcrossDevicesWithCopiesAndAgreesWithOneDevice) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  testing::MlpGraph split = build_mlp(kIn, kHidden, kClasses, GetParam());
  // The second layer and everything after it on the second device; the rest stays on the first.
  for (const graph::Node& node : split.graph.nodes()) {
    if (node.name.rfind("dense_1", 0) == 0 || node.name == "xent" || node.name == "loss" ||
        node.name.find("gradients/dense_1") != std::string::npos) {
      split.graph.mutable_node(node.id).device = second();
    }
  }
  Session session(split.graph, {.devices = &manager});
  const FeedTypes types = {{"x", {DType::f32, {kRows, kIn}}}, {"labels", {DType::i32, {kRows}}}};
  const MemoryPlan plan = session.plan(types, {split.loss}, split.updates);
  EXPECT_EQ(plan.devices.size(), 2u);
  bool copied = false;
  for (const PlannedTensor& tensor : plan.tensors) {
    copied = copied || tensor.name.find("@" + second()) != std::string::npos;
  }
  EXPECT_TRUE(copied);
  std::vector<float> split_losses;
  for (int step = 1; step <= 5; ++step) {
    const auto batch = make_batch(kRows, kIn, kClasses, static_cast<std::uint32_t>(step % 4));
    split_losses.push_back(session.run(feeds_of(manager, batch), {split.loss}, split.updates, {.step = step})
                               .at(0)
                               .to_vector<float>()
                               .at(0));
  }
  EXPECT_EQ(split_losses, train(manager, true, 5, GetParam()));
}

TEST_P(SessionOnDevice, SoftPlacementMovesAnOpWithoutAKernelToTheCpu) {
  graph::OpRegistry& registry = graph::OpRegistry::global();
  if (registry.find("TestCpuOnlyNegate") == nullptr) {
    graph::OpDef negate;
    negate.name = "TestCpuOnlyNegate";
    negate.num_inputs = 1;
    negate.infer = [](const graph::InferenceContext& context) { return context.inputs; };
    negate.kernels[device::DeviceKind::cpu] = [](graph::KernelContext& context) {
      const Tensor input = context.inputs[0];
      const Tensor output = context.outputs[0];
      context.stream.enqueue([input, output] {
        for (std::int64_t i = 0; i < input.num_elements(); ++i) output.data<float>()[i] = -input.data<float>()[i];
      });
    };
    registry.add(std::move(negate));
  }
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  graph::Graph g;
  const graph::Output x = graph::placeholder(g, "x", DType::f32, {3});
  const graph::Output negated = g.add("TestCpuOnlyNegate", {g.add("Relu", {x}, {}, "relu")}, {}, "negate");
  g.add("Scale", {negated}, {{"alpha", 2.0}}, "double");
  const FeedMap feeds = {
      {"x", Tensor::from_vector<float>(std::vector<float>{-1, 2, 3}, Shape{3}, manager.device("cpu:0"))}};
  Session soft(g, {.default_device = GetParam(), .devices = &manager});
  EXPECT_EQ(soft.run(feeds, {"double"}).at(0).to_vector<float>(), (std::vector<float>{0, -4, -6}));
  const MemoryPlan plan = soft.plan({{"x", {DType::f32, {3}}}}, {"double"});
  ASSERT_EQ(plan.placement_log.size(), 1u);
  EXPECT_NE(plan.placement_log[0].find("negate"), std::string::npos);
  Session hard(g, {.default_device = GetParam(), .soft_placement = false, .devices = &manager});
  try {
    hard.run(feeds, {"double"});
    FAIL() << "hard placement ran an op without a kernel";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("negate"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(GetParam()), std::string::npos) << error.what();
  }
}

// What a few steps of the MLP give on the parameter's device, fetching the loss: the plan, the losses of runs
// one after another and of two runs in flight at once, and how many allocations the device's shared memory
// served meanwhile.
struct FetchRuns {
  MemoryPlan plan;
  std::vector<float> losses;  // steps 1..3, then steps 4 and 5 in flight together
  std::size_t measured_peak_requested = 0;
  std::uint64_t shared_allocations = 0;
  std::size_t shared_in_use_after = 0;
};

FetchRuns run_fetching_the_loss(device::DeviceManagerOptions options, const std::string& name) {
  device::DeviceManager manager(std::move(options), testing::kNoEnv);
  device::Device& accelerator = manager.device(name);
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, name);
  Session session(mlp.graph, {.devices = &manager});
  FetchRuns runs;
  const FeedTypes types = {{"x", {DType::f32, {kRows, kIn}}}, {"labels", {DType::i32, {kRows}}}};
  runs.plan = session.plan(types, {mlp.loss}, mlp.updates);
  memory::MemoryStack* shared = accelerator.shared_memory();
  const std::uint64_t shared_before = shared != nullptr ? shared->stats().num_allocs : 0;
  accelerator.memory().reset_peak();
  for (int step = 1; step <= 3; ++step) {
    const auto batch = make_batch(kRows, kIn, kClasses, static_cast<std::uint32_t>(step));
    runs.losses.push_back(
        session.run(feeds_of(manager, batch), {mlp.loss}, mlp.updates, {.step = step}).at(0).to_vector<float>().at(0));
  }
  runs.measured_peak_requested = accelerator.memory().stats().peak_bytes_requested;
  // Two runs in flight: the first one's loss must not be overwritten by the second before it is read.
  const FeedMap fourth = feeds_of(manager, make_batch(kRows, kIn, kClasses, 4));
  const FeedMap fifth = feeds_of(manager, make_batch(kRows, kIn, kClasses, 5));
  PendingRun first = session.run_async(fourth, {mlp.loss}, mlp.updates, {.step = 4});
  PendingRun second = session.run_async(fifth, {mlp.loss}, mlp.updates, {.step = 5});
  runs.losses.push_back(first.wait().at(0).to_vector<float>().at(0));
  runs.losses.push_back(second.wait().at(0).to_vector<float>().at(0));
  accelerator.synchronize();
  if (shared != nullptr) {
    runs.shared_allocations = shared->stats().num_allocs - shared_before;
    runs.shared_in_use_after = shared->stats().bytes_in_use;
  }
  return runs;
}

// A fetched result (the loss) on a device with shared memory (opencl with fine-grained SVM) is allocated per
// run from that memory, outside the step's arena, and read by the host in place; the losses are bitwise the
// device-memory path's (MemoryConfig::shared_kinds without `fetched`), two runs in flight each get their own,
// and the device memory still peaks at exactly the plan. On a device without shared memory (sim) the default
// changes nothing: the same plan, to the offset, as with shared_kinds empty.
TEST_P(SessionOnDevice, FetchedResultsLiveInSharedMemoryWhereTheDeviceHasIt) {
  device::DeviceManagerOptions device_path = two_of_each();
  device_path.default_memory_config.shared_kinds = {};
  const FetchRuns in_device_memory = run_fetching_the_loss(device_path, GetParam());
  const FetchRuns by_default = run_fetching_the_loss(two_of_each(), GetParam());
  bool has_shared_memory = false;
  {
    device::DeviceManager manager(two_of_each(), testing::kNoEnv);
    has_shared_memory = manager.device(GetParam()).shared_memory() != nullptr;
  }
  EXPECT_EQ(by_default.losses, in_device_memory.losses);
  ASSERT_EQ(by_default.plan.devices.size(), 1u);
  ASSERT_EQ(in_device_memory.plan.devices.size(), 1u);
  const DevicePlan& planned = by_default.plan.devices[0];
  EXPECT_EQ(by_default.measured_peak_requested, planned.planned_peak_bytes);
  EXPECT_EQ(in_device_memory.measured_peak_requested, in_device_memory.plan.devices[0].planned_peak_bytes);
  EXPECT_EQ(in_device_memory.plan.devices[0].shared_bytes, 0u);
  const auto loss_of = [](const MemoryPlan& plan) {
    for (const PlannedTensor& tensor : plan.tensors) {
      if (tensor.name == "loss:0") return tensor;
    }
    ADD_FAILURE() << "the plan has no loss:0";
    return PlannedTensor{};
  };
  EXPECT_FALSE(loss_of(in_device_memory.plan).shared);
  if (!has_shared_memory) {
    EXPECT_EQ(planned.shared_bytes, 0u);
    EXPECT_EQ(planned.arena_bytes, in_device_memory.plan.devices[0].arena_bytes);
    ASSERT_EQ(by_default.plan.tensors.size(), in_device_memory.plan.tensors.size());
    for (std::size_t index = 0; index < by_default.plan.tensors.size(); ++index) {
      EXPECT_FALSE(by_default.plan.tensors[index].shared);
      EXPECT_EQ(by_default.plan.tensors[index].offset, in_device_memory.plan.tensors[index].offset);
    }
    return;
  }
  const PlannedTensor loss = loss_of(by_default.plan);
  EXPECT_TRUE(loss.shared);
  EXPECT_EQ(loss.kind, memory::AllocationKind::fetched);
  EXPECT_EQ(loss.planned_bytes, 0u);
  EXPECT_EQ(planned.shared_bytes, sizeof(float));
  EXPECT_LE(planned.arena_bytes, in_device_memory.plan.devices[0].arena_bytes);
  EXPECT_EQ(by_default.shared_allocations, 5u) << "one shared allocation per run for the fetched loss";
  EXPECT_EQ(by_default.shared_in_use_after, 0u) << "a fetched result outlived its run's readback";
  EXPECT_EQ(in_device_memory.shared_allocations, 0u);
}

// A fed tensor that already lives on the placeholder's device (a buffer of it) is bound as the value in place:
// the plan declaring the feeds there (fed_on) gives them no slot, the session's memory peaks at exactly that
// smaller plan, and the losses are bitwise those of feeds copied in from the host. Feeds declared on a host
// device stay copies (the same plan, to the offset), and fed_on naming a non-feed or an unknown device is
// refused before anything is prepared.
TEST_P(SessionOnDevice, FeedsAlreadyOnTheDeviceAreBoundInPlace) {
  const FeedTypes types = {{"x", {DType::f32, {kRows, kIn}}}, {"labels", {DType::i32, {kRows}}}};
  struct Runs {
    MemoryPlan plan;
    std::vector<float> losses;
    std::size_t session_peak = 0;
  };
  const auto run = [&](bool on_device) {
    device::DeviceManager manager(two_of_each(), testing::kNoEnv);
    device::Device& accelerator = manager.device(GetParam());
    testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, GetParam());
    Session session(mlp.graph, {.devices = &manager});
    Runs runs;
    runs.plan = session.plan(types, {mlp.loss}, mlp.updates,
                             on_device ? FeedDevices{{"x", GetParam()}, {"labels", GetParam()}} : FeedDevices{});
    for (int step = 1; step <= 3; ++step) {
      const auto batch = make_batch(kRows, kIn, kClasses, static_cast<std::uint32_t>(step));
      FeedMap feeds = feeds_of(manager, batch);
      if (on_device) {
        feeds = {{"x", Tensor::from_vector<float>(batch.x, Shape{kRows, kIn}, accelerator)},
                 {"labels", Tensor::from_vector<std::int32_t>(batch.labels, Shape{kRows}, accelerator)}};
      }
      runs.losses.push_back(session.run(feeds, {mlp.loss}, mlp.updates, {.step = step}).at(0).to_vector<float>().at(0));
    }
    runs.session_peak = session.memory_stats(GetParam()).peak_bytes_requested;
    return runs;
  };
  const Runs copied = run(false);
  const Runs bound = run(true);
  EXPECT_EQ(bound.losses, copied.losses);
  ASSERT_EQ(bound.plan.devices.size(), 1u);
  ASSERT_EQ(copied.plan.devices.size(), 1u);
  std::size_t fed_bytes = 0;
  for (const PlannedTensor& tensor : bound.plan.tensors) {
    const bool fed = tensor.name == "x:0" || tensor.name == "labels:0";
    EXPECT_EQ(tensor.fed_in_place, fed) << tensor.name;
    if (!fed) continue;
    EXPECT_EQ(tensor.planned_bytes, 0u) << tensor.name;
    EXPECT_EQ(tensor.device, GetParam());
    fed_bytes += tensor.bytes;
  }
  EXPECT_EQ(fed_bytes, static_cast<std::size_t>(kRows * kIn * 4 + kRows * 4));
  EXPECT_LT(bound.plan.devices[0].arena_bytes, copied.plan.devices[0].arena_bytes);
  EXPECT_EQ(bound.session_peak, bound.plan.devices[0].planned_peak_bytes);
  EXPECT_EQ(copied.session_peak, copied.plan.devices[0].planned_peak_bytes);

  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, GetParam());
  Session session(mlp.graph, {.devices = &manager});
  const MemoryPlan on_host = session.plan(types, {mlp.loss}, mlp.updates, {{"x", "cpu:0"}, {"labels", "cpu:0"}});
  ASSERT_EQ(on_host.tensors.size(), copied.plan.tensors.size());
  EXPECT_EQ(on_host.devices[0].arena_bytes, copied.plan.devices[0].arena_bytes);
  for (std::size_t index = 0; index < on_host.tensors.size(); ++index) {
    EXPECT_FALSE(on_host.tensors[index].fed_in_place);
    EXPECT_EQ(on_host.tensors[index].offset, copied.plan.tensors[index].offset) << on_host.tensors[index].name;
  }
  EXPECT_THROW(session.plan(types, {mlp.loss}, mlp.updates, {{"y", GetParam()}}), InvalidArgument);
  EXPECT_THROW(session.plan(types, {mlp.loss}, mlp.updates, {{"x", "sim:9"}}), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Accelerators, SessionOnDevice,
                         ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::runtime
