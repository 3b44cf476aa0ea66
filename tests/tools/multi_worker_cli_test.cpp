// SPDX-License-Identifier: Apache-2.0
// `mpirun -np 2 tensorpool train --strategy multi_worker`: two processes of one sim device each end with the
// weights of single-process mirrored training over two devices (same global batch and seed) within float
// tolerance; a stalled worker (SIGSTOP) makes the other fail within the collective timeout naming its rank;
// a worker killed mid-epoch (SIGKILL) stops the job, and rerunning the command resumes from the last
// checkpoint at its step; ZeRO across workers (--shard) ends as mirrored ZeRO does and halves each worker's
// optimizer state. Skipped, saying why, without mpirun, MPI or the dataset.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "tools/support/cli_runner.hpp"

namespace tp::cli::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kData = "/usr/share/datasets/fashion-mnist";
const std::string kMpirun = "mpirun --allow-run-as-root --oversubscribe -np 2 ";
// 1,280 examples: 40 steps of the global batch 32, two checkpoints a second apart. The runs compared across
// processes pin the GEMM library: under "auto" each process times its own choice per shape.
const std::string kTrain =
    "train --strategy multi_worker --devices sim:0 --limit-train 1280 --intra-op-threads 1 --seed 3 --gemm openblas";

class MultiWorkerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!distribute::mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed";
    if (!fs::exists(kData / "train-images-idx3-ubyte.gz") && !fs::exists(kData / "train-images-idx3-ubyte")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist";
    }
    directory_ = fs::temp_directory_path() / ("tp_multi_worker_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override {
    if (!directory_.empty()) fs::remove_all(directory_);
  }
  fs::path directory_;
};

std::map<std::string, std::vector<float>> weights(const fs::path& directory) {
  std::map<std::string, std::vector<float>> result;
  const std::optional<train::CheckpointState> state = train::load_latest_checkpoint(directory);
  if (!state) return result;
  for (const auto& [name, tensor] : state->tensors) {
    if (name.find("kernel") == std::string::npos && name.find("bias") == std::string::npos) continue;
    if (name.find("adam") != std::string::npos) continue;
    std::vector<float> values(tensor.bytes.size() / sizeof(float));
    std::memcpy(values.data(), tensor.bytes.data(), values.size() * sizeof(float));
    result[name] = std::move(values);
  }
  return result;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The parameters of the latest checkpoints in the two directories agree within 1e-5.
void expect_same_weights(const fs::path& workers_directory, const fs::path& mirrored_directory) {
  const auto a = weights(workers_directory);
  const auto b = weights(mirrored_directory);
  ASSERT_EQ(a.size(), 4u) << "the workers' checkpoint lacks the parameters";
  ASSERT_EQ(b.size(), 4u);
  double largest = 0;
  for (const auto& [name, values] : a) {
    ASSERT_TRUE(b.contains(name)) << name;
    ASSERT_EQ(values.size(), b.at(name).size()) << name;
    for (std::size_t i = 0; i < values.size(); ++i) {
      largest = std::max(largest, static_cast<double>(std::abs(values[i] - b.at(name)[i])));
    }
  }
  EXPECT_LE(largest, 1e-5) << "the largest difference between the two runs' weights";
}

TEST_F(MultiWorkerCli, TwoWorkersEndWithTheWeightsOfMirroredTraining) {
  const CliRun workers = run_cli(kTrain + " --epochs 2 --checkpoint-dir " + (directory_ / "workers").string(), kMpirun);
  ASSERT_EQ(workers.exit_code, 0) << workers.output;
  EXPECT_NE(workers.output.find("multi_worker strategy on 2 workers x sim:0"), std::string::npos) << workers.output;
  const CliRun mirrored = run_cli(
      "train --strategy mirrored --devices sim:0,sim:1 --epochs 2 --limit-train 1280 --intra-op-threads 1 --seed 3 "
      "--gemm openblas "
      "--checkpoint-dir " +
      (directory_ / "mirrored").string());
  ASSERT_EQ(mirrored.exit_code, 0) << mirrored.output;
  expect_same_weights(directory_ / "workers", directory_ / "mirrored");
}

// Mixed precision across processes: the float16 gradients are summed by MPI's user operation (one float32
// addition rounded to float16, as the in-process ring does), so two workers end with the weights of mirrored
// training over two devices, within the tolerance of the float32 case.
TEST_F(MultiWorkerCli, TwoWorkersTrainInFloat16LikeMirroredTraining) {
  const std::string common =
      " --epochs 1 --limit-train 640 --intra-op-threads 1 --seed 3 --gemm openblas --precision mixed_float16";
  const CliRun workers = run_cli("train --strategy multi_worker --devices sim:0" + common + " --checkpoint-dir " +
                                     (directory_ / "workers").string(),
                                 kMpirun);
  ASSERT_EQ(workers.exit_code, 0) << workers.output;
  EXPECT_NE(workers.output.find("precision mixed_float16"), std::string::npos) << workers.output;
  const CliRun mirrored = run_cli("train --strategy mirrored --devices sim:0,sim:1" + common + " --checkpoint-dir " +
                                  (directory_ / "mirrored").string());
  ASSERT_EQ(mirrored.exit_code, 0) << mirrored.output;
  expect_same_weights(directory_ / "workers", directory_ / "mirrored");
}

// ZeRO across workers: each worker keeps the optimizer state of its 1/N of the parameters; rank 0's checkpoint
// gathers every worker's shard under the names mirrored ZeRO uses ("shard_<k>/adam_m"), and each worker restores
// its own. With two workers every sum is a + b, so an epoch, a resume from the gathered checkpoint and a second
// epoch end bitwise where mirrored ZeRO over two devices does, moments included.
TEST_F(MultiWorkerCli, TwoWorkersWithZeroEndBitwiseAsMirroredZeroAfterAResume) {
  for (const std::string shard : {"optimizer", "gradients"}) {
    SCOPED_TRACE("--shard " + shard);
    const std::string common = " --limit-train 640 --intra-op-threads 1 --seed 3 --gemm openblas --shard " + shard;
    const fs::path workers = directory_ / ("workers_" + shard);
    const std::string train_workers =
        "train --strategy multi_worker --devices sim:0" + common + " --checkpoint-dir " + workers.string();
    const CliRun first = run_cli(train_workers + " --epochs 1", kMpirun);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const std::optional<train::CheckpointState> after_one = train::load_latest_checkpoint(workers);
    ASSERT_TRUE(after_one.has_value());
    EXPECT_TRUE(after_one->tensors.contains("shard_0/adam_m")) << "rank 0's own shard";
    EXPECT_TRUE(after_one->tensors.contains("shard_1/adam_v")) << "rank 1's shard, gathered into rank 0's checkpoint";
    EXPECT_FALSE(after_one->tensors.contains("dense/kernel/adam_m")) << "an unsharded moment";
    const CliRun resumed = run_cli(train_workers + " --epochs 2", kMpirun);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from step " + std::to_string(after_one->step)), std::string::npos)
        << resumed.output;
    const fs::path mirrored = directory_ / ("mirrored_" + shard);
    const CliRun reference = run_cli("train --strategy mirrored --devices sim:0,sim:1 --epochs 2" + common +
                                     " --checkpoint-dir " + mirrored.string());
    ASSERT_EQ(reference.exit_code, 0) << reference.output;
    const train::CheckpointState a = *train::load_latest_checkpoint(workers);
    const train::CheckpointState b = *train::load_latest_checkpoint(mirrored);
    EXPECT_EQ(a.step, b.step);
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (const auto& [name, tensor] : a.tensors) {
      ASSERT_TRUE(b.tensors.contains(name)) << name;
      EXPECT_TRUE(tensor == b.tensors.at(name)) << name << " differs from mirrored ZeRO's";
    }
  }
}

// Per worker, the optimizer state is half of unsharded multi-worker training's (plus at most a padding block per
// slot), read from rank 0's memory summary.
TEST_F(MultiWorkerCli, ZeroHalvesEachWorkersOptimizerStateBytes) {
  std::map<std::string, double> bytes;
  for (const std::string shard : {"none", "optimizer", "gradients"}) {
    const fs::path summary = directory_ / (shard + ".json");
    const CliRun run = run_cli(
        "train --strategy multi_worker --devices sim:0 --epochs 1 --limit-train 320 "
        "--intra-op-threads 1 --shard " +
            shard + " --summary-json " + summary.string(),
        kMpirun);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const nlohmann::json json = nlohmann::json::parse(read_file(summary));
    EXPECT_EQ(json.at("shard").get<std::string>(), shard);
    bytes[shard] = json.at("devices").at(0).at("optimizer_state_bytes").get<double>();
  }
  ASSERT_GT(bytes["none"], 3e6) << "two Adam moments of 407,050 parameters";
  for (const std::string shard : {"optimizer", "gradients"}) {
    EXPECT_GE(bytes[shard], bytes["none"] / 2 - 2 * 256) << shard;
    EXPECT_LE(bytes[shard], bytes["none"] / 2 + 2 * 1024) << shard;
  }
}

// Three workers: sums of three in MPI's order against the ring's, so within float tolerance, not bitwise.
TEST_F(MultiWorkerCli, ThreeWorkersWithZeroMatchMirroredZeroOverThreeDevices) {
  const std::string common =
      " --epochs 1 --limit-train 640 --intra-op-threads 1 --seed 3 --gemm openblas --shard gradients";
  const CliRun workers = run_cli("train --strategy multi_worker --devices sim:0" + common + " --checkpoint-dir " +
                                     (directory_ / "workers").string(),
                                 "mpirun --allow-run-as-root --oversubscribe -np 3 ");
  ASSERT_EQ(workers.exit_code, 0) << workers.output;
  const CliRun mirrored = run_cli("train --strategy mirrored --devices sim:0,sim:1,sim:2" + common +
                                  " --checkpoint-dir " + (directory_ / "mirrored").string());
  ASSERT_EQ(mirrored.exit_code, 0) << mirrored.output;
  expect_same_weights(directory_ / "workers", directory_ / "mirrored");
  EXPECT_TRUE(train::load_latest_checkpoint(directory_ / "workers")->tensors.contains("shard_2/adam_m"));
}

TEST_F(MultiWorkerCli, ZeroAcrossWorkersRefusesSeveralDevicesPerWorker) {
  const CliRun run = run_cli(
      "train --strategy multi_worker --devices sim:0,sim:1 --shard optimizer --epochs 1 --limit-train 64", kMpirun);
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("takes one device per worker"), std::string::npos) << run.output;
}

// mpirun's MPMD form: rank 0 runs `rank0`, rank 1 runs `rank1` (each a tensorpool command line).
CliRun run_two_workers(const std::string& rank0, const std::string& rank1) {
  return run_cli(
      rank1, "mpirun --allow-run-as-root --oversubscribe -np 1 '" + cli_path().string() + "' " + rank0 + " : -np 1");
}

// Workers started with different flags would run different programs, whose collectives mismatch inside MPI
// (MPI_ERR_TRUNCATE, exit 15): they compare their flags first and refuse, naming the rank and the flag.
TEST_F(MultiWorkerCli, WorkersStartedWithDifferentFlagsRefuseNamingTheRankAndTheFlag) {
  const std::string common = "train --strategy multi_worker --devices sim:0 --limit-train 320";
  const CliRun run = run_two_workers(common + " --epochs 2", common + " --epochs 1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("worker rank 1 was started with --epochs 1, rank 0 with --epochs 2: start every worker "
                            "with the same flags"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("MPI_ERR"), std::string::npos) << run.output;
  // Paths and thread counts may differ per machine: those workers train.
  const CliRun paths =
      run_two_workers(common + " --epochs 1 --intra-op-threads 1 --summary-json " + (directory_ / "s.json").string(),
                      common + " --epochs 1 --intra-op-threads 2");
  EXPECT_EQ(paths.exit_code, 0) << paths.output;
}

TEST_F(MultiWorkerCli, WorkersResumingFromDifferentCheckpointDirectoriesRefuse) {
  const std::string common = "train --strategy multi_worker --devices sim:0 --limit-train 64 --epochs 1";
  const fs::path checkpoints = directory_ / "checkpoints";
  const CliRun run = run_two_workers(common + " --checkpoint-dir " + checkpoints.string(), common);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("worker rank 1 starts without a checkpoint directory, rank 0 starts fresh (no checkpoint "
                            "in " +
                            checkpoints.string() + ")"),
            std::string::npos)
      << run.output;
}

TEST_F(MultiWorkerCli, MultiWorkerWithoutMpirunRefusesSayingHowToLaunchIt) {
  const CliRun run = run_cli("train --strategy multi_worker --devices sim:0 --epochs 1 --limit-train 64",
                             "env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("not started by mpirun"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("mpirun -np 2 tensorpool train --strategy multi_worker"), std::string::npos) << run.output;
}

// One-process strategies under mpirun: every rank would train the whole job and share one checkpoint directory.
TEST_F(MultiWorkerCli, OneProcessStrategiesUnderMpirunRefuseNamingMultiWorker) {
  for (const std::string strategy : {"mirrored --devices sim:0,sim:1", "one --devices sim:0"}) {
    const CliRun run = run_cli("train --epochs 1 --limit-train 64 --strategy " + strategy, kMpirun);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("was started as one of 2 mpirun processes"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("use --strategy multi_worker"), std::string::npos) << run.output;
  }
}

// Starts `command` in its own process group; returns the shell's pid.
pid_t start(const std::string& command, const fs::path& output) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const std::string line = command + " > '" + output.string() + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The pid of the tensorpool process of rank `rank` whose environment holds `marker` (mpirun gives its ranks
// their own process groups, so the job is found by an environment variable the test set), or -1.
pid_t rank_process(const std::string& marker, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    std::stringstream text;
    text << environ.rdbuf();
    std::ifstream comm(entry.path() / "comm");
    std::string command;
    std::getline(comm, command);
    const std::string environment = text.str();
    if (command == "tensorpool" && environment.find(marker + '\0') != std::string::npos &&
        environment.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) {
      return pid;
    }
  }
  return -1;
}

// Waits for `pid` up to `limit`; its exit code, or -2 when it is still running then.
int wait_for(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -2;
}

TEST_F(MultiWorkerCli, AStalledWorkerMakesTheOtherFailNamingItsRank) {
  const fs::path output = directory_ / "stalled.txt";
  const std::string marker = "TP_TEST_JOB=" + directory_.string();
  const pid_t job =
      start(marker + " TP_COLLECTIVE_TIMEOUT=4 " + kMpirun + "'" + cli_path().string() + "' " + kTrain + " --epochs 50",
            output);
  pid_t worker = -1;
  for (int attempt = 0; attempt < 200 && worker < 0; ++attempt) {  // until rank 1 exists and trains
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (read_file(output).find("Epoch 1") != std::string::npos) worker = rank_process(marker, 1);
  }
  ASSERT_GT(worker, 0) << "rank 1 never started: " << read_file(output);
  ::kill(worker, SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  const int exit_code = wait_for(job, std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  if (exit_code == -2) ::kill(-job, SIGKILL);
  ::kill(worker, SIGKILL);
  ::waitpid(job, nullptr, 0);
  const std::string text = read_file(output);
  EXPECT_NE(exit_code, 0) << text;
  EXPECT_NE(exit_code, -2) << "the job hung for 60 s after a worker stalled: " << text;
  EXPECT_LT(seconds, 30) << "the timeout is 4 s";
  const bool named = text.find("waited in vain for rank(s) 1") != std::string::npos ||
                     text.find("rank(s) 1 stopped answering") != std::string::npos;
  EXPECT_TRUE(named) << "the error does not name rank 1: " << text;
}

TEST_F(MultiWorkerCli, AJobWithAKilledWorkerResumesFromItsLastCheckpoint) {
  const fs::path checkpoints = directory_ / "checkpoints";
  const std::string marker = "TP_TEST_JOB=" + directory_.string();
  const std::string command = marker + " " + kMpirun + "'" + cli_path().string() + "' " + kTrain +
                              " --epochs 30 --checkpoint-dir " + checkpoints.string();
  const fs::path output = directory_ / "killed.txt";
  const pid_t job = start(command, output);
  bool checkpointed = false;
  for (int attempt = 0; attempt < 600 && !checkpointed; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    checkpointed = train::load_latest_checkpoint(checkpoints).has_value();
  }
  ASSERT_TRUE(checkpointed) << read_file(output);
  const pid_t worker = rank_process(marker, 1);
  ASSERT_GT(worker, 0) << read_file(output);
  ::kill(worker, SIGKILL);
  const int exit_code = wait_for(job, std::chrono::seconds(60));
  if (exit_code == -2) ::kill(-job, SIGKILL);
  ::waitpid(job, nullptr, 0);
  EXPECT_NE(exit_code, 0) << "the job went on without a worker: " << read_file(output);
  const std::int64_t saved_step = train::load_latest_checkpoint(checkpoints)->step;
  ASSERT_GT(saved_step, 0);
  // The same command, shortened to the checkpoint's epoch + 1 so that the test ends soon, resumes there.
  const std::int64_t epochs = train::load_latest_checkpoint(checkpoints)->epoch + 1;
  const CliRun resumed =
      run_cli(kTrain + " --epochs " + std::to_string(epochs) + " --checkpoint-dir " + checkpoints.string(), kMpirun);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from step " + std::to_string(saved_step)), std::string::npos)
      << resumed.output;
}

}  // namespace
}  // namespace tp::cli::testing
