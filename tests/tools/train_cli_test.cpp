// SPDX-License-Identifier: Apache-2.0
// tensorpool train as a user runs it: a short run on the real dataset prints the plan, the epoch lines, the
// test accuracy and the memory summary and writes the summary JSON; a run killed with SIGKILL after its first
// checkpoint resumes at that step when the same command runs again; bad flags exit 2 with one line.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend/cpu/kernels/bf16_gemm.hpp"
#include "tools/support/cli_runner.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;
using tp::cli::testing::run_cli;

const fs::path kData = "/usr/share/datasets/fashion-mnist";

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
    if (!fs::exists(kData / "train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
    }
    directory_ = fs::temp_directory_path() / ("tp_train_cli_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  // Runs `train <flags>` twice on one cache directory and checks that the first run measured every entry of its
  // summary's `list` and the second took every one from the cache file, each run's output line starting with
  // `line` counting them so. Returns the two summaries (fewer when a run failed).
  std::vector<nlohmann::json> run_twice_on_one_cache(const std::string& flags, const std::string& list,
                                                     const std::string& line, std::size_t at_least) {
    const std::string cache = "TP_CACHE_DIR='" + (directory_ / "cache").string() + "'";
    std::vector<nlohmann::json> summaries;
    for (const char* name : {"first.json", "second.json"}) {
      const fs::path summary = directory_ / name;
      const CliRun run = run_cli("train " + flags + " --summary-json '" + summary.string() + "'", cache);
      EXPECT_EQ(run.exit_code, 0) << run.output;
      if (run.exit_code != 0) return summaries;
      std::ifstream in(summary);
      summaries.push_back(nlohmann::json::parse(in));
      const nlohmann::json& entries = summaries.back().at(list);
      EXPECT_GE(entries.size(), at_least) << entries.dump();
      const std::string source = summaries.size() == 1 ? "measured" : "cached";
      for (const nlohmann::json& entry : entries) EXPECT_EQ(entry.at("source"), source) << entry.dump();
      const std::string count = std::to_string(entries.size());
      const std::string counts =
          summaries.size() == 1 ? "(0 cached, " + count + " measured)" : "(" + count + " cached, 0 measured)";
      const std::size_t start = run.output.find("\n" + line);
      EXPECT_NE(start, std::string::npos) << run.output;
      if (start != std::string::npos) {
        const std::string printed = run.output.substr(start + 1, run.output.find('\n', start + 1) - start - 1);
        EXPECT_NE(printed.find(counts), std::string::npos) << printed;
      }
    }
    EXPECT_TRUE(fs::exists(directory_ / "cache" / "gemm-auto.json"));
    return summaries;
  }

  fs::path directory_;
};

TEST_F(TrainCli, AShortRunPrintsThePlanTheEpochsAndTheMemorySummary) {
  const fs::path summary = directory_ / "summary.json";
  const CliRun run = run_cli("train --epochs 1 --limit-train 2000 --summary-json '" + summary.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("planned peak on sim:0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("Epoch 1/1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("Test accuracy"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("Memory summary"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find('\r'), std::string::npos) << "a progress bar in a pipe: " << run.output;
  std::ifstream in(summary);
  const nlohmann::json json = nlohmann::json::parse(in);
  EXPECT_GT(json.at("test_accuracy").get<double>(), 0.6);
  EXPECT_EQ(json.at("devices").size(), 2u);
  EXPECT_GT(json.at("devices").at(0).at("peak_in_use_bytes").get<std::size_t>(), 0u);
  EXPECT_GT(json.at("devices").at(0).at("planned_peak_bytes").get<std::size_t>(), 0u);
  // The default GEMM library is chosen per shape class by measurement: the header names the setting, the end
  // of the run and the summary the choice made for each of the step's GEMM shapes.
  EXPECT_NE(run.output.find(", gemm auto\n"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("GEMM auto: onednn for "), std::string::npos) << run.output;
  EXPECT_EQ(json.at("gemm").get<std::string>(), "auto");
  const nlohmann::json& choices = json.at("gemm_choices");
  ASSERT_GE(choices.size(), 5u) << "the step's forward and backward GEMMs: " << choices.dump();
  bool forward_layer_1 = false;
  for (const nlohmann::json& choice : choices) {
    const std::string library = choice.at("library").get<std::string>();
    EXPECT_TRUE(library == "openblas" || library == "onednn") << choice.dump();
    EXPECT_GT(choice.at("openblas_gflops").get<double>(), 0.0) << choice.dump();
    EXPECT_GT(choice.at("onednn_gflops").get<double>(), 0.0) << choice.dump();
    forward_layer_1 |= choice.at("n").get<int>() == 512 && choice.at("k").get<int>() == 784 &&
                       !choice.at("transpose_a").get<bool>() && !choice.at("transpose_b").get<bool>();
  }
  EXPECT_TRUE(forward_layer_1) << "no choice for the first layer's forward GEMM (m x 512 x 784): " << choices.dump();
}

TEST_F(TrainCli, APinnedGemmLibraryIsNamedAndMakesNoChoices) {
  const fs::path summary = directory_ / "summary.json";
  const CliRun run = run_cli(
      "train --strategy one --devices sim:0 --epochs 1 --limit-train 320 --gemm openblas "
      "--summary-json '" +
      summary.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(", gemm openblas\n"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("GEMM auto"), std::string::npos) << run.output;
  std::ifstream in(summary);
  const nlohmann::json json = nlohmann::json::parse(in);
  EXPECT_EQ(json.at("gemm").get<std::string>(), "openblas");
  EXPECT_TRUE(json.at("gemm_choices").empty()) << json.at("gemm_choices").dump();
}

// The GEMM auto choices persist per machine: a second run of the same command takes every choice from the
// cache file the first wrote, without timing, and so repeats the first run's results exactly.
TEST_F(TrainCli, ASecondRunTakesTheGemmChoicesFromTheCacheAndRepeatsTheFirst) {
  const std::vector<nlohmann::json> summaries = run_twice_on_one_cache(
      "--strategy one --devices sim:0 --epochs 1 --limit-train 320", "gemm_choices", "GEMM auto: ", 5);
  ASSERT_EQ(summaries.size(), 2U);
  const nlohmann::json& first = summaries[0];
  const nlohmann::json& second = summaries[1];
  EXPECT_EQ(first.at("test_accuracy"), second.at("test_accuracy"));
  EXPECT_EQ(first.at("test_loss"), second.at("test_loss"));
  EXPECT_EQ(first.at("final_train_loss"), second.at("final_train_loss"));
  ASSERT_EQ(first.at("gemm_choices").size(), second.at("gemm_choices").size());
  for (std::size_t i = 0; i < first.at("gemm_choices").size(); ++i) {
    EXPECT_EQ(first.at("gemm_choices")[i].at("library"), second.at("gemm_choices")[i].at("library")) << i;
  }
}

// A mixed_bfloat16 run reports how each bfloat16 product was computed (the path timed fastest, or none on a
// CPU without bfloat16 instructions, where there is one path), and a second run takes those paths from the
// cache file and repeats the first run's results exactly.
TEST_F(TrainCli, AMixedBfloat16RunReportsItsGemmPathsAndASecondRunRepeatsIt) {
  const std::string flags = "--strategy one --devices sim:0 --epochs 1 --limit-train 320 --precision mixed_bfloat16";
  if (!tp::backend::cpu::bf16_gemm_native()) {
    const fs::path summary = directory_ / "summary.json";
    const CliRun run = run_cli("train " + flags + " --summary-json '" + summary.string() + "'");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    std::ifstream in(summary);
    const nlohmann::json paths = nlohmann::json::parse(in).at("gemm_path_choices");
    EXPECT_TRUE(paths.empty()) << paths.dump();
    EXPECT_EQ(run.output.find("bfloat16 GEMM paths"), std::string::npos) << run.output;
    GTEST_SKIP() << "this CPU has no AVX512_BF16: its bfloat16 products have one path, nothing is chosen";
  }
  // The step's five products and the evaluation's on its last, shorter batch.
  const std::vector<nlohmann::json> summaries =
      run_twice_on_one_cache(flags, "gemm_path_choices", "bfloat16 GEMM paths: ", 5);
  ASSERT_EQ(summaries.size(), 2U);
  for (const nlohmann::json& summary : summaries) {
    for (const nlohmann::json& choice : summary.at("gemm_path_choices")) {
      const std::string path = choice.at("path").get<std::string>();
      EXPECT_TRUE(path == "native" || path == "padded" || path == "widened") << choice.dump();
      EXPECT_EQ(choice.at("product").get<std::string>().rfind("bfloat16 ", 0), 0U) << choice.dump();
    }
  }
  const nlohmann::json& first = summaries[0];
  const nlohmann::json& second = summaries[1];
  EXPECT_EQ(first.at("test_loss"), second.at("test_loss"));
  EXPECT_EQ(first.at("final_train_loss"), second.at("final_train_loss"));
  ASSERT_EQ(first.at("gemm_path_choices").size(), second.at("gemm_path_choices").size());
  for (std::size_t i = 0; i < first.at("gemm_path_choices").size(); ++i) {
    EXPECT_EQ(first.at("gemm_path_choices")[i].at("path"), second.at("gemm_path_choices")[i].at("path")) << i;
  }
}

// A cache location that cannot be written costs one warning, never the run.
TEST_F(TrainCli, AnUnwritableGemmCacheLocationWarnsAndTrainingRuns) {
  std::ofstream(directory_ / "a-file") << "not a directory";
  const CliRun run = run_cli("train --strategy one --devices sim:0 --epochs 1 --limit-train 320",
                             "TP_CACHE_DIR='" + (directory_ / "a-file" / "cache").string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("GEMM auto cache not saved"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("Test accuracy"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("measured)"), std::string::npos) << run.output;
}

// Issue 23: with default flags each device's stack reserves what the plan says, to a granule: peak reserved
// <= 1.02 x planned peak + one granule (2 MiB, the sim devices' VirtualMemory granularity). Device memory is
// deterministic, so this is a regression test, not a timing. `--allocator bfc` stays TensorFlow's allocator,
// whose split rule reserves more than that bound on this model.
TEST_F(TrainCli, WithDefaultFlagsEachDeviceReservesThePlanToAGranule) {
  constexpr std::size_t kGranule = std::size_t{2} << 20;
  const auto reserved_within_plan = [](const nlohmann::json& device) {
    const auto planned = static_cast<double>(device.at("planned_peak_bytes").get<std::size_t>());
    const auto reserved = static_cast<double>(device.at("peak_reserved_bytes").get<std::size_t>());
    return planned > 0 && reserved <= 1.02 * planned + static_cast<double>(kGranule);
  };
  const fs::path summary = directory_ / "summary.json";
  const CliRun run = run_cli("train --epochs 1 --limit-train 640 --summary-json '" + summary.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("allocator expandable, grows on demand"), std::string::npos) << run.output;
  std::ifstream in(summary);
  const nlohmann::json json = nlohmann::json::parse(in);
  ASSERT_EQ(json.at("devices").size(), 2u);
  for (const nlohmann::json& device : json.at("devices")) {
    EXPECT_EQ(device.at("allocator"), "expandable") << device;
    EXPECT_TRUE(reserved_within_plan(device)) << device;
  }

  const fs::path bfc_summary = directory_ / "bfc.json";
  const CliRun bfc = run_cli(
      "train --epochs 1 --limit-train 640 --strategy one --devices sim:0 --allocator bfc "
      "--summary-json '" +
      bfc_summary.string() + "'");
  ASSERT_EQ(bfc.exit_code, 0) << bfc.output;
  std::ifstream bfc_in(bfc_summary);
  const nlohmann::json bfc_device = nlohmann::json::parse(bfc_in).at("devices").at(0);
  EXPECT_EQ(bfc_device.at("allocator"), "bfc");
  EXPECT_FALSE(reserved_within_plan(bfc_device)) << bfc_device;
}

TEST_F(TrainCli, AKilledRunResumesFromItsLastCheckpoint) {
  const fs::path checkpoints = directory_ / "checkpoints";
  const std::string arguments =
      "train --epochs 3 --limit-train 3200 --strategy one --devices sim:0 --checkpoint-dir '" + checkpoints.string() +
      "'";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string command = "exec '" + cli_path().string() + "' " + arguments + " > /dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Kill it as soon as the first checkpoint (end of epoch 1, step 100) is durable.
  bool saved = false;
  for (int wait = 0; wait < 600 && !saved; ++wait) {
    saved = fs::exists(checkpoints / "latest");
    if (!saved) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(saved) << "no checkpoint within 30 s";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed";
  const CliRun resumed = run_cli(arguments);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from step"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("Epoch 3/3"), std::string::npos) << resumed.output;
}

// --precision (issue 8): a short mixed-float16 run reports its policy, the loss scale and the arena split, whose
// activations are half the float32 run's; an unknown policy is refused naming the accepted ones.
TEST_F(TrainCli, MixedPrecisionRunReportsTheSplitAndRejectsUnknownPolicies) {
  std::size_t activations[2] = {0, 0};
  int index = 0;
  for (const std::string precision : {"float32", "mixed_float16"}) {
    const fs::path summary = directory_ / (precision + ".json");
    const CliRun run = run_cli("train --epochs 1 --limit-train 2000 --strategy one --devices sim:0 --precision " +
                               precision + " --summary-json '" + summary.string() + "'");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("precision " + precision), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("planned activations"), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("Loss scale") != std::string::npos, precision == "mixed_float16") << run.output;
    std::ifstream in(summary);
    const nlohmann::json json = nlohmann::json::parse(in);
    EXPECT_EQ(json.at("precision"), precision);
    EXPECT_GT(json.at("test_accuracy").get<double>(), 0.6);
    activations[index++] = json.at("devices").at(0).at("activation_bytes").get<std::size_t>();
  }
  EXPECT_NEAR(static_cast<double>(activations[1]) / static_cast<double>(activations[0]), 0.5, 0.05);
  const CliRun bad = run_cli("train --precision float16");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("'float16' is not one of float32, mixed_float16, mixed_bfloat16"), std::string::npos)
      << bad.output;
}

// The tensorpool variables unset, then `variables` set: these cases must not depend on the caller's environment.
CliRun run_clean(const std::string& arguments, const std::string& variables = "") {
  return run_cli(arguments,
                 "env -u TP_SIM_DEVICES -u TP_SIM_MEMORY -u TP_VISIBLE_DEVICES -u TP_ALLOW_GROWTH "
                 "-u TP_ALLOCATOR -u TP_MEMORY_FRACTION -u TP_OPENCL_DEVICES -u TP_GEMM " +
                     variables);
}

// The lines in which the dynamic loader (LD_DEBUG=files) reports a library that the OpenCL ICD loader opened:
// the OpenCL driver.
std::size_t opencl_driver_loads(const std::string& output) {
  std::size_t count = 0;
  std::size_t line_start = 0;
  while (line_start < output.size()) {
    const std::size_t line_end = std::min(output.find('\n', line_start), output.size());
    const std::string_view line(output.data() + line_start, line_end - line_start);
    if (line.find("dynamically loaded by") != std::string_view::npos &&
        line.find("libOpenCL") != std::string_view::npos) {
      ++count;
    }
    line_start = line_end + 1;
  }
  return count;
}

TEST_F(TrainCli, ARunWithoutOpenClDevicesLeavesTheOpenClDriverUnloaded) {
  const CliRun listing = run_clean("devices", "LD_DEBUG=files");
  ASSERT_EQ(listing.exit_code, 0) << listing.output;
  if (opencl_driver_loads(listing.output) == 0) GTEST_SKIP() << "no OpenCL driver is installed here to stay unloaded";
  const CliRun sim = run_clean("train --epochs 1 --limit-train 64 --strategy one --devices sim:0", "LD_DEBUG=files");
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_EQ(opencl_driver_loads(sim.output), 0u);
  // TP_OPENCL_DEVICES asks for the opencl devices: the driver is loaded even though the run uses none.
  const CliRun asked = run_clean("train --epochs 1 --limit-train 64 --strategy one --devices sim:0",
                                 "TP_OPENCL_DEVICES=1 LD_DEBUG=files");
  ASSERT_EQ(asked.exit_code, 0) << asked.output;
  EXPECT_GT(opencl_driver_loads(asked.output), 0u);
}

// cuBLASLt is loaded by the first product on a GPU, not with the binary: linked, it weighed on the resident
// set of every run. A CPU run must not even map it (LD_DEBUG=files names every library mapped).
TEST_F(TrainCli, ARunOnTheCpuLeavesCuBlasLtUnmapped) {
  const CliRun sim = run_clean("train --epochs 1 --limit-train 64 --strategy one --devices sim:0", "LD_DEBUG=files");
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  ASSERT_NE(sim.output.find("file="), std::string::npos) << "LD_DEBUG=files wrote nothing:\n" << sim.output;
  EXPECT_EQ(sim.output.find("libcublasLt"), std::string::npos) << sim.output.substr(0, 4000);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text;
  std::getline(in, text, '\0');  // the whole file: it holds no NUL
  return text;
}

// Issue 18, item 5: an output that cannot be written is refused before the data is even loaded, not after
// training (which then lost its results).
TEST_F(TrainCli, UnwritableOutputsAreRefusedBeforeTraining) {
  const fs::path file = directory_ / "a_file";
  std::ofstream(file) << "x";
  const std::string quick = "train --epochs 1 --limit-train 2000 --strategy one --devices sim:0 ";
  const std::string cases[] = {
      "--summary-json '" + (file / "summary.json").string() + "'",
      "--history-csv '" + (file / "history.csv").string() + "'",
      "--checkpoint-dir '" + (file / "checkpoints").string() + "'",
      "--profile '" + (file / "profile").string() + "'",
      "--summary-json '" + (directory_ / "missing" / "summary.json").string() + "'",
      "--history-csv '" + directory_.string() + "'",
      "--summary-json /proc/x.json",
      "--checkpoint-dir /proc/x",
      "--profile /proc/x",
  };
  for (const std::string& output : cases) {
    const CliRun run = run_clean(quick + output);
    EXPECT_EQ(run.exit_code, 2) << output << ": " << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << output << ": " << run.output;
    EXPECT_EQ(run.output.find("Fashion-MNIST:"), std::string::npos) << output << ": " << run.output;
    const std::string flag = output.substr(0, output.find(' '));
    EXPECT_NE(run.output.find(flag), std::string::npos) << output << ": " << run.output;
  }
  EXPECT_EQ(read_file(file), "x");
  EXPECT_FALSE(fs::exists(directory_ / "missing"));
}

// Issue 18, item 6: --history-csv with --checkpoint-dir keeps the earlier epochs when a run resumes, and a rerun
// of the finished job leaves the file as it is (it was truncated to the new epochs, or to the header).
TEST_F(TrainCli, TheHistoryCsvOfAResumedRunHoldsEveryEpochOnce) {
  const fs::path history = directory_ / "history.csv";
  const std::string common = "train --limit-train 640 --strategy one --devices sim:0 --checkpoint-dir '" +
                             (directory_ / "checkpoints").string() + "' --history-csv '" + history.string() + "'";
  ASSERT_EQ(run_clean(common + " --epochs 1").exit_code, 0);
  const CliRun resumed = run_clean(common + " --epochs 2");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::string after_resume = read_file(history);
  std::istringstream lines(after_resume);
  std::vector<std::string> epochs;
  for (std::string line; std::getline(lines, line);) epochs.push_back(line.substr(0, line.find(',')));
  EXPECT_EQ(epochs, (std::vector<std::string>{"epoch", "0", "1"})) << after_resume;
  const CliRun rerun = run_clean(common + " --epochs 2");
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_EQ(read_file(history), after_resume);
}

// Issue 18, item 7: --limit-train N trains on exactly N examples (it kept every 60000/N-th one, rounded, so 40000
// meant all 60000); a negative count or more than the file holds is refused.
TEST_F(TrainCli, LimitTrainKeepsExactlyThatManyExamples) {
  const fs::path summary = directory_ / "summary.json";
  const CliRun run = run_clean(
      "train --epochs 1 --limit-train 700 --batch-size 100 --strategy one --devices sim:0 "
      "--summary-json '" +
      summary.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("Fashion-MNIST: 700 training"), std::string::npos) << run.output;
  std::ifstream in(summary);
  EXPECT_EQ(nlohmann::json::parse(in).at("steps").get<int>(), 7);
  const CliRun large = run_clean("train --epochs 0 --limit-train 40000 --strategy one --devices sim:0");
  ASSERT_EQ(large.exit_code, 0) << large.output;
  EXPECT_NE(large.output.find("Fashion-MNIST: 40000 training"), std::string::npos) << large.output;
  for (const std::string& limit : {std::string("-1"), std::string("-2000"), std::string("60001")}) {
    const CliRun bad = run_clean("train --epochs 1 --limit-train " + limit);
    EXPECT_EQ(bad.exit_code, 2) << limit << ": " << bad.output;
    EXPECT_NE(bad.output.find("--limit-train " + limit), std::string::npos) << bad.output;
  }
}

// Issue 18, items 9 and 10: a missing device is named with what exists and how to get it; device lists may
// have spaces but no repeats; a batch larger than the training set is refused instead of trained clamped.
TEST_F(TrainCli, DeviceListsAndBatchSizesAreCheckedBeforeTraining) {
  // TP_OPENCL_DEVICES=0 TP_CUDA_DEVICES=0: the list of existing devices is then the same with or without an
  // OpenCL driver or a GPU.
  const CliRun missing =
      run_clean("train --epochs 1 --limit-train 2000", "TP_SIM_DEVICES=1 TP_OPENCL_DEVICES=0 TP_CUDA_DEVICES=0");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  for (const char* expected :
       {"sim:1, which does not exist", "cpu:0, sim:0 (TP_SIM_DEVICES=1)", "TP_SIM_DEVICES=2", "--devices sim:0"}) {
    EXPECT_NE(missing.output.find(expected), std::string::npos) << expected << " in " << missing.output;
  }
  EXPECT_EQ(missing.output.find("memory config"), std::string::npos) << missing.output;
  const CliRun spaced = run_clean("train --epochs 1 --limit-train 640 --devices 'sim:0, sim:1'");
  EXPECT_EQ(spaced.exit_code, 0) << spaced.output;
  const CliRun twice = run_clean("train --epochs 1 --limit-train 640 --devices sim:0,sim:0");
  EXPECT_EQ(twice.exit_code, 2) << twice.output;
  EXPECT_NE(twice.output.find("sim:0 twice"), std::string::npos) << twice.output;
  for (const std::string& arguments :
       {std::string("--batch-size 100000000"), std::string("--limit-train 640 --batch-size 641")}) {
    const CliRun huge = run_clean("train --epochs 1 " + arguments);
    EXPECT_EQ(huge.exit_code, 2) << arguments << ": " << huge.output;
    EXPECT_NE(huge.output.find("--batch-size"), std::string::npos) << huge.output;
    EXPECT_EQ(huge.output.find("Epoch 1"), std::string::npos) << huge.output;
  }
  // `profile` on the real data (whole batches only) crashed on a batch larger than the training set.
  const CliRun profile = run_clean("profile --steps 1 --strategy one --devices sim:0 --batch-size 60001");
  EXPECT_EQ(profile.exit_code, 2) << profile.output;
  EXPECT_NE(profile.output.find("--batch-size 60001"), std::string::npos) << profile.output;
}

// Issue 18, item 4: --sim-memory applies when TP_SIM_DEVICES is set (it was ignored: this run trained in 1 GiB).
// TP_GEMM gives the GEMM library when --gemm is not given; the flag overrides it; a bad value names the
// variable and the choices.
TEST_F(TrainCli, TpGemmSetsTheLibraryAndTheFlagOverridesIt) {
  const std::string quick = "train --epochs 1 --limit-train 320 --strategy one --devices sim:0";
  const CliRun from_environment = run_clean(quick, "TP_GEMM=onednn");
  ASSERT_EQ(from_environment.exit_code, 0) << from_environment.output;
  EXPECT_NE(from_environment.output.find(", gemm onednn\n"), std::string::npos) << from_environment.output;
  EXPECT_EQ(from_environment.output.find("GEMM auto"), std::string::npos) << from_environment.output;
  const CliRun flag = run_clean(quick + " --gemm openblas", "TP_GEMM=onednn");
  ASSERT_EQ(flag.exit_code, 0) << flag.output;
  EXPECT_NE(flag.output.find(", gemm openblas\n"), std::string::npos) << flag.output;
  const CliRun bad = run_clean(quick, "TP_GEMM=mkl");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("TP_GEMM='mkl'"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("auto, openblas or onednn"), std::string::npos) << bad.output;
}

TEST_F(TrainCli, SimMemoryFlagOverridesTheEnvironment) {
  const CliRun run = run_clean("train --epochs 1 --limit-train 640 --strategy one --devices sim:0 --sim-memory 2MiB",
                               "TP_SIM_DEVICES=1 TP_SIM_MEMORY=1GiB");
  EXPECT_EQ(run.exit_code, 3) << run.output;
}

// The CUDA-only memory flags name what they apply to: --device-memory is a cuda device's budget (not a sim
// device's), and the two CUDA-only allocators are refused on a sim device before training, naming the ones it has.
TEST_F(TrainCli, CudaMemoryFlagsAreRefusedForSimDevices) {
  const std::string quick = "train --epochs 1 --limit-train 320 --strategy one --devices sim:0";
  const CliRun budget = run_clean(quick + " --device-memory 1GiB");
  EXPECT_EQ(budget.exit_code, 2) << budget.output;
  EXPECT_NE(budget.output.find("--device-memory 1GiB sets the budget of cuda devices"), std::string::npos)
      << budget.output;
  EXPECT_NE(budget.output.find("--sim-memory"), std::string::npos) << budget.output;
  for (const std::string allocator : {"managed", "cuda_malloc_async"}) {
    const CliRun run = run_clean(quick + " --allocator " + allocator);
    EXPECT_EQ(run.exit_code, 2) << allocator << ": " << run.output;
    EXPECT_NE(run.output.find("allocator = " + allocator + " is served only by cuda:N devices"), std::string::npos)
        << run.output;
    EXPECT_NE(run.output.find("bfc, expandable or system"), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("Epoch 1"), std::string::npos) << run.output;
  }
}

// Issue 18, item 11: through a pipe each line arrives as it is printed: the first one comes while the first
// epoch (all 60,000 examples) is still training, so a run killed then leaves a log. It used to wait in the
// buffer until the epoch's line flushed it.
TEST_F(TrainCli, ThroughAPipeEachLineArrivesWhenPrinted) {
  std::array<int, 2> pipe_ends{};
  ASSERT_EQ(::pipe(pipe_ends.data()), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(pipe_ends[1], STDOUT_FILENO);
    ::close(pipe_ends[0]);
    ::close(pipe_ends[1]);
    const std::string command = "exec env -u TP_SIM_DEVICES -u TP_SIM_MEMORY '" + cli_path().string() +
                                "' train --epochs 1 --strategy one --devices sim:0 2>/dev/null";
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipe_ends[1]);
  std::string first_read;
  std::array<char, 4096> buffer{};
  while (first_read.find('\n') == std::string::npos) {
    const ssize_t count = ::read(pipe_ends[0], buffer.data(), buffer.size());
    if (count <= 0) break;
    first_read.append(buffer.data(), static_cast<std::size_t>(count));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(pipe_ends[0]);
  EXPECT_EQ(first_read.rfind("Fashion-MNIST: 60000 training", 0), 0u) << first_read;
  EXPECT_EQ(first_read.find("Epoch 1/1"), std::string::npos) << "the first line came with the epoch's:\n" << first_read;
  EXPECT_TRUE(WIFSIGNALED(status)) << "the run ended before the first line arrived";
}

TEST_F(TrainCli, BadFlagsExitWithCodeTwoAndOneLine) {
  for (const std::string& arguments :
       {std::string("train --strategy ring"), std::string("train --devices sim:0,,sim:1"),
        std::string("train --data /nonexistent --epochs 1"), std::string("train --allocator tlsf")}) {
    const CliRun run = run_cli(arguments);
    EXPECT_EQ(run.exit_code, 2) << arguments << ": " << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << arguments << ": " << run.output;
  }
}

}  // namespace
