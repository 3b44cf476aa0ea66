// SPDX-License-Identifier: Apache-2.0
// `tensorpool train --strategy parameter_server`: in-process workers and `mpirun -np 3` (rank 0 serves) both
// train and report the staleness of their updates; flags that do not apply are refused by name; a stalled
// worker rank (SIGSTOP) makes the server fail within the timeout naming that rank. The Fashion-MNIST and MPI
// cases are skipped, saying why, when either is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tensorpool/distribute/mpi.hpp"
#include "tools/support/cli_runner.hpp"

namespace tp::cli::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kData = "/usr/share/datasets/fashion-mnist";
const std::string kMpirun = "mpirun --allow-run-as-root --oversubscribe -np 3 ";
const std::string kTrain = "train --strategy parameter_server --limit-train 1600 --intra-op-threads 1 --seed 3";

bool have_data() {
  return fs::exists(kData / "train-images-idx3-ubyte.gz") || fs::exists(kData / "train-images-idx3-ubyte");
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ParameterServerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() / ("tp_ps_cli_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }
  void need_mpi() {
    if (!distribute::mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed";
  }
  fs::path directory_;
};

TEST_F(ParameterServerCli, FlagsThatDoNotApplyAreRefusedByName) {
  const CliRun mixed = run_cli("train --strategy parameter_server --precision mixed_float16 --epochs 0");
  EXPECT_NE(mixed.exit_code, 0);
  EXPECT_NE(mixed.output.find("--precision mixed_float16 is not available with --strategy parameter_server"),
            std::string::npos)
      << mixed.output;
  const CliRun shard = run_cli("train --strategy parameter_server --shard optimizer --epochs 0");
  EXPECT_NE(shard.exit_code, 0);
  EXPECT_NE(shard.output.find("--shard optimizer does not apply"), std::string::npos) << shard.output;
  const CliRun negative = run_cli("train --strategy parameter_server --max-staleness -1 --epochs 0");
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(negative.output.find("--max-staleness '-1'"), std::string::npos) << negative.output;
  const CliRun mirrored = run_cli("train --strategy mirrored --max-staleness 2 --epochs 0");
  EXPECT_NE(mirrored.exit_code, 0);
  EXPECT_NE(mirrored.output.find("--max-staleness applies to --strategy parameter_server"), std::string::npos)
      << mirrored.output;
  const CliRun same = run_cli("train --strategy parameter_server --ps-device sim:0 --devices sim:0,sim:1 --epochs 0");
  EXPECT_NE(same.exit_code, 0);
  EXPECT_NE(same.output.find("both the parameter device and a worker device"), std::string::npos) << same.output;
}

TEST_F(ParameterServerCli, InProcessAndMpiWorkersTrainAndReportStaleness) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  const fs::path local = directory_ / "local.json";
  const CliRun in_process = run_cli(kTrain + " --epochs 2 --max-staleness 2 --summary-json " + local.string());
  ASSERT_EQ(in_process.exit_code, 0) << in_process.output;
  EXPECT_NE(in_process.output.find("2 asynchronous workers (sim:0,sim:1), max staleness 2"), std::string::npos)
      << in_process.output;
  const nlohmann::json summary = nlohmann::json::parse(read_file(local));
  EXPECT_EQ(summary["parameter_server"]["updates"], 100);  // 1,600 examples: 2 x 25 batches of each half, 2 epochs
  EXPECT_LE(summary["parameter_server"]["staleness_max"].get<int>(), 5);  // (N - 1)(2K + 1)
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.6);
  // The memory summary plans each worker's own step on its device (plan_parameter_server), not only cpu:0.
  ASSERT_EQ(summary["devices"].size(), 3u) << summary.dump();
  for (const nlohmann::json& device : summary["devices"]) {
    if (device["device"] == "cpu:0") continue;
    EXPECT_GT(device["planned_peak_bytes"].get<double>(), 0) << device.dump();
    EXPECT_LE(device["planned_peak_bytes"].get<double>(), device["peak_in_use_bytes"].get<double>()) << device.dump();
  }

  need_mpi();
  if (IsSkipped()) return;
  const fs::path remote = directory_ / "mpi.json";
  const CliRun ranks = run_cli(kTrain + " --epochs 2 --summary-json " + remote.string(), kMpirun);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
  EXPECT_NE(ranks.output.find("parameter server: rank 0 on cpu:0, 2 worker ranks"), std::string::npos) << ranks.output;
  const nlohmann::json across = nlohmann::json::parse(read_file(remote));
  EXPECT_EQ(across["workers"], 3);
  EXPECT_EQ(across["parameter_server"]["updates"], 100);
  EXPECT_EQ(across["parameter_server"]["worker_steps"], nlohmann::json({50, 50}));
  EXPECT_LT(across["test_loss"].get<double>(), 1.5) << "an untrained model's loss is about ln 10 = 2.3";
  EXPECT_GT(across["test_accuracy"].get<double>(), 0.6);
}

// The pid of the tensorpool process of rank `rank` whose environment holds `marker`, or -1.
pid_t rank_process(const std::string& marker, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string environment = read_file(entry.path() / "environ");
    std::ifstream comm(entry.path() / "comm");
    std::string command;
    std::getline(comm, command);
    if (command == "tensorpool" && environment.find(marker + '\0') != std::string::npos &&
        environment.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) {
      return std::stoi(name);
    }
  }
  return -1;
}

TEST_F(ParameterServerCli, AStalledWorkerRankMakesTheServerFailNamingIt) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
  need_mpi();
  if (IsSkipped()) return;
  const fs::path output = directory_ / "stalled.txt";
  const std::string marker = "TP_TEST_JOB=" + directory_.string();
  const pid_t job = ::fork();
  if (job == 0) {
    ::setpgid(0, 0);
    const std::string line = marker + " TP_COLLECTIVE_TIMEOUT=4 " + kMpirun + "'" + cli_path().string() +
                             "' train --strategy parameter_server --epochs 100 --intra-op-threads 1 > '" +
                             output.string() + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  pid_t worker = -1;
  for (int attempt = 0; attempt < 300 && worker < 0; ++attempt) {  // until the job trains
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (read_file(output).find("planned peak") != std::string::npos) worker = rank_process(marker, 2);
  }
  ASSERT_GT(worker, 0) << "rank 2 never started: " << read_file(output);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(worker, SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  int exit_code = -2;
  while (exit_code == -2 && std::chrono::steady_clock::now() - stopped < std::chrono::seconds(60)) {
    int status = 0;
    if (::waitpid(job, &status, WNOHANG) == job) exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  if (exit_code == -2) ::kill(-job, SIGKILL);
  ::kill(worker, SIGKILL);
  if (exit_code == -2) ::waitpid(job, nullptr, 0);
  const std::string text = read_file(output);
  EXPECT_NE(exit_code, 0) << text;
  EXPECT_NE(exit_code, -2) << "the job hung for 60 s after a worker stalled: " << text;
  EXPECT_LT(seconds, 30) << "the timeout is 4 s";
  // Rank 0 notices either the silence of rank 2 or that its reply to rank 2 is never received.
  const bool named = text.find("worker rank 2 sent nothing") != std::string::npos ||
                     text.find("rank 2 stalled or died") != std::string::npos;
  EXPECT_TRUE(named) << "the error does not name rank 2: " << text;
}

// Ranks started with different flags compare them before serving or working and refuse, naming each
// difference ("ps" and "parameter_server" are one strategy).
TEST_F(ParameterServerCli, RanksStartedWithDifferentFlagsRefuseNamingTheRankAndTheFlag) {
  need_mpi();
  if (IsSkipped()) return;
  const std::string common = " --limit-train 320 --intra-op-threads 1";
  const CliRun run = run_cli("train --strategy parameter_server --epochs 1 --seed 7" + common,
                             "mpirun --allow-run-as-root --oversubscribe -np 2 '" + cli_path().string() +
                                 "' train --strategy ps --epochs 2" + common + " : -np 1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("worker rank 2 was started with --seed 7, rank 0 with --seed 42; worker rank 2 was "
                            "started with --epochs 1, rank 0 with --epochs 2: start every worker with the same flags"),
            std::string::npos)
      << run.output;
}

// estimate and profile plan the parameter-server strategy as it trains: the variables and the optimizer state
// on --ps-device (cpu:0), each worker device a copy of the parameters and its own step, no optimizer state.
TEST_F(ParameterServerCli, EstimatePlansTheServersVariablesAndEachWorkersStep) {
  const CliRun run = run_cli("estimate --strategy ps --devices sim:0,sim:1 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json json = nlohmann::json::parse(run.output);
  ASSERT_EQ(json.at("devices").size(), 3u) << run.output;
  constexpr double kParameterBytes = 4.0 * 407050;  // the MLP's float32 parameters
  const nlohmann::json& server = json.at("devices").at(0);
  EXPECT_EQ(server.at("device").get<std::string>(), "cpu:0");
  EXPECT_EQ(server.at("bytes_by_kind").at("parameter").get<double>(), kParameterBytes);
  EXPECT_EQ(server.at("bytes_by_kind").at("optimizer_state").get<double>(), 2 * kParameterBytes) << "Adam's moments";
  EXPECT_EQ(server.at("arena_bytes").get<double>(), 0) << "the server runs no step";
  for (std::size_t index = 1; index < 3; ++index) {
    const nlohmann::json& worker = json.at("devices").at(index);
    EXPECT_EQ(worker.at("device").get<std::string>(), "sim:" + std::to_string(index - 1));
    EXPECT_EQ(worker.at("bytes_by_kind").at("parameter").get<double>(), kParameterBytes);
    EXPECT_FALSE(worker.at("bytes_by_kind").contains("optimizer_state")) << worker.dump();
    EXPECT_GT(worker.at("arena_bytes").get<double>(), 0);
  }
}

TEST_F(ParameterServerCli, ProfileMeasuresEachWorkerAtItsPlannedPeak) {
  const CliRun run = run_cli(
      "profile --strategy parameter_server --devices sim:0,sim:1 --ps-device sim:2 --synthetic --steps 4 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json json = nlohmann::json::parse(run.output);
  ASSERT_EQ(json.at("devices").size(), 3u) << run.output;
  const nlohmann::json& server = json.at("devices").at(0);
  EXPECT_EQ(server.at("device").get<std::string>(), "sim:2") << "the parameter device";
  // The server's plan is the model's variables; its update copy and the pushed gradients come on top.
  EXPECT_GE(server.at("measured_peak_requested_bytes").get<double>(), server.at("planned_peak_bytes").get<double>());
  for (std::size_t index = 1; index < 3; ++index) {
    const nlohmann::json& worker = json.at("devices").at(index);
    EXPECT_EQ(worker.at("planned_peak_bytes").get<double>(), worker.at("measured_peak_requested_bytes").get<double>())
        << worker.dump();
  }
}

}  // namespace
}  // namespace tp::cli::testing
