// SPDX-License-Identifier: Apache-2.0
// `tensorpool train --checkpoint-dir DIR` run again after the job finished: nothing is left to train, and the
// run says so instead of reporting "0 samples/s over N steps"; a run that resumes mid-job reports the speed of
// the steps it trained. Skipped, saying why, without the Fashion-MNIST dataset.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tools/support/cli_runner.hpp"

namespace tp::cli::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kData = "/usr/share/datasets/fashion-mnist";

TEST(TrainResumeCli, ARerunOfAFinishedJobSaysThereIsNothingToTrain) {
  if (!fs::exists(kData / "train-images-idx3-ubyte.gz") && !fs::exists(kData / "train-images-idx3-ubyte")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  }
  const fs::path directory = fs::temp_directory_path() / ("tp_train_resume_" + std::to_string(::getpid()));
  fs::remove_all(directory);
  // 320 examples: 10 steps of batch 32 per epoch.
  const std::string train =
      "train --strategy one --devices sim:0 --limit-train 320 --hidden 64 --checkpoint-dir " + directory.string();
  const CliRun first = run_cli(train + " --epochs 1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("samples/s over 10 steps\n"), std::string::npos) << first.output;
  const CliRun second = run_cli(train + " --epochs 2");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("samples/s over 10 steps (resumed at step 10)"), std::string::npos) << second.output;
  const CliRun rerun = run_cli(train + " --epochs 2");
  fs::remove_all(directory);
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("nothing to train: the checkpoint in " + directory.string() +
                              " is at epoch 2 of 2 (step 20); raise --epochs to train on"),
            std::string::npos)
      << rerun.output;
  EXPECT_EQ(rerun.output.find("samples/s"), std::string::npos) << rerun.output;
}

}  // namespace
}  // namespace tp::cli::testing
