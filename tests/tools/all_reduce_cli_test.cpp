// SPDX-License-Identifier: Apache-2.0
// `--all-reduce` through the CLI (docs/cuda.md, "Collectives"): auto over cuda devices on distinct GPUs picks
// nccl and logs it; where NCCL cannot be loaded (TP_NCCL_LIBRARY pointed at a missing file) auto keeps the ring
// with a warning naming the library and the fix, while an explicit --all-reduce nccl fails with that error; nccl
// over sim devices is refused naming the device. The cuda cases plan on planning-only devices
// (--device-memory), so they run without a GPU (and skip on a machine with one: its GPUs decide there).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tensorpool/device/backends.hpp"
#include "tools/support/cli_runner.hpp"

namespace {

using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;
using tp::cli::testing::run_cli;

constexpr const char* kToolkitNccl = "/usr/local/cuda/lib64/libnccl.so.2";
const std::string kTwoGpus = "estimate --strategy mirrored --devices cuda:0,cuda:1 --device-memory 8GiB";

class AllReduceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
  }
  // Planning-only cuda devices: the CUDA backend built, no GPU present.
  static void require_planning_cuda() {
    const std::string reason = tp::device::cuda_unavailable_reason();
    if (reason.find("this build has no CUDA backend") != std::string::npos) GTEST_SKIP() << reason;
    if (!tp::device::cuda_physical_devices().empty()) GTEST_SKIP() << "a GPU is present: its GPUs decide";
  }
  static CliRun run(const std::string& arguments, const std::string& nccl_library) {
    return run_cli(arguments, "env -u TP_CUDA_DEVICES -u TP_VISIBLE_DEVICES TP_NCCL_LIBRARY=" + nccl_library);
  }
};

TEST_F(AllReduceCli, AutoPicksNcclForCudaDevicesOnDistinctGpus) {
  require_planning_cuda();
  if (!std::filesystem::exists(kToolkitNccl)) GTEST_SKIP() << "no " << kToolkitNccl;
  const CliRun picked = run(kTwoGpus, kToolkitNccl);
  EXPECT_EQ(picked.exit_code, 0) << picked.output;
  EXPECT_NE(picked.output.find("all-reduce: nccl (each replica on a GPU of its own)"), std::string::npos)
      << picked.output;
}

TEST_F(AllReduceCli, WithoutNcclAutoKeepsTheRingAndAnExplicitNcclFailsNamingTheFix) {
  require_planning_cuda();
  const std::string missing = "/nonexistent/tensorpool-test/libnccl.so.2";
  const CliRun fallback = run(kTwoGpus, missing);
  EXPECT_EQ(fallback.exit_code, 0) << fallback.output;
  EXPECT_NE(fallback.output.find("all-reduce: ring, not nccl: [nccl] cannot load NCCL (" + missing + ")"),
            std::string::npos)
      << fallback.output;
  const CliRun refused = run(kTwoGpus + " --all-reduce nccl", missing);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("cannot load NCCL (" + missing + ")"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("TP_NCCL_LIBRARY"), std::string::npos) << refused.output;
}

TEST_F(AllReduceCli, NcclOverSimDevicesIsRefusedNamingTheDevice) {
  const CliRun run = run_cli("estimate --strategy mirrored --devices sim:0,sim:1 --all-reduce nccl");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("all_reduce nccl cannot serve these devices: sim:0 is not a cuda device"),
            std::string::npos)
      << run.output;
  const CliRun sims = run_cli("estimate --strategy mirrored --devices sim:0,sim:1");
  EXPECT_EQ(sims.exit_code, 0) << sims.output;
  EXPECT_EQ(sims.output.find("all-reduce:"), std::string::npos) << "sim devices settle to the ring silently\n"
                                                                << sims.output;
}

}  // namespace
