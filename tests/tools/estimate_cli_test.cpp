// SPDX-License-Identifier: Apache-2.0
// tensorpool estimate and tensorpool profile as a user runs them: the estimate, made without allocating, equals
// the peak measured over real training steps (requested bytes, and in-use bytes after the allocator's rounding)
// for the Keras-example MLP at batch 32 and 128 on one and two sim devices; the files profile writes are
// complete, and each device's trace CSV replays that device's peak in `tensorpool replay`; train --profile
// writes the same files; under mpirun the estimate plans ZeRO across workers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tensorpool/distribute/mpi.hpp"
#include "tools/support/cli_runner.hpp"

namespace {

namespace fs = std::filesystem;
using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;
using tp::cli::testing::run_cli;

class EstimateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
    directory_ = fs::temp_directory_path() / ("tp_estimate_cli_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  static nlohmann::json run_json(const std::string& arguments) {
    const CliRun run = run_cli(arguments);
    EXPECT_EQ(run.exit_code, 0) << arguments << "\n" << run.output;
    try {
      return nlohmann::json::parse(run.output);
    } catch (const std::exception& error) {
      ADD_FAILURE() << arguments << ": not JSON (" << error.what() << "):\n" << run.output;
      return {};
    }
  }

  fs::path directory_;
};

struct Case {
  const char* devices;
  int batch;
};

class EstimateEqualsMeasured : public EstimateCli, public ::testing::WithParamInterface<Case> {};

TEST_P(EstimateEqualsMeasured, OnTheMlp) {
  const Case c = GetParam();
  const std::string strategy = std::string(c.devices).find(',') == std::string::npos ? " --strategy one" : "";
  const std::string model =
      std::string("--devices ") + c.devices + strategy + " --batch-size " + std::to_string(c.batch);
  const nlohmann::json estimate = run_json("estimate " + model + " --json");
  const nlohmann::json measured = run_json("profile " + model + " --steps 3 --synthetic --json");
  ASSERT_TRUE(estimate.contains("devices") && measured.contains("devices"));
  ASSERT_EQ(estimate.at("devices").size(), measured.at("devices").size());
  for (std::size_t index = 0; index < estimate.at("devices").size(); ++index) {
    const nlohmann::json& planned = estimate.at("devices").at(index);
    const nlohmann::json& real = measured.at("devices").at(index);
    ASSERT_EQ(planned.at("device"), real.at("device"));
    EXPECT_EQ(planned.at("planned_peak_bytes"), real.at("measured_peak_requested_bytes")) << planned.at("device");
    EXPECT_EQ(planned.at("planned_peak_allocated_bytes"), real.at("measured_peak_in_use_bytes"))
        << planned.at("device");
    EXPECT_EQ(real.at("recorded_peak_in_use_bytes"), real.at("measured_peak_in_use_bytes"));
    // The per-tensor rows add up: variables + arena = the planned peak.
    std::size_t persistent = 0;
    for (const nlohmann::json& row : estimate.at("tensors")) {
      if (row.at("device") != planned.at("device")) continue;
      const std::string placement = row.at("placement");
      if (placement == "variable" || placement == "arena") persistent += row.at("bytes").get<std::size_t>();
      EXPECT_FALSE(row.at("kind").get<std::string>().empty());
    }
    EXPECT_EQ(persistent, planned.at("planned_peak_bytes").get<std::size_t>());
  }
}

INSTANTIATE_TEST_SUITE_P(MlpBatchesAndDevices, EstimateEqualsMeasured,
                         ::testing::Values(Case{"sim:0", 32}, Case{"sim:0", 128}, Case{"sim:0,sim:1", 32},
                                           Case{"sim:0,sim:1", 128}));

TEST_F(EstimateCli, TheEstimateNamesEveryKindAndShape) {
  const CliRun run = run_cli("estimate --devices sim:0 --strategy one --batch-size 32");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* text :
       {"dense/kernel", "parameter", "float32[784,512]", "optimizer_state", "dense/kernel/adam_m", "weight_gradient",
        "activation_gradient", "activation", "step_arena", "train/arena", "planned peak on sim:0", "totals by kind"}) {
    EXPECT_NE(run.output.find(text), std::string::npos) << text << " missing from\n" << run.output;
  }
}

// The allocated bytes of one tensor of the estimate, by name.
std::size_t allocated_bytes(const nlohmann::json& estimate, const std::string& name) {
  for (const nlohmann::json& row : estimate.at("tensors")) {
    if (row.at("name") == name) return row.at("allocated_bytes").get<std::size_t>();
  }
  ADD_FAILURE() << name << " is not in the estimate";
  return 0;
}

// Issue 23: at batch 128 TensorFlow's split rule places dense/kernel/adam_v (784 x 512 float32, 1,605,632 bytes)
// in a larger chunk it does not split; --bfc-split exact (or TP_BFC_SPLIT=exact) places it in a chunk of its
// own size, and the planned peak after rounding shrinks with it.
TEST_F(EstimateCli, BfcSplitExactPlacesEachTensorInAChunkOfItsSize) {
  const std::string base = "estimate --devices sim:0 --strategy one --batch-size 128 --json";
  const std::string model = base + " --allocator bfc";
  const nlohmann::json tensorflow = run_json(model);
  const nlohmann::json exact = run_json(model + " --bfc-split exact");
  const CliRun from_env = run_cli(model, "TP_BFC_SPLIT=exact");
  ASSERT_EQ(from_env.exit_code, 0) << from_env.output;
  constexpr std::size_t kAdamV = 784 * 512 * 4;
  EXPECT_GT(allocated_bytes(tensorflow, "dense/kernel/adam_v"), kAdamV);
  EXPECT_EQ(allocated_bytes(exact, "dense/kernel/adam_v"), kAdamV);
  EXPECT_EQ(allocated_bytes(nlohmann::json::parse(from_env.output), "dense/kernel/adam_v"), kAdamV);
  const auto peak = [](const nlohmann::json& estimate) {
    return estimate.at("devices").at(0).at("planned_peak_allocated_bytes").get<std::size_t>();
  };
  EXPECT_LT(peak(exact), peak(tensorflow));
  EXPECT_GE(peak(exact), exact.at("devices").at(0).at("planned_peak_bytes").get<std::size_t>());
  // A split policy for an allocator without one is refused, naming the flag and the fix.
  const CliRun refused = run_cli(base + " --allocator expandable --bfc-split exact");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--bfc-split exact applies to the bfc allocator, and sim:0 uses expandable;"),
            std::string::npos)
      << refused.output;
}

// One vocabulary (issue 18): the step's gradients are activation_gradient or weight_gradient, never activation,
// and the arena's split by kind, taken at its fullest planned step, fits in the arena.
void expect_one_vocabulary(const nlohmann::json& estimate) {
  const std::set<std::string> kinds = {
      "parameter", "optimizer_state", "weight_gradient", "step_arena", "activation", "activation_gradient", "other"};
  for (const nlohmann::json& row : estimate.at("tensors")) {
    const std::string name = row.at("name"), kind = row.at("kind");
    EXPECT_TRUE(kinds.contains(kind)) << name << ": " << kind;
    if (name.starts_with("gradients/") || name.find("/gradients/") != std::string::npos) {
      EXPECT_TRUE(kind == "activation_gradient" || kind == "weight_gradient") << name << ": " << kind;
    }
  }
  EXPECT_EQ(estimate.at("tensors").at(0).at("kind"), "parameter");
  for (const nlohmann::json& device : estimate.at("devices")) {
    const nlohmann::json& live = device.at("arena_live_at_peak");
    const std::size_t split = live.at("activation").get<std::size_t>() +
                              live.at("activation_gradient").get<std::size_t>() +
                              live.at("weight_gradient").get<std::size_t>() + live.at("other").get<std::size_t>();
    EXPECT_LE(split, device.at("arena_bytes").get<std::size_t>()) << device.dump();
    EXPECT_GE(split, device.at("lower_bound_bytes").get<std::size_t>()) << device.dump();
    EXPECT_GT(live.at("weight_gradient").get<std::size_t>(), 0u) << device.dump();
  }
}

TEST_F(EstimateCli, KindsAreOneVocabularyAndTheArenaSplitFitsTheArena) {
  for (const std::string devices : {"--devices sim:0 --strategy one", "--devices sim:0,sim:1"}) {
    SCOPED_TRACE(devices);
    expect_one_vocabulary(run_json("estimate " + devices + " --batch-size 64 --json"));
  }
}

// ZeRO across workers, planned under mpirun: rank 0 prints its plan once (valid JSON), and each worker's optimizer
// state is half of unsharded multi-worker training's and equals a device's under mirrored ZeRO over two devices.
TEST_F(EstimateCli, ZeroAcrossTwoWorkersPlansHalfTheOptimizerStatePerWorker) {
  if (!tp::distribute::mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed";
  const auto optimizer_state = [](const std::string& arguments, const std::string& launcher) {
    const CliRun run = run_cli("estimate --json " + arguments, launcher);
    EXPECT_EQ(run.exit_code, 0) << arguments << "\n" << run.output;
    try {
      return nlohmann::json::parse(run.output)
          .at("devices")
          .at(0)
          .at("bytes_by_kind")
          .at("optimizer_state")
          .get<double>();
    } catch (const std::exception& error) {
      ADD_FAILURE() << arguments << ": not one JSON document (" << error.what() << "):\n" << run.output;
      return 0.0;
    }
  };
  const std::string mpirun = "mpirun --allow-run-as-root --oversubscribe -np 2 ";
  const double unsharded = optimizer_state("--strategy multi_worker --devices sim:0", mpirun);
  EXPECT_EQ(unsharded, 2.0 * 4 * 407050) << "two Adam moments of the MLP's 407,050 parameters";
  for (const std::string shard : {"optimizer", "gradients"}) {
    EXPECT_EQ(optimizer_state("--strategy multi_worker --devices sim:0 --shard " + shard, mpirun), unsharded / 2)
        << shard;
    EXPECT_EQ(optimizer_state("--strategy mirrored --devices sim:0,sim:1 --shard " + shard, ""), unsharded / 2)
        << shard;
  }
}

TEST_F(EstimateCli, ProfileWritesEveryFileAndItsTraceReplays) {
  const fs::path out = directory_ / "profile";
  const CliRun run =
      run_cli("profile --devices sim:0,sim:1 --batch-size 64 --steps 4 --synthetic --out '" + out.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* file : {"snapshot.json", "trace.json", "report.html", "summary.txt"}) {
    EXPECT_GT(fs::file_size(out / file), 0u) << file;
  }
  EXPECT_FALSE(fs::exists(out / "trace.csv")) << "a trace of all devices merged replays their sum on one device";
  std::ifstream snapshot_file(out / "snapshot.json");
  const nlohmann::json snapshot = nlohmann::json::parse(snapshot_file);
  ASSERT_EQ(snapshot.at("devices").size(), 3u);  // sim:0, sim:1 and cpu:0 (host staging)
  // One trace per device, whose replay reproduces that device's recorded allocations and peak.
  for (const nlohmann::json& device : snapshot.at("devices")) {
    std::string name = device.at("device").get<std::string>();
    EXPECT_EQ(device.at("events").at("dropped"), 0) << name;
    std::size_t recorded_allocations = 0;
    for (const nlohmann::json& row : device.at("events").at("rows")) recorded_allocations += row.at(0) == "allocate";
    std::replace(name.begin(), name.end(), ':', '_');
    const fs::path trace = out / ("trace-" + name + ".csv");
    ASSERT_TRUE(fs::exists(trace)) << trace;
    const nlohmann::json replay = run_json("replay --trace '" + trace.string() + "' --allocator bfc --json");
    EXPECT_EQ(replay.at("allocations").get<std::size_t>(), recorded_allocations) << name;
    EXPECT_EQ(replay.at("peak_live_bytes"), device.at("peak").at("requested_bytes")) << name;
    EXPECT_EQ(replay.at("results").at(0).at("oom_count"), 0) << name;
  }
  EXPECT_NE(run.output.find("measured peak"), std::string::npos) << run.output;
}

TEST_F(EstimateCli, TrainWithProfileWritesTheReports) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  }
  const fs::path out = directory_ / "train";
  const CliRun run =
      run_cli("train --epochs 1 --limit-train 640 --strategy one --devices sim:0 --profile '" + out.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* file :
       {"snapshot.json", "trace.json", "trace-sim_0.csv", "trace-cpu_0.csv", "report.html", "summary.txt"}) {
    EXPECT_TRUE(fs::exists(out / file)) << file;
  }
  std::ifstream snapshot_file(out / "snapshot.json");
  const nlohmann::json snapshot = nlohmann::json::parse(snapshot_file);
  EXPECT_EQ(snapshot.at("devices").at(0).at("device"), "sim:0");
  EXPECT_GT(snapshot.at("devices").at(0).at("peak").at("in_use_bytes").get<std::size_t>(), 0u);
}

// train's memory summary speaks the estimate's vocabulary: its arena split (live at the fullest planned step)
// fits in the arena, and no gradient is labelled an activation.
TEST_F(EstimateCli, TrainSummaryKindsMatchTheEstimate) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  }
  const fs::path summary = directory_ / "summary.json";
  const CliRun run = run_cli("train --epochs 1 --limit-train 640 --strategy one --devices sim:0 --summary-json '" +
                             summary.string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("MatMul:0 float32[784,512] (activation"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("gradients/dense/MatMul/MatMul:0 float32[784,512] (weight_gradient (in arena))"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("train/arena  (step_arena)"), std::string::npos) << run.output;
  std::ifstream in(summary);
  const nlohmann::json device = nlohmann::json::parse(in).at("devices").at(0);
  const nlohmann::json& live = device.at("arena_live_at_peak");
  const std::size_t split = live.at("activation").get<std::size_t>() +
                            live.at("activation_gradient").get<std::size_t>() +
                            live.at("weight_gradient").get<std::size_t>() + live.at("other").get<std::size_t>();
  EXPECT_LE(split, device.at("arena_bytes").get<std::size_t>()) << device.dump();
  EXPECT_GT(split, 0u);
  for (const nlohmann::json& tensor : device.at("largest_tensors")) {
    const std::string name = tensor.at("name"), kind = tensor.at("kind");
    if (name.starts_with("gradients/")) {
      EXPECT_EQ(kind.find("activation ("), std::string::npos) << name << kind;
    }
  }
  // The same kinds as `estimate` gives the same tensors.
  const nlohmann::json estimate = run_json("estimate --strategy one --devices sim:0 --batch-size 32 --json");
  expect_one_vocabulary(estimate);
  for (const nlohmann::json& tensor : device.at("largest_tensors")) {
    for (const nlohmann::json& row : estimate.at("tensors")) {
      if (row.at("name") != tensor.at("name")) continue;
      const std::string kind = tensor.at("kind");
      EXPECT_EQ(kind.substr(0, kind.find(" (in arena)")), row.at("kind").get<std::string>()) << row.dump();
    }
  }
}

TEST_F(EstimateCli, BadFlagsExitTwoWithOneLine) {
  const CliRun run = run_cli("estimate --batch-size 0");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--batch-size must be positive"), std::string::npos) << run.output;
  const CliRun profile = run_cli("profile --steps 0 --synthetic");
  EXPECT_EQ(profile.exit_code, 2) << profile.output;
}

}  // namespace
