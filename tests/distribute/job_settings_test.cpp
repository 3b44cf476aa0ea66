// SPDX-License-Identifier: Apache-2.0
// distribute::compare_with_rank0 / require_same_settings: every rank's settings against rank 0's, the same
// verdict on every rank, and no hang when the ranks' settings differ in number or length. Runs alone (a world
// of one compares nothing) and under `mpirun -np 2` and `-np 3` (ctest tests mpi.job_settings.np2 / np3).
// Skipped, saying why, in a build without MPI.
#include "tensorpool/distribute/job_settings.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

// Open MPI's plugins keep allocations by design (see mpi_communicator_test): leak checking is off here.
extern "C" const char* __asan_default_options();
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

namespace tp::distribute {
namespace {

class JobSettings : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
  }
};

TEST_F(JobSettings, RanksWithTheSameSettingsAgree) {
  const std::vector<JobSetting> settings{{.name = "--epochs", .value = "2", .shown = {}},
                                         {.name = "--hidden", .value = "512,512", .shown = {}}};
  EXPECT_TRUE(compare_with_rank0(settings).empty());
  EXPECT_NO_THROW(require_same_settings(settings, "test", "start every worker alike"));
}

// Each rank r > 0 sets --epochs r (rank 0: 0), a value of its own length, and only odd ranks set --extra:
// every difference is found, in rank order, and the same list reaches every rank.
TEST_F(JobSettings, EveryDifferenceIsNamedWithBothValuesOnEveryRank) {
  const MpiWorld& world = mpi_world();
  if (world.size == 1) GTEST_SKIP() << "one rank cannot disagree with itself; run under mpirun -np 2";
  const std::string data(10 * static_cast<std::size_t>(world.rank + 1), 'd');  // a length of its own
  std::vector<JobSetting> settings{{.name = "--epochs", .value = std::to_string(world.rank), .shown = {}},
                                   {.name = "--data", .value = data, .shown = "same"},
                                   {.name = "--seed", .value = "42", .shown = {}}};
  if (world.rank % 2 == 1) settings.push_back({.name = "--extra", .value = "1", .shown = {}});
  const std::vector<JobSettingDifference> differences = compare_with_rank0(settings);
  std::vector<std::string> expected;
  for (int rank = 1; rank < world.size; ++rank) {
    expected.push_back(std::to_string(rank) + " --epochs " + std::to_string(rank) + " / 0");
    expected.push_back(std::to_string(rank) + " --data same / same");
    if (rank % 2 == 1) expected.push_back(std::to_string(rank) + " --extra 1 / (not set)");
  }
  std::vector<std::string> found;
  for (const JobSettingDifference& difference : differences) {
    found.push_back(std::to_string(difference.rank) + " " + difference.name + " " + difference.value + " / " +
                    difference.rank0_value);
  }
  EXPECT_EQ(found, expected);
  try {
    require_same_settings(settings, "test", "start every worker alike");
    ADD_FAILURE() << "no error for different settings";
  } catch (const InvalidArgument& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("worker rank 1 was started with --epochs 1, rank 0 with --epochs 0"), std::string::npos)
        << text;
    EXPECT_NE(text.find(": start every worker alike"), std::string::npos) << text;
  }
  // The collectives are still in step: a later comparison agrees.
  EXPECT_TRUE(compare_with_rank0({{.name = "--seed", .value = "42", .shown = {}}}).empty());
}

TEST_F(JobSettings, ASettingMissingOnAnotherRankIsNamed) {
  const MpiWorld& world = mpi_world();
  if (world.size == 1) GTEST_SKIP() << "one rank cannot disagree with itself; run under mpirun -np 2";
  std::vector<JobSetting> settings;
  if (world.rank == 0) settings.push_back({.name = "--shard", .value = "optimizer", .shown = {}});
  const std::vector<JobSettingDifference> differences = compare_with_rank0(settings);
  ASSERT_EQ(differences.size(), static_cast<std::size_t>(world.size - 1));
  EXPECT_EQ(differences.front().rank, 1);
  EXPECT_EQ(differences.front().name, "--shard");
  EXPECT_EQ(differences.front().value, "(not set)");
  EXPECT_EQ(differences.front().rank0_value, "optimizer");
}

}  // namespace
}  // namespace tp::distribute
