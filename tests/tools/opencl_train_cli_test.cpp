// SPDX-License-Identifier: Apache-2.0
// tensorpool on OpenCL devices (issue 19), as a user runs it: the main job, shortened to one epoch on the first
// 2000 training examples, trains on opencl:0 and mirrored over opencl:0,opencl:1 (TP_OPENCL_DEVICES=2: PoCL's one
// CPU device split in two), ZeRO included, to sim's test accuracy and loss within the float tolerance, with the
// memory summary and the profiler's files; `estimate` predicts the opencl devices' peaks exactly as `profile`
// measures them, as on sim; a missing opencl device and an allocator the backend lacks are refused with exit 2 and
// the fix. Skips, saying why, when the process sees no opencl device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <system_error>

#include "tools/support/cli_runner.hpp"

namespace {

namespace fs = std::filesystem;
using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;
using tp::cli::testing::run_cli;

// The OpenCL kernels (CLBlast's GEMM, our reductions) add float32 terms in another order than the CPU kernels
// (OpenBLAS), so each op's result may differ from sim's in the last bits, and Adam carries those differences
// through every step; they stay orders of magnitude below these bounds over one short epoch. A kernel fault (a
// wrong index, a missed element, a wrong optimizer update) moves the loss by far more than 1e-3 of itself. A
// last-bit difference can flip a test example whose two best classes tie: allow 10 of the 10000.
constexpr double kLossRelativeTolerance = 1e-3;
constexpr double kAccuracyTolerance = 10.0 / 10000.0;

// The tensorpool variables unset (the caller's must not matter), then `variables` set.
CliRun run_clean(const std::string& arguments, const std::string& variables = "") {
  return run_cli(arguments,
                 "env -u TP_SIM_DEVICES -u TP_SIM_MEMORY -u TP_VISIBLE_DEVICES -u TP_ALLOW_GROWTH "
                 "-u TP_ALLOCATOR -u TP_MEMORY_FRACTION -u TP_OPENCL_DEVICES " +
                     variables);
}

// PoCL compiles each kernel on first use (CLBlast's GEMM for many seconds); one cache beside the test binaries,
// shared by every test process of the build, makes the later processes fast. The caller's setting wins.
void share_pocl_cache() {
  if (std::getenv("POCL_CACHE_DIR") != nullptr) return;
  const fs::path cache = cli_path().parent_path().parent_path() / "pocl-cache";
  std::error_code error;
  fs::create_directories(cache, error);
  if (!error) ::setenv("POCL_CACHE_DIR", cache.c_str(), /*overwrite=*/0);
}

// How many opencl devices `tensorpool devices --json` lists under `variables` (-1: the command failed).
int opencl_device_count(const std::string& variables) {
  const CliRun run = run_clean("devices --json", variables);
  if (run.exit_code != 0) return -1;
  try {
    int count = 0;
    const nlohmann::json listed = nlohmann::json::parse(run.output);
    for (const nlohmann::json& device : listed.at("devices")) {
      if (device.at("kind").get<std::string>() == "opencl") ++count;
    }
    return count;
  } catch (const std::exception&) {
    return -1;
  }
}

class OpenClCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
    share_pocl_cache();
    if (opencl_device_count("") <= 0) {
      GTEST_SKIP() << "no opencl device: `tensorpool devices` lists none (a build without the OpenCL backend, or "
                      "no OpenCL driver: scripts/install-deps installs pocl-opencl-icd)";
    }
    directory_ = fs::temp_directory_path() / ("tp_opencl_cli_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override {
    if (!directory_.empty()) fs::remove_all(directory_);
  }

  static bool have_data() { return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); }

  // `train` with `arguments` on the shortened main job; its --summary-json, or an empty object on failure.
  nlohmann::json train(const std::string& name, const std::string& arguments, const std::string& variables = "",
                       std::string* output = nullptr) {
    const fs::path summary = directory_ / (name + ".json");
    const std::string command =
        "train --epochs 1 --limit-train 2000 --seed 7 " + arguments + " --summary-json '" + summary.string() + "'";
    const CliRun run = run_clean(command, variables);
    EXPECT_EQ(run.exit_code, 0) << command << "\n" << run.output;
    if (output != nullptr) *output = run.output;
    if (run.exit_code != 0) return nlohmann::json::object();
    std::ifstream in(summary);
    return nlohmann::json::parse(in);
  }

  static nlohmann::json run_json(const std::string& arguments, const std::string& variables) {
    const CliRun run = run_clean(arguments, variables);
    EXPECT_EQ(run.exit_code, 0) << arguments << "\n" << run.output;
    try {
      return nlohmann::json::parse(run.output);
    } catch (const std::exception& error) {
      ADD_FAILURE() << arguments << ": not JSON (" << error.what() << "):\n" << run.output;
      return nlohmann::json::object();
    }
  }

  fs::path directory_;
};

// The OpenCL run against the same run on sim: same step count, accuracy and losses within the tolerance, and
// the same plan on every device but for the fetched results (the loss, the correct count), which an opencl
// device with shared memory keeps out of its arena (MemoryConfig::shared_kinds), and, on one such device, the
// batch it reads in place from there: its planned peak is at most sim's, and equal to it on a device without
// shared memory.
void expect_same_training(const nlohmann::json& opencl, const nlohmann::json& sim) {
  ASSERT_TRUE(opencl.contains("test_accuracy") && sim.contains("test_accuracy")) << opencl << "\n" << sim;
  EXPECT_EQ(opencl.at("steps"), sim.at("steps"));
  EXPECT_NEAR(opencl.at("test_accuracy").get<double>(), sim.at("test_accuracy").get<double>(), kAccuracyTolerance);
  for (const char* loss : {"test_loss", "final_train_loss"}) {
    const double expected = sim.at(loss).get<double>();
    EXPECT_NEAR(opencl.at(loss).get<double>(), expected, kLossRelativeTolerance * std::abs(expected)) << loss;
  }
  ASSERT_EQ(opencl.at("devices").size(), sim.at("devices").size());
  for (std::size_t index = 0; index < sim.at("devices").size(); ++index) {
    const nlohmann::json& device = opencl.at("devices").at(index);
    EXPECT_EQ(device.at("device").get<std::string>(), "opencl:" + std::to_string(index));
    EXPECT_LE(device.at("planned_peak_bytes").get<std::size_t>(),
              sim.at("devices").at(index).at("planned_peak_bytes").get<std::size_t>())
        << device;
    EXPECT_GE(device.at("peak_in_use_bytes").get<std::size_t>(), device.at("planned_peak_bytes").get<std::size_t>())
        << device;
  }
}

TEST_F(OpenClCli, OneDeviceTrainsTheMainJobToSimsAccuracy) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  std::string output;
  const fs::path profile = directory_ / "profile";
  const nlohmann::json opencl =
      train("opencl", "--devices opencl:0 --strategy one --profile '" + profile.string() + "'", "", &output);
  const nlohmann::json sim = train("sim", "--devices sim:0 --strategy one");
  expect_same_training(opencl, sim);
  for (const char* text : {"one strategy on opencl:0", "Memory summary", "opencl:0: peak in use", "planned peak"}) {
    EXPECT_NE(output.find(text), std::string::npos) << text << " missing from\n" << output;
  }
  for (const char* file : {"summary.txt", "report.html", "trace.json", "snapshot.json", "trace-opencl_0.csv"}) {
    EXPECT_TRUE(fs::exists(profile / file)) << file;
  }
  std::ifstream in(profile / "summary.txt");
  std::string summary;
  std::getline(in, summary, '\0');  // the whole file: it holds no NUL
  EXPECT_NE(summary.find("Memory summary of opencl:0"), std::string::npos) << summary;
}

TEST_F(OpenClCli, MirroredOverTwoOpenClDevicesTrainsToSimsAccuracy) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  std::string output;
  const nlohmann::json opencl =
      train("opencl", "--devices opencl:0,opencl:1 --strategy mirrored", "TP_OPENCL_DEVICES=2", &output);
  // The fused update (--fuse-update, AllReduceAdam) reads a peer's gradient in place, which only sim devices
  // do: sim runs AllReduce + ApplyAdam here as opencl does, so the plans compare.
  const nlohmann::json sim = train("sim", "--devices sim:0,sim:1 --strategy mirrored --fuse-update false");
  expect_same_training(opencl, sim);
  for (const char* text :
       {"mirrored strategy on opencl:0,opencl:1", "opencl:0: peak in use", "opencl:1: peak in use"}) {
    EXPECT_NE(output.find(text), std::string::npos) << text << " missing from\n" << output;
  }
}

// ZeRO-1 and ZeRO-2: the optimizer state (and gradients) sharded over the two opencl devices, reduce-scattered
// and all-gathered through the in-process communicator with host-staged copies.
TEST_F(OpenClCli, ZeroOverTwoOpenClDevicesTrainsToSimsAccuracy) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  for (const std::string shard : {"optimizer", "gradients"}) {
    SCOPED_TRACE(shard);
    const std::string model = " --strategy mirrored --shard " + shard;
    const nlohmann::json opencl =
        train("opencl_" + shard, "--devices opencl:0,opencl:1" + model, "TP_OPENCL_DEVICES=2");
    // sim folds the collectives into the update unless told not to (see above): compare the same graphs.
    const nlohmann::json sim = train("sim_" + shard, "--devices sim:0,sim:1 --fuse-update false" + model);
    expect_same_training(opencl, sim);
    EXPECT_EQ(opencl.value("shard", ""), shard);
  }
}

// The memory flags configure an opencl device's stack as a sim device's. BFC rounds requests the same way on
// both, so each peak in use exceeds its planned peak by the same rounding (the plans differ only by the
// fetched results, which opencl keeps in shared memory: expect_same_training); `system` hands every request
// to the device's source, which rounds to its own unit (a page on sim, the buffer alignment on opencl), so
// there the opencl peak is at most sim's and reserved equals in use.
TEST_F(OpenClCli, MemoryFlagsApplyAsOnSim) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  for (const std::string memory : {"--allocator system", "--allocator bfc --allow-growth false"}) {
    SCOPED_TRACE(memory);
    const bool system = memory.find("system") != std::string::npos;
    const std::string name = system ? "system" : "preallocate";
    const nlohmann::json opencl = train("opencl_" + name, "--devices opencl:0 --strategy one " + memory);
    const nlohmann::json sim = train("sim_" + name, "--devices sim:0 --strategy one " + memory);
    expect_same_training(opencl, sim);
    if (!opencl.contains("devices") || !sim.contains("devices")) continue;
    const nlohmann::json& ours = opencl.at("devices").at(0);
    const nlohmann::json& theirs = sim.at("devices").at(0);
    if (system) {
      EXPECT_LE(ours.at("peak_in_use_bytes").get<std::size_t>(), theirs.at("peak_in_use_bytes").get<std::size_t>());
      EXPECT_EQ(ours.at("peak_reserved_bytes"), ours.at("peak_in_use_bytes"));
    } else {
      const auto rounding = [](const nlohmann::json& device) {
        return device.at("peak_in_use_bytes").get<std::int64_t>() - device.at("planned_peak_bytes").get<std::int64_t>();
      };
      EXPECT_EQ(rounding(ours), rounding(theirs)) << ours << "\n" << theirs;
      // Preallocation reserves the budget up front (on opencl as one region of at most the driver's largest
      // allocation, so not sim's figure): far more than the job uses.
      const auto in_use = ours.at("peak_in_use_bytes").get<std::size_t>();
      EXPECT_GT(ours.at("peak_reserved_bytes").get<std::size_t>(), 16 * in_use);
    }
  }
}

// As estimate_cli_test's EstimateEqualsMeasured on sim: the plan made without allocating equals the peak that
// three real steps reach (requested bytes, and in-use bytes after the allocator's rounding) on each device,
// ZeRO, mixed precision and the system allocator included (a kernel's scratch on the device's stack would break
// it, and so would the estimate rounding `system` requests to sim's page instead of the OpenCL source's unit).
TEST_F(OpenClCli, EstimateEqualsTheMeasuredPeak) {
  for (const std::string devices :
       {"opencl:0 --strategy one", "opencl:0,opencl:1", "opencl:0,opencl:1 --shard optimizer",
        "opencl:0 --strategy one --allocator system", "opencl:0,opencl:1 --allocator system",
        "opencl:0 --strategy one --precision mixed_float16", "opencl:0 --strategy one --precision mixed_bfloat16"}) {
    SCOPED_TRACE(devices);
    const std::string model = "--devices " + devices + " --batch-size 64";
    const nlohmann::json estimate = run_json("estimate " + model + " --json", "TP_OPENCL_DEVICES=2");
    const nlohmann::json measured =
        run_json("profile " + model + " --steps 3 --synthetic --json", "TP_OPENCL_DEVICES=2");
    ASSERT_TRUE(estimate.contains("devices") && measured.contains("devices"));
    ASSERT_EQ(estimate.at("devices").size(), measured.at("devices").size());
    for (std::size_t index = 0; index < estimate.at("devices").size(); ++index) {
      const nlohmann::json& planned = estimate.at("devices").at(index);
      const nlohmann::json& real = measured.at("devices").at(index);
      ASSERT_EQ(planned.at("device"), real.at("device"));
      EXPECT_EQ(planned.at("planned_peak_bytes"), real.at("measured_peak_requested_bytes")) << planned.at("device");
      EXPECT_EQ(planned.at("planned_peak_allocated_bytes"), real.at("measured_peak_in_use_bytes"))
          << planned.at("device");
      // A device with shared memory (PoCL's fine-grained SVM) holds the fetched results there (the loss and
      // the correct count, scalars), reported apart from the peak above; one without holds none there.
      if (planned.at("shared_memory").get<std::string>().empty()) {
        EXPECT_EQ(planned.at("shared_bytes"), 0u) << planned;
      } else {
        EXPECT_EQ(planned.at("shared_memory"), planned.at("device").get<std::string>() + "/shared") << planned;
        EXPECT_GE(planned.at("shared_bytes").get<std::size_t>(), 8u) << planned;
      }
    }
  }
}

// The out-of-memory advice plans as the run does: on one opencl device with shared memory the batches are fed in
// place (no arena slot), so the suggested batch size is the largest that fits, not one batch's slot below it.
TEST_F(OpenClCli, OutOfMemoryAdviceSuggestsTheLargestBatchThatFits) {
  const nlohmann::json listed = run_json("devices --json", "");
  std::uint64_t global_bytes = 0;
  for (const nlohmann::json& device : listed.at("devices")) {
    if (device.at("name") == "opencl:0") global_bytes = device.at("opencl").at("global_memory_bytes");
  }
  ASSERT_GT(global_bytes, 0u) << listed;
  // A 16 MiB device: the fraction of the driver's memory that gives it.
  const std::string fraction = "TP_MEMORY_FRACTION=" + std::to_string(16.0 * 1024 * 1024 / double(global_bytes));
  const std::string profile = "profile --devices opencl:0 --strategy one --synthetic --steps 2 --batch-size ";
  const CliRun failed = run_clean(profile + "4096", fraction);
  ASSERT_EQ(failed.exit_code, 3) << failed.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(failed.output, match, std::regex("--batch-size ([0-9]+) fits: its allocations")))
      << failed.output;
  const int suggested = std::stoi(match[1]);
  const CliRun fits = run_clean(profile + std::to_string(suggested), fraction);
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
  const CliRun one_more = run_clean(profile + std::to_string(suggested + 1), fraction);
  EXPECT_EQ(one_more.exit_code, 3) << one_more.output;
}

// A missing opencl device names what exists and the knob that makes it; an allocator the backend lacks is the
// backend's typed error (exit 2), not a crash; memory flags apply to opencl devices as to sim.
TEST_F(OpenClCli, MissingDevicesAndUnsupportedAllocatorsAreRefusedWithTheFix) {
  const int found = opencl_device_count("");
  const std::string beyond = "opencl:" + std::to_string(found);
  const CliRun missing = run_clean("estimate --strategy mirrored --devices opencl:0," + beyond);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  const std::string knob = "TP_OPENCL_DEVICES=" + std::to_string(found + 1);
  for (const std::string& expected : {beyond + ", which does not exist", knob, std::string("--devices opencl:0")}) {
    EXPECT_NE(missing.output.find(expected), std::string::npos) << expected << " in " << missing.output;
  }
  const CliRun hidden = run_clean("estimate --strategy one --devices opencl:0", "TP_OPENCL_DEVICES=0");
  EXPECT_EQ(hidden.exit_code, 2) << hidden.output;
  EXPECT_NE(hidden.output.find("TP_OPENCL_DEVICES=1"), std::string::npos) << hidden.output;

  const CliRun expandable = run_clean("estimate --strategy one --devices opencl:0 --allocator expandable");
  EXPECT_EQ(expandable.exit_code, 2) << expandable.output;
  EXPECT_NE(expandable.output.find("expandable"), std::string::npos) << expandable.output;
  EXPECT_NE(expandable.output.find("opencl:0"), std::string::npos) << expandable.output;

  // Preallocation reserves the whole budget up front; the fraction sets that budget, as on sim.
  const nlohmann::json devices = run_json("devices --json", "TP_ALLOW_GROWTH=false TP_MEMORY_FRACTION=0.25");
  for (const nlohmann::json& device : devices.at("devices")) {
    if (device.at("kind").get<std::string>() != "opencl") continue;
    EXPECT_EQ(device.at("policy"), "preallocate") << device;
    const auto capacity = device.at("capacity_bytes").get<double>();
    EXPECT_NEAR(device.at("limit_bytes").get<double>(), capacity / 4, capacity / 100) << device;
  }
}

// With no OpenCL driver at all the error says what to install.
TEST(OpenClCliWithoutDriver, AMissingDriverIsNamedWithTheFix) {
  if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
  // The ICD loader (ocl-icd) reads its drivers from OCL_ICD_VENDORS: an empty folder hides every driver.
  const fs::path empty = fs::temp_directory_path() / ("tp_no_icd_" + std::to_string(::getpid()));
  fs::create_directories(empty);
  const CliRun run =
      run_clean("estimate --strategy one --devices opencl:0", "OCL_ICD_VENDORS='" + empty.string() + "'");
  fs::remove_all(empty);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("opencl:0, which does not exist"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("install"), std::string::npos) << run.output;
}

}  // namespace
