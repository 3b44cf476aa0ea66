// SPDX-License-Identifier: Apache-2.0
// Session::run_async and PendingRun: runs launched before the previous one is waited for give each run its own
// results, exactly as run() one after another (on one device, and split over two with copies between them);
// the fed tensors live until the run's work is done; a kernel error fails its run and every run launched
// before it was reported, and the session runs on; wait() is one-shot; a run dropped unwaited still finishes.
// Every case runs on each accelerator backend present (sim, and opencl where an OpenCL device exists).
#include "tensorpool/runtime/pending_run.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "runtime/support/failing_op.hpp"
#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/op_registry.hpp"
#include "tensorpool/runtime/session.hpp"

namespace tp::runtime {
namespace {

using testing::build_mlp;
using testing::make_batch;

constexpr std::int64_t kIn = 12, kHidden = 16, kClasses = 4, kRows = 32, kSteps = 6;

FeedMap feeds_of(device::DeviceManager& manager, std::uint32_t seed) {
  const testing::Batch batch = make_batch(kRows, kIn, kClasses, seed);
  device::Device& cpu = manager.device("cpu:0");
  return {{"x", Tensor::from_vector<float>(batch.x, Shape{kRows, kIn}, cpu)},
          {"labels", Tensor::from_vector<std::int32_t>(batch.labels, Shape{kRows}, cpu)}};
}

// The second layer and what follows it on `second`, the first on `first`: every step copies between them.
testing::MlpGraph split_mlp(const std::string& first, const std::string& second) {
  testing::MlpGraph split = build_mlp(kIn, kHidden, kClasses, first);
  for (const graph::Node& node : split.graph.nodes()) {
    if (node.name.rfind("dense_1", 0) == 0 || node.name == "xent" || node.name == "loss" ||
        node.name.find("gradients/dense_1") != std::string::npos) {
      split.graph.mutable_node(node.id).device = second;
    }
  }
  return split;
}

// Two devices of every accelerator kind: sim:0 and sim:1, opencl:0 and opencl:1 (on PoCL's one device).
device::DeviceManagerOptions two_of_each() {
  device::DeviceManagerOptions options = testing::two_sim_devices();
  options.opencl_devices = 2;
  return options;
}

// The parameter: the first accelerator of the kind under test ("sim:0", "opencl:0").
class PendingRunOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  // Device `index` of the parameter's kind.
  std::string on(int index) const { return GetParam().substr(0, GetParam().find(':')) + ":" + std::to_string(index); }
};

struct Trained {
  std::vector<float> losses;
  std::vector<float> kernel;  // the first layer's, after the last step
};

// kSteps training steps, waiting for each before launching the next (in_flight 1) or keeping two launched.
Trained train(device::DeviceManager& manager, const testing::MlpGraph& mlp, std::size_t in_flight) {
  Session session(mlp.graph, {.devices = &manager});
  Trained trained;
  std::vector<PendingRun> pending;
  for (std::int64_t step = 1; step <= kSteps; ++step) {
    pending.push_back(session.run_async(feeds_of(manager, static_cast<std::uint32_t>(step % 4)), {mlp.loss},
                                        mlp.updates, {.step = step}));
    if (pending.size() == in_flight) {
      trained.losses.push_back(pending.front().wait().at(0).to_vector<float>().at(0));
      pending.erase(pending.begin());
    }
  }
  for (PendingRun& run : pending) trained.losses.push_back(run.wait().at(0).to_vector<float>().at(0));
  trained.kernel = session.read_variable("dense/kernel").to_vector<float>();
  return trained;
}

TEST_P(PendingRunOnDevice, RunsInFlightTrainExactlyAsRunsOneAfterAnother) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  const testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, on(0));
  const Trained serial = train(manager, mlp, 1);
  ASSERT_EQ(serial.losses.size(), static_cast<std::size_t>(kSteps));
  for (const std::size_t in_flight : {2, 3}) {
    const Trained overlapped = train(manager, mlp, in_flight);
    EXPECT_EQ(overlapped.losses, serial.losses) << in_flight << " in flight";
    EXPECT_EQ(overlapped.kernel, serial.kernel) << in_flight << " in flight";
  }
}

TEST_P(PendingRunOnDevice, RunsInFlightAcrossTwoDevicesTrainExactlyAsOneAfterAnother) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  const testing::MlpGraph split = split_mlp(on(0), on(1));
  const Trained serial = train(manager, split, 1);
  const Trained overlapped = train(manager, split, 2);
  EXPECT_EQ(overlapped.losses, serial.losses);
  EXPECT_EQ(overlapped.kernel, serial.kernel);
  EXPECT_EQ(serial.losses, train(manager, build_mlp(kIn, kHidden, kClasses, on(0)), 1).losses);
}

// Holds a device's stream 0 until open() (or destruction), so that a test sees a run while its work waits.
class StreamGate {
 public:
  explicit StreamGate(device::Device& device) {
    device.stream(0).enqueue([opened = opened_.get_future().share()] { opened.wait(); });
  }
  ~StreamGate() { open(); }
  void open() {
    if (!open_) opened_.set_value();
    open_ = true;
  }

 private:
  std::promise<void> opened_;
  bool open_ = false;
};

TEST_P(PendingRunOnDevice, TheFedTensorsLiveUntilTheRunsWorkHasReadThem) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  const testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, on(0));
  Session session(mlp.graph, {.devices = &manager});
  const float expected = session.run(feeds_of(manager, 1), {mlp.loss}).at(0).to_vector<float>().at(0);

  StreamGate gate(manager.device(on(0)));
  std::weak_ptr<Buffer> fed;
  PendingRun run = [&] {
    FeedMap feeds = feeds_of(manager, 1);
    fed = feeds.at("x").buffer();
    return session.run_async(feeds, {mlp.loss});
  }();  // the caller's references are gone
  EXPECT_FALSE(fed.expired()) << "the run dropped its feed while its work still has to read it";
  EXPECT_FALSE(run.done());
  gate.open();
  EXPECT_EQ(run.wait().at(0).to_vector<float>().at(0), expected);
  EXPECT_TRUE(run.done());
  EXPECT_TRUE(fed.expired()) << "the run kept its feed after wait()";
  EXPECT_THROW(run.wait(), InvalidArgument) << "a second wait()";
  PendingRun source = session.run_async(feeds_of(manager, 1), {mlp.loss});
  PendingRun moved = std::move(source);
  EXPECT_THROW(source.wait(), InvalidArgument) << "wait() on a moved-from run";  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.wait().at(0).to_vector<float>().at(0), expected);
}

TEST_P(PendingRunOnDevice, ARunDroppedWithoutWaitStillFinishesItsWork) {
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  const testing::MlpGraph mlp = build_mlp(kIn, kHidden, kClasses, on(0));
  Session session(mlp.graph, {.devices = &manager});
  device::Device& accelerator = manager.device(on(0));
  session.run(feeds_of(manager, 1), {mlp.loss});  // creates the variables
  const std::vector<float> initial = session.read_variable("dense/kernel").to_vector<float>();
  {
    StreamGate gate(accelerator);
    PendingRun run = session.run_async(feeds_of(manager, 1), {mlp.loss}, mlp.updates, {.step = 1});
    std::atomic<bool> opened{false};
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      opened = true;
      gate.open();
    });
    { const PendingRun dropped = std::move(run); }  // blocks until the work is done
    EXPECT_TRUE(opened.load()) << "the destructor returned before the run's work could run";
    opener.join();
  }
  Session reference(mlp.graph, {.devices = &manager});
  reference.run(feeds_of(manager, 1), {mlp.loss});
  reference.run(feeds_of(manager, 1), {mlp.loss}, mlp.updates, {.step = 1});
  const std::vector<float> updated = session.read_variable("dense/kernel").to_vector<float>();
  EXPECT_NE(updated, initial) << "the update did not run";
  EXPECT_EQ(updated, reference.read_variable("dense/kernel").to_vector<float>());
}

TEST_P(PendingRunOnDevice, AKernelErrorFailsItsRunAndTheRunsLaunchedBeforeItWasReported) {
  testing::register_fail_on_negative();
  device::DeviceManager manager(two_of_each(), testing::kNoEnv);
  graph::Graph g;
  const graph::Output x = graph::placeholder(g, "x", DType::f32, {1});
  g.add("Relu", {g.add("TestFailOnNegative", {x}, {}, "check")}, {}, "relu");
  Session session(g, {.default_device = on(0), .devices = &manager});
  auto feeds = [&](float value) {
    return FeedMap{{"x", Tensor::from_vector<float>(std::vector<float>{value}, Shape{1}, manager.device("cpu:0"))}};
  };
  PendingRun failing = session.run_async(feeds(-1), {"relu"});
  PendingRun behind = session.run_async(feeds(2), {"relu"});  // skipped behind the error
  EXPECT_THROW(failing.wait(), InvalidArgument);
  try {
    behind.wait();
    ADD_FAILURE() << "a run launched behind a failed one returned results";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("negative input"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(manager.device(on(0)).stream(0).failed()) << "the error is still kept after it was reported";
  EXPECT_EQ(session.run_async(feeds(3), {"relu"}).wait().at(0).to_vector<float>().at(0), 3.0F);
  EXPECT_EQ(session.run(feeds(4), {"relu"}).at(0).to_vector<float>().at(0), 4.0F);
}

INSTANTIATE_TEST_SUITE_P(Accelerators, PendingRunOnDevice,
                         ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::runtime
