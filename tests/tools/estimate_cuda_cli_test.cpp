// SPDX-License-Identifier: Apache-2.0
// tensorpool estimate for cuda devices. Without a GPU, `--device-memory` gives the capacity of planning-only
// cuda devices: the output names cuda:N, says no GPU was present and where the capacity came from, and the
// planned peak equals a sim device's for the same single-device step (the plan reads only what both kinds of
// device share: no host access, no shared memory, the same allocator); without --device-memory the error says
// to pass it; train never plans on such devices. With a GPU, the estimate is the GPU's own (no planning note).
#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tools/support/cli_runner.hpp"

namespace {

namespace fs = std::filesystem;
using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;
using tp::cli::testing::run_cli;

constexpr std::size_t k8GiB = std::size_t{8} << 30;

// A build without the CUDA backend has no cuda kernels to plan with: estimate refuses cuda devices there.
bool cuda_backend_built() {
  return tp::device::cuda_unavailable_reason().find("this build has no CUDA backend") == std::string::npos;
}

#define SKIP_WITHOUT_CUDA_BACKEND()                                                   \
  do {                                                                                \
    if (!cuda_backend_built()) GTEST_SKIP() << tp::device::cuda_unavailable_reason(); \
  } while (false)

class EstimateCudaCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
  }

  static bool gpu_present() { return !tp::device::cuda_physical_devices().empty(); }

  static nlohmann::json run_json(const std::string& arguments) {
    const CliRun run = run_cli(arguments, "env -u TP_CUDA_DEVICES -u TP_VISIBLE_DEVICES");
    EXPECT_EQ(run.exit_code, 0) << arguments << "\n" << run.output;
    // The JSON document starts at the first line that opens an object: log lines on stderr (run_cli merges
    // it) may come first.
    const std::size_t line = run.output.starts_with("{") ? std::string::npos : run.output.find("\n{");
    const std::string document = line == std::string::npos ? run.output : run.output.substr(line + 1);
    try {
      return nlohmann::json::parse(document);
    } catch (const std::exception& error) {
      ADD_FAILURE() << arguments << ": not JSON (" << error.what() << "):\n" << run.output;
      return {};
    }
  }
};

TEST_F(EstimateCudaCli, PlansCudaDevicesOfTheGivenMemory) {
  SKIP_WITHOUT_CUDA_BACKEND();
  for (const char* precision : {"float32", "mixed_float16", "mixed_bfloat16"}) {
    SCOPED_TRACE(precision);
    const std::string model = std::string(" --strategy one --batch-size 32 --precision ") + precision + " --json";
    const nlohmann::json cuda = run_json("estimate --devices cuda:0 --device-memory 8GiB" + model);
    const nlohmann::json sim = run_json("estimate --devices sim:0 --sim-memory 8GiB" + model);
    ASSERT_EQ(cuda.at("devices").size(), 1U);
    ASSERT_EQ(sim.at("devices").size(), 1U);
    const nlohmann::json& planned = cuda.at("devices").at(0);
    EXPECT_EQ(planned.at("device"), "cuda:0");
    EXPECT_EQ(planned.at("limit_bytes").get<std::size_t>(), k8GiB);
    EXPECT_TRUE(planned.at("fits").get<bool>());
    EXPECT_GT(planned.at("planned_peak_bytes").get<std::size_t>(), 0U);
    if (std::string(precision) == "mixed_bfloat16") {
      // On sim (the CPU kernels) the update keeps persistent bfloat16 copies of the weights (docs/mixed-precision.md),
      // which the CUDA graph casts each step instead: 2 bytes more per parameter of the main job's MLP.
      constexpr std::size_t kParameters = 784 * 512 + 512 + 512 * 10 + 10;
      EXPECT_EQ(planned.at("variable_bytes").get<std::size_t>() + 2 * kParameters,
                sim.at("devices").at(0).at("variable_bytes").get<std::size_t>());
    } else {
      EXPECT_EQ(planned.at("planned_peak_bytes"), sim.at("devices").at(0).at("planned_peak_bytes"));
      EXPECT_EQ(planned.at("variable_bytes"), sim.at("devices").at(0).at("variable_bytes"));
      EXPECT_EQ(planned.at("arena_bytes"), sim.at("devices").at(0).at("arena_bytes"));
    }
    EXPECT_EQ(planned.at("planning_only").get<bool>(), !gpu_present());
    const std::string note = planned.at("planning_note");
    if (gpu_present()) {
      EXPECT_TRUE(note.empty()) << note;
    } else {
      EXPECT_NE(note.find("no GPU was present"), std::string::npos) << note;
      EXPECT_NE(note.find("--device-memory 8GiB"), std::string::npos) << note;
    }
    EXPECT_FALSE(sim.at("devices").at(0).at("planning_only").get<bool>());
  }
}

TEST_F(EstimateCudaCli, TextOutputSaysThePlanIsForAGivenCapacity) {
  SKIP_WITHOUT_CUDA_BACKEND();
  if (gpu_present()) GTEST_SKIP() << "a GPU is present: cuda:0 plans as itself";
  const CliRun run =
      run_cli("estimate --devices cuda:0 --strategy one --device-memory 80GiB", "env -u TP_CUDA_DEVICES");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("cuda:0: planning only: no GPU was present"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("came from --device-memory 80GiB"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("planned peak on cuda:0"), std::string::npos) << run.output;
}

TEST_F(EstimateCudaCli, MirroredOverTwoPlanningDevices) {
  SKIP_WITHOUT_CUDA_BACKEND();
  if (gpu_present()) GTEST_SKIP() << "a GPU is present: its cuda devices plan as themselves";
  const nlohmann::json estimate = run_json("estimate --devices cuda:0,cuda:1 --device-memory 4GiB --json");
  ASSERT_EQ(estimate.at("devices").size(), 2U);
  EXPECT_EQ(estimate.at("devices").at(0).at("device"), "cuda:0");
  EXPECT_EQ(estimate.at("devices").at(1).at("device"), "cuda:1");
  for (const nlohmann::json& device : estimate.at("devices")) {
    EXPECT_TRUE(device.at("planning_only").get<bool>());
    EXPECT_EQ(device.at("limit_bytes").get<std::size_t>(), std::size_t{4} << 30);
  }
  EXPECT_EQ(estimate.at("devices").at(0).at("planned_peak_bytes"),
            estimate.at("devices").at(1).at("planned_peak_bytes"));
}

TEST_F(EstimateCudaCli, WithoutAGpuOrDeviceMemorySaysToPassIt) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present: estimate needs no --device-memory";
  const CliRun run = run_cli("estimate --devices cuda:0 --strategy one", "env -u TP_CUDA_DEVICES");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("no GPU is present"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--device-memory"), std::string::npos) << run.output;
}

TEST_F(EstimateCudaCli, TrainNeverRunsOnPlanningDevices) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present: train would run on it";
  const CliRun run =
      run_cli("train --devices cuda:0 --strategy one --device-memory 8GiB --epochs 1", "env -u TP_CUDA_DEVICES");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("cuda:0, which does not exist"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("planning only"), std::string::npos) << run.output;
}

// The devices behind the CLI: they refuse to run anything, naming themselves and why.
TEST(CudaPlanningDevice, PlansAndRunsNothing) {
  SKIP_WITHOUT_CUDA_BACKEND();
  if (!tp::device::cuda_physical_devices().empty()) GTEST_SKIP() << "a GPU is present: no planning-only devices";
  tp::device::DeviceManagerOptions options;
  options.cuda_planning = tp::device::DeviceManagerOptions::CudaPlanning{2, std::size_t{1} << 30, "the test"};
  tp::memory::MemoryConfig bfc = tp::device::DeviceManagerOptions::default_device_memory_config();
  bfc.allocator = tp::memory::AllocatorKind::bfc;
  options.memory_configs[tp::device::DeviceId{tp::device::DeviceKind::cuda, 1}] = bfc;
  tp::device::DeviceManager manager(options, [](const char*) -> const char* { return nullptr; });
  const std::vector<tp::device::Device*> cuda = manager.devices(tp::device::DeviceKind::cuda);
  ASSERT_EQ(cuda.size(), 2U);
  tp::device::Device& device = *cuda[0];
  EXPECT_EQ(device.name(), "cuda:0");
  EXPECT_EQ(device.capacity_bytes(), std::size_t{1} << 30);
  EXPECT_FALSE(device.host_accessible());
  EXPECT_EQ(device.shared_memory(), nullptr);
  EXPECT_NE(device.planning_note().find("came from the test"), std::string::npos) << device.planning_note();
  try {
    device.stream(0).enqueue([] {});
    ADD_FAILURE() << "a planning-only device ran a task";
  } catch (const tp::DeviceError& error) {
    EXPECT_NE(std::string(error.what()).find("cuda:0 is a planning-only device"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(manager.devices(tp::device::DeviceKind::cpu).front()->planning_note().empty());
  // cuda:1 runs bfc over a source that serves nothing, reporting cudaMalloc's 256-byte unit as a GPU's does.
  tp::device::Device& second = *cuda[1];
  EXPECT_EQ(second.memory().config().allocator, tp::memory::AllocatorKind::bfc);
  try {  // BFC reports its source's refusal as out of memory, quoting it
    (void)second.allocate(1024);
    ADD_FAILURE() << "a planning-only device allocated memory";
  } catch (const std::exception& error) {  // tp::OutOfMemoryError is a std::bad_alloc
    EXPECT_NE(std::string(error.what()).find("cuda:1 is a planning-only device"), std::string::npos) << error.what();
  }
  EXPECT_EQ(second.memory().stats().num_allocs, 0U);
}

TEST(CudaPlanningDevice, BadCountOrCapacityIsRefused) {
  tp::device::DeviceManager manager({}, [](const char*) -> const char* { return nullptr; });
  EXPECT_THROW(manager.set_cuda_planning_devices(0, std::size_t{1} << 30, "x"), tp::InvalidArgument);
  EXPECT_THROW(manager.set_cuda_planning_devices(1, 0, "x"), tp::InvalidArgument);
}

}  // namespace
