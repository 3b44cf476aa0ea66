// tensorpool train as a user runs it: a short run on the real dataset prints the plan, the epoch lines, the
// test accuracy and the memory summary and writes the summary JSON; a run killed with SIGKILL after its first
// checkpoint resumes at that step when the same command runs again; bad flags exit 2 with one line.
#include <gtest/gtest.h>

#include "tools/support/cli_runner.hpp"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

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
  std::ifstream in(summary);
  const nlohmann::json json = nlohmann::json::parse(in);
  EXPECT_GT(json.at("test_accuracy").get<double>(), 0.6);
  EXPECT_EQ(json.at("devices").size(), 2u);
  EXPECT_GT(json.at("devices").at(0).at("peak_in_use_bytes").get<std::size_t>(), 0u);
  EXPECT_GT(json.at("devices").at(0).at("planned_peak_bytes").get<std::size_t>(), 0u);
}

TEST_F(TrainCli, AKilledRunResumesFromItsLastCheckpoint) {
  const fs::path checkpoints = directory_ / "checkpoints";
  const std::string arguments = "train --epochs 3 --limit-train 3200 --strategy one --devices sim:0 --checkpoint-dir '" +
                                checkpoints.string() + "'";
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
  EXPECT_NE(bad.output.find("--precision 'float16' is not one of float32, mixed_float16, mixed_bfloat16"),
            std::string::npos)
      << bad.output;
}

TEST_F(TrainCli, BadFlagsExitWithCodeTwoAndOneLine) {
  for (const std::string& arguments : {std::string("train --strategy ring"), std::string("train --devices sim:0,,sim:1"),
                                       std::string("train --data /nonexistent --epochs 1"),
                                       std::string("train --allocator tlsf")}) {
    const CliRun run = run_cli(arguments);
    EXPECT_EQ(run.exit_code, 2) << arguments << ": " << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << arguments << ": " << run.output;
  }
}

}  // namespace
