// SPDX-License-Identifier: Apache-2.0
// distribute::mpi_all_gather (every rank's host bytes in rank order) and mpi_broadcast (the root's bytes
// everywhere), with a clear error when the ranks pass different sizes or a root outside the job. Runs alone (a
// world of one) and under `mpirun -np 2` and `-np 3` (ctest tests mpi.host_collectives.np2 / np3). Skipped,
// saying why, in a build without MPI.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

// Open MPI's plugins keep allocations by design (see mpi_communicator_test): leak checking is off here.
extern "C" const char* __asan_default_options();
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

namespace tp::distribute {
namespace {

class MpiHostCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
  }
};

TEST_F(MpiHostCollectives, EveryRanksBytesArriveInRankOrder) {
  const MpiWorld& world = mpi_world();
  // An odd element count, so nothing lines up by accident.
  std::vector<std::int32_t> mine(7);
  std::iota(mine.begin(), mine.end(), 1000 * world.rank);
  std::vector<std::int32_t> all(mine.size() * static_cast<std::size_t>(world.size), -1);
  mpi_all_gather(mine.data(), mine.size() * sizeof(std::int32_t), all.data());
  for (int rank = 0; rank < world.size; ++rank) {
    for (std::size_t index = 0; index < mine.size(); ++index) {
      EXPECT_EQ(all[static_cast<std::size_t>(rank) * mine.size() + index], 1000 * rank + static_cast<int>(index))
          << "rank " << rank << " element " << index;
    }
  }
}

TEST_F(MpiHostCollectives, RanksThatContributeDifferentSizesAreToldSo) {
  const MpiWorld& world = mpi_world();
  if (world.size == 1) GTEST_SKIP() << "one rank cannot disagree with itself; run under mpirun -np 2";
  const std::size_t bytes = world.rank == 0 ? 8 : 16;
  std::vector<std::byte> mine(bytes), all(16 * static_cast<std::size_t>(world.size));
  try {
    mpi_all_gather(mine.data(), bytes, all.data());
    ADD_FAILURE() << "no error for different sizes";
  } catch (const InvalidArgument& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("rank 0: 8, rank 1: 16"), std::string::npos) << text;
    EXPECT_NE(text.find("same model and flags"), std::string::npos) << text;
  }
  // MPI is still usable: the same sizes gather.
  std::vector<std::int64_t> one{world.rank}, every(static_cast<std::size_t>(world.size));
  mpi_all_gather(one.data(), sizeof(std::int64_t), every.data());
  for (int rank = 0; rank < world.size; ++rank) EXPECT_EQ(every[static_cast<std::size_t>(rank)], rank);
}

TEST_F(MpiHostCollectives, BroadcastGivesEveryRankTheRootsBytes) {
  const MpiWorld& world = mpi_world();
  for (int root = 0; root < world.size; ++root) {
    std::vector<std::int32_t> values(5);
    std::iota(values.begin(), values.end(), 100 * world.rank);
    mpi_broadcast(values.data(), values.size() * sizeof(std::int32_t), root);
    for (std::size_t index = 0; index < values.size(); ++index) {
      EXPECT_EQ(values[index], 100 * root + static_cast<int>(index)) << "root " << root << " element " << index;
    }
  }
  std::int32_t value = 0;
  try {
    mpi_broadcast(&value, sizeof(value), world.size);
    ADD_FAILURE() << "root " << world.size << " was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("is not a rank of this job"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tp::distribute
