// SPDX-License-Identifier: Apache-2.0
// Training with CUDA graph capture (FitOptions::cuda_graphs; docs/cuda.md, "CUDA graphs") against training
// without it on cuda:0: bitwise the same variables and losses after several epochs, with the step's work
// launched as graphs (the stream counts its graph launches, so a capture that silently fell back to eager
// launches fails the test); on the stream, an eager command between captured ones. Needs a GPU: SKIPPED
// with the reason without one. The refusal of graphs on a device that is not a cuda device needs none.

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_stream_impl.hpp"
#include "backend/cuda/cuda_test_support.hpp"
#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/cuda_graphs.hpp"
#include "tensorpool/train/fit.hpp"

namespace tp::backend::cuda {
namespace {

constexpr std::int64_t kIn = 12, kClasses = 4, kRows = 512, kBatch = 32;

struct Trained {
  std::vector<std::pair<std::string, std::vector<std::uint32_t>>> variables;  // float bits
  std::vector<double> losses;                                                 // per epoch
  std::size_t graph_launches = 0;
  std::size_t eager_reruns = 0;
};

std::unique_ptr<train::Sequential> mlp(device::DeviceManager& manager, const std::string& on) {
  auto model = std::make_unique<train::Sequential>(
      std::vector<std::int64_t>{kIn},
      std::vector<train::Dense>{{.units = 32, .activation = train::Activation::relu},
                                {.units = kClasses, .activation = train::Activation::softmax}});
  model->compile({.optimizer = train::Adam{.learning_rate = 0.01}}, train::Strategy::one_device(on),
                 {.devices = &manager});
  return model;
}

data::Dataset synthetic(device::DeviceManager& manager) {
  const auto made = runtime::testing::make_batch(kRows, kIn, kClasses, 1);
  device::Device& cpu = manager.device("cpu:0");
  return data::Dataset::from_tensors(Tensor::from_vector<float>(made.x, Shape{kRows, kIn}, cpu),
                                     Tensor::from_vector<std::int32_t>(made.labels, Shape{kRows}, cpu))
      .shuffle(7)
      .batch(kBatch)
      .stage_on(cpu);
}

Trained train_on_cuda(bool graphs, std::int64_t steps_in_flight) {
  auto manager = testing::make_manager(testing::cuda_options());
  const data::Dataset dataset = synthetic(*manager);
  auto model = mlp(*manager, "cuda:0");
  const train::FitResult result =
      train::fit(*model, dataset, {.epochs = 3, .steps_in_flight = steps_in_flight, .cuda_graphs = graphs});
  Trained trained;
  for (const train::EpochLogs& epoch : result.history.epochs) trained.losses.push_back(epoch.loss);
  for (const auto& [name, tensor] : model->variables()) {
    std::vector<std::uint32_t> bits;
    for (const float value : tensor.to_vector<float>()) bits.push_back(std::bit_cast<std::uint32_t>(value));
    trained.variables.emplace_back(name, std::move(bits));
  }
  auto* stream = dynamic_cast<CudaStreamImpl*>(&manager->device("cuda:0").stream(0));
  if (stream != nullptr) {
    trained.graph_launches = stream->graph_launches();
    trained.eager_reruns = stream->eager_reruns();
  }
  return trained;
}

void expect_same_training(const Trained& eager, const Trained& graphs) {
  EXPECT_EQ(eager.losses, graphs.losses);
  ASSERT_EQ(eager.variables.size(), graphs.variables.size());
  for (std::size_t k = 0; k < eager.variables.size(); ++k) {
    EXPECT_EQ(eager.variables[k].first, graphs.variables[k].first);
    EXPECT_TRUE(eager.variables[k].second == graphs.variables[k].second)
        << eager.variables[k].first << " differs bitwise between eager and graph training";
  }
}

TEST(CudaGraphTraining, GivesBitwiseTheVariablesOfEagerTraining) {
  TP_REQUIRE_CUDA();
  const Trained eager = train_on_cuda(false, 1);
  EXPECT_EQ(eager.graph_launches, 0U);
  const Trained graphs = train_on_cuda(true, 1);
  // 3 epochs of kRows / kBatch steps, the first eager (warm-up): at least one graph per later step (a step may
  // split into several segments).
  EXPECT_GE(graphs.graph_launches, static_cast<std::size_t>(3 * kRows / kBatch - 1));
  EXPECT_EQ(graphs.eager_reruns, 0U) << "a segment of the step could not be captured (see the log)";
  expect_same_training(eager, graphs);
}

TEST(CudaGraphTraining, GivesTheSameVariablesWithTwoStepsInFlight) {
  TP_REQUIRE_CUDA();
  const Trained eager = train_on_cuda(false, 2);
  const Trained graphs = train_on_cuda(true, 2);
  EXPECT_GT(graphs.graph_launches, 0U);
  expect_same_training(eager, graphs);
}

// On the stream itself: commands go into graphs, an eager command ends the segment and runs uncaptured, and the
// work runs once, in order (the last fill wins).
TEST(CudaGraphStream, EagerCommandsEndTheSegmentAndAreNeverCaptured) {
  TP_REQUIRE_CUDA();
  auto manager = testing::make_manager(testing::cuda_options());
  device::Device& gpu = manager->device("cuda:0");
  auto& stream = dynamic_cast<CudaStreamImpl&>(gpu.stream(0));
  const Tensor buffer = Tensor::empty(Shape{256}, DType::f32, gpu, TensorTag{.name = "graph stream test"});
  std::vector<cudaStreamCaptureStatus> seen;  // written on the worker only, read after synchronize()
  auto note = [&stream, &seen] {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream.native(), &status), "cudaStreamIsCapturing");
    seen.push_back(status);
  };
  auto fill = [&stream, &note, buffer](int value) {
    return [&stream, &note, buffer, value] {
      check(cudaMemsetAsync(buffer.data(), value, buffer.nbytes(), stream.native()), "cudaMemsetAsync");
      note();
    };
  };
  stream.set_graph_capture(true);
  stream.enqueue_commands(fill(1));
  stream.enqueue_commands(fill(2));
  stream.enqueue_eager_commands(note);
  stream.enqueue_commands(fill(3));
  stream.synchronize();
  stream.set_graph_capture(false);
  const std::vector<cudaStreamCaptureStatus> expected{cudaStreamCaptureStatusActive, cudaStreamCaptureStatusActive,
                                                      cudaStreamCaptureStatusNone, cudaStreamCaptureStatusActive};
  EXPECT_EQ(seen, expected);
  EXPECT_GE(stream.graph_launches(), 2U);
  EXPECT_EQ(stream.eager_reruns(), 0U);
  for (const float value : buffer.to_vector<float>()) EXPECT_EQ(std::bit_cast<std::uint32_t>(value), 0x03030303U);
}

TEST(CudaGraphTraining, IsRefusedOnADeviceThatIsNotCuda) {
  device::DeviceManagerOptions options = runtime::testing::two_sim_devices();
  options.opencl_devices = 0;
  auto manager = testing::make_manager(options);
  const data::Dataset dataset = synthetic(*manager);
  auto model = mlp(*manager, "sim:0");
  EXPECT_THROW(train::fit(*model, dataset, {.epochs = 1, .cuda_graphs = true}), InvalidArgument);
  EXPECT_THROW(device::set_cuda_graph_capture(manager->device("sim:0"), true), InvalidArgument);
  EXPECT_NO_THROW(device::set_cuda_graph_capture(manager->device("sim:0"), false));  // off changes nothing there
  // Refused before training: the model trains as usual afterwards.
  const train::FitResult result = train::fit(*model, dataset, {.epochs = 1});
  EXPECT_EQ(result.steps, kRows / kBatch);
}

}  // namespace
}  // namespace tp::backend::cuda
