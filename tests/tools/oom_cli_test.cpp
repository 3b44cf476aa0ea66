// SPDX-License-Identifier: Apache-2.0
// Out of memory that explains: training driven into OOM on a small sim device reports the tensor being
// allocated, the device's figures, the cause with its numbers, the largest live tensors with their kinds and
// a concrete fix (a batch size that fits, decided by replaying the step through the device's allocator), writes
// TP_OOM_SNAPSHOT (and train --profile's files), exits 3; and the suggested batch size then trains.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "tools/support/cli_runner.hpp"

namespace {

namespace fs = std::filesystem;
using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;
using tp::cli::testing::run_cli;

const std::string kSmallDevice = "--devices sim:0 --strategy one --sim-memory 16MiB --synthetic --steps 2";

class OomCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
    snapshot_ = fs::temp_directory_path() / ("tp_oom_cli_" + std::to_string(::getpid()) + ".json");
    fs::remove(snapshot_);
  }
  void TearDown() override { fs::remove(snapshot_); }
  fs::path snapshot_;
};

TEST_F(OomCli, TheReportExplainsAndTheSuggestedBatchSizeFits) {
  const CliRun run =
      run_cli("profile " + kSmallDevice + " --batch-size 4096", "TP_OOM_SNAPSHOT='" + snapshot_.string() + "'");
  ASSERT_EQ(run.exit_code, 3) << run.output;
  const std::string& text = run.output;
  // The request: which tensor, what it is, how many bytes.
  EXPECT_NE(text.find("out of memory on sim:0 (allocator expandable): tried to allocate"), std::string::npos) << text;
  EXPECT_NE(text.find("for train/arena (Session, step_arena)"), std::string::npos) << text;
  // The device's figures and the cause with its numbers.
  EXPECT_NE(text.find("limit 16.00 MiB, in use"), std::string::npos) << text;
  // The 36 MiB arena is larger than the whole 16 MiB limit: the cause says so, not "shortage" of what is left.
  EXPECT_NE(text.find("Cause: the request alone (36.43 MiB) exceeds the limit (16.00 MiB)"), std::string::npos) << text;
  // The largest live tensors with their kinds.
  EXPECT_NE(text.find("Largest live allocations:"), std::string::npos) << text;
  EXPECT_NE(text.find("dense/kernel (Variable, float32[784,512], parameter)"), std::string::npos) << text;
  EXPECT_NE(text.find("dense/kernel/adam_m (Variable, float32[784,512], optimizer_state)"), std::string::npos) << text;
  // What the arena would hold, and the fix.
  EXPECT_NE(text.find("x:0 float32[4096,784]"), std::string::npos) << text;
  EXPECT_NE(text.find("Optimizer state holds"), std::string::npos) << text;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(text, match,
                                std::regex("Suggested fix: .*--batch-size ([0-9]+) fits: its allocations, "
                                           "replayed through the expandable \\(growing\\) allocator")))
      << text;
  const int suggested = std::stoi(match[1]);
  EXPECT_GT(suggested, 0);
  EXPECT_LT(suggested, 4096);

  // TP_OOM_SNAPSHOT: written at the failure, with the variables still live.
  std::ifstream in(snapshot_);
  ASSERT_TRUE(in.good()) << "no snapshot at " << snapshot_;
  const nlohmann::json snapshot = nlohmann::json::parse(in);
  EXPECT_EQ(snapshot.at("reason"), "out of memory on sim:0");
  const nlohmann::json& device = snapshot.at("devices").at(0);
  EXPECT_EQ(device.at("device"), "sim:0");
  EXPECT_GE(device.at("failures"), 1);       // Device::allocate waits for pending stream work and retries once
  EXPECT_EQ(device.at("live").size(), 12u);  // the MLP's 4 parameters and 8 Adam moments
  EXPECT_EQ(device.at("events").at("rows").back().at(0), "failure");

  // The suggestion holds: that batch trains on the same device.
  const CliRun fixed = run_cli("profile " + kSmallDevice + " --batch-size " + std::to_string(suggested));
  EXPECT_EQ(fixed.exit_code, 0) << fixed.output;
  EXPECT_NE(fixed.output.find("(equal)"), std::string::npos) << fixed.output;  // and the estimate was exact
}

TEST_F(OomCli, FragmentationPointsToTheExpandableAllocator) {
  // 16 MiB, BFC growing 2 + 4 + 8 MiB regions: at batch 1093 the arena fits the free total but no region.
  const CliRun run = run_cli("profile " + kSmallDevice + " --batch-size 1093 --allocator bfc");
  ASSERT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("Cause: fragmentation"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--batch-size 1093 itself fits with --allocator expandable"), std::string::npos)
      << run.output;
  const CliRun expandable = run_cli("profile " + kSmallDevice + " --batch-size 1093 --allocator expandable");
  EXPECT_EQ(expandable.exit_code, 0) << expandable.output;
}

TEST_F(OomCli, ARequestLargerThanTheLimitSaysSoWithoutFragmentationOrOtherSessions) {
  // A first layer of 12.25 MiB on a 10 MiB device: the very first variable fails with nothing in use.
  const CliRun run = run_cli(
      "profile --devices sim:0 --strategy one --sim-memory 10MiB --hidden 4096,4096 "
      "--synthetic --steps 1");
  ASSERT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("in use 0 B, reserved 0 B"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("fragmentation 0.0%"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("Cause: the request alone (12.25 MiB) exceeds the limit (10.00 MiB)"), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("close other sessions"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("the device itself is full"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("real shortage"), std::string::npos) << run.output;
  // The variables alone exceed the device: what they need against what it has, and no batch size.
  const std::size_t fix = run.output.find("Suggested fix: ");
  ASSERT_NE(fix, std::string::npos) << run.output;
  const std::string suggestion = run.output.substr(fix, run.output.find('\n', fix) - fix);
  EXPECT_NE(suggestion.find("The parameters need 76.44 MiB (optimizer state 152.88 MiB) on sim:0; the device has "
                            "10.00 MiB"),
            std::string::npos)
      << suggestion;
  EXPECT_NE(suggestion.find("a larger --sim-memory"), std::string::npos) << suggestion;
  EXPECT_EQ(suggestion.find("--batch-size"), std::string::npos) << suggestion;

  // The case: a first layer of 100,000,000 units (292 GiB of kernel) on the default 1 GiB device.
  const CliRun huge = run_cli("profile --devices sim:0 --strategy one --hidden 100000000 --synthetic --steps 1");
  ASSERT_EQ(huge.exit_code, 3) << huge.output;
  EXPECT_NE(huge.output.find("fragmentation 0.0%"), std::string::npos) << huge.output;
  EXPECT_NE(huge.output.find("Suggested fix: The parameters need "), std::string::npos) << huge.output;
  EXPECT_NE(huge.output.find("; the device has 1.00 GiB, so no batch size fits"), std::string::npos) << huge.output;

  // Mirrored replicas with the same shortage share one sentence instead of repeating it per device.
  const CliRun mirrored = run_cli(
      "profile --devices sim:0,sim:1 --strategy mirrored --shard none --sim-memory 10MiB "
      "--hidden 4096,4096 --synthetic --steps 1");
  ASSERT_EQ(mirrored.exit_code, 3) << mirrored.output;
  EXPECT_NE(mirrored.output.find("The parameters need 76.44 MiB (optimizer state 152.88 MiB) on sim:0, sim:1; each "
                                 "device has 10.00 MiB"),
            std::string::npos)
      << mirrored.output;
  EXPECT_EQ(mirrored.output.find("on sim:1; the device has"), std::string::npos) << mirrored.output;
}

// The case: at batch 128 on 8 MiB the growing BFC's rounding (whole chunks below twice the request)
// leaves too little for the arena, though the planned bytes fit (BFC by --allocator bfc: the default when
// growing is the expandable arena, and --allow-growth false alone preallocates with BFC). The advice comes from replaying the
// allocations through the same allocator, so its batch size is exact: it trains and one more does not.
TEST_F(OomCli, AdviceFollowsTheAllocatorsRounding) {
  const std::string device = "profile --devices sim:0 --strategy one --sim-memory 8MiB --synthetic --steps 2";
  const std::string bfc = device + " --allocator bfc";
  const CliRun run = run_cli(bfc + " --batch-size 128");
  ASSERT_EQ(run.exit_code, 3) << run.output;
  EXPECT_EQ(run.output.find("not even --batch-size 1"), std::string::npos) << run.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(run.output, match, std::regex("--batch-size ([0-9]+) fits: its allocations")))
      << run.output;
  const int suggested = std::stoi(match[1]);
  ASSERT_GT(suggested, 1);
  EXPECT_EQ(run_cli(bfc + " --batch-size " + std::to_string(suggested)).exit_code, 0) << suggested;
  EXPECT_EQ(run_cli(bfc + " --batch-size " + std::to_string(suggested + 1)).exit_code, 3) << suggested + 1;
  // The settings named for the requested batch, each of which trains it.
  const std::string named = "--batch-size 128 itself fits with --allocator expandable, --allow-growth false";
  ASSERT_NE(run.output.find(named), std::string::npos) << run.output;
  for (const std::string alternative : {"--allocator expandable", "--allow-growth false"}) {
    const CliRun fixed = run_cli(device + " --batch-size 128 " + alternative);
    EXPECT_EQ(fixed.exit_code, 0) << alternative << "\n" << fixed.output;
  }
}

// The report files at an out-of-memory error: what was live then (the variables), and the failure itself.
void expect_reports_at_the_failure(const fs::path& out, const std::string& output) {
  for (const char* file : {"snapshot.json", "trace.json", "report.html", "summary.txt"}) {
    EXPECT_TRUE(fs::exists(out / file)) << file << "\n" << output;
  }
  bool replayable_trace = false;  // trace.csv, or one per device
  std::error_code listing;
  for (const fs::directory_entry& entry : fs::directory_iterator(out, listing)) {
    const std::string name = entry.path().filename().string();
    replayable_trace |= name.starts_with("trace") && name.ends_with(".csv");
  }
  EXPECT_TRUE(replayable_trace) << output;
  std::ifstream in(out / "snapshot.json");
  ASSERT_TRUE(in.good()) << output;
  const nlohmann::json snapshot = nlohmann::json::parse(in);
  EXPECT_EQ(snapshot.at("reason"), "out of memory on sim:0");
  const nlohmann::json& device = snapshot.at("devices").at(0);
  EXPECT_GE(device.at("failures"), 1);
  EXPECT_EQ(device.at("live").size(), 12u) << "the variables, still live at the failure";
}

TEST_F(OomCli, ProfileOutWritesTheReportsAtTheFailure) {
  const fs::path out = fs::temp_directory_path() / ("tp_oom_cli_profile_out_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const CliRun run = run_cli("profile " + kSmallDevice + " --batch-size 4096 --out '" + out.string() + "'");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  expect_reports_at_the_failure(out, run.output);
  fs::remove_all(out);
}

TEST_F(OomCli, TrainWithProfileWritesTheReportsAtTheFailure) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  }
  const fs::path out = fs::temp_directory_path() / ("tp_oom_cli_profile_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const CliRun run = run_cli(
      "train --epochs 1 --limit-train 2000 --strategy one --devices sim:0 --sim-memory 8MiB --allocator bfc "
      "--batch-size 128 --profile '" +
      out.string() + "'");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("out of memory on sim:0"), std::string::npos) << run.output;
  // The same run's advice follows the allocator's rounding (as AdviceFollowsTheAllocatorsRounding checks).
  EXPECT_EQ(run.output.find("not even --batch-size 1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--batch-size 128 itself fits with --allocator expandable"), std::string::npos)
      << run.output;
  expect_reports_at_the_failure(out, run.output);
  fs::remove_all(out);
}

}  // namespace
