// SPDX-License-Identifier: Apache-2.0
// Multi-worker training starts every worker from rank 0's variables (Sequential::broadcast_variables, called by
// fit() before the first step), as Horovod's broadcast of the global variables: workers compiled with different
// seeds end a fit with bitwise the same parameters, rank 0's starting point, not their own. Runs alone (a world
// of one: nothing to broadcast) and under `mpirun -np 2` (ctest test mpi.multi_worker_broadcast.np2). Skipped,
// saying why, in a build without MPI.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/train/fit.hpp"
#include "train/support/synthetic_training.hpp"

// Open MPI's plugins keep allocations by design (see mpi_communicator_test).
extern "C" const char* __asan_default_options();
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kHidden = 16, kClasses = 4;

std::unique_ptr<Sequential> worker_model(device::DeviceManager& manager, std::uint64_t seed) {
  auto model = std::make_unique<Sequential>(std::vector<std::int64_t>{kIn},
                                            std::vector<Dense>{{.units = kHidden, .activation = Activation::relu},
                                                               {.units = kClasses, .activation = Activation::softmax}});
  model->compile({.seed = seed}, Strategy::multi_worker({"sim:0"}), {.intra_op_threads = 1, .devices = &manager});
  return model;
}

// The parameters, fetched (which creates them if no step has run yet).
std::map<std::string, std::vector<float>> parameters(Sequential& model) {
  const std::vector<std::string> names = {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"};
  const std::vector<Tensor> values = model.session().run({}, names);
  std::map<std::string, std::vector<float>> result;
  for (std::size_t index = 0; index < names.size(); ++index) result[names[index]] = values[index].to_vector<float>();
  return result;
}

// Every rank's values of `values`, gathered; true when all equal rank 0's.
bool same_on_every_rank(const std::vector<float>& values) {
  const int ranks = distribute::mpi_world().size;
  std::vector<float> all(values.size() * static_cast<std::size_t>(ranks));
  distribute::mpi_all_gather(values.data(), values.size() * sizeof(float), all.data());
  for (int rank = 1; rank < ranks; ++rank) {
    if (std::memcmp(all.data(), all.data() + static_cast<std::size_t>(rank) * values.size(),
                    values.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

class MultiWorkerBroadcast : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!distribute::mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
  }
};

TEST_F(MultiWorkerBroadcast, WorkersTakeRankZerosVariables) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const int rank = distribute::mpi_world().rank;
  std::unique_ptr<Sequential> model = worker_model(manager, 100 + static_cast<std::uint64_t>(rank));
  const std::vector<float> own = parameters(*model).at("dense/kernel");
  std::unique_ptr<Sequential> rank_zero_alone = worker_model(manager, 100);  // what rank 0 started from
  const std::vector<float> expected = parameters(*rank_zero_alone).at("dense/kernel");
  if (distribute::mpi_world().size > 1) {
    EXPECT_FALSE(same_on_every_rank(own)) << "different seeds must start the workers apart";
  }
  model->broadcast_variables(0);
  EXPECT_EQ(parameters(*model).at("dense/kernel"), expected);
  EXPECT_THROW(model->broadcast_variables(distribute::mpi_world().size), InvalidArgument);
}

TEST_F(MultiWorkerBroadcast, FitStartsEveryWorkerFromRankZero) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const int rank = distribute::mpi_world().rank;
  std::unique_ptr<Sequential> model = worker_model(manager, 7 + static_cast<std::uint64_t>(rank));
  const testing::Data data = testing::synthetic_batch(manager, 128, kIn, kClasses, 5);
  const data::Dataset train = data::Dataset::from_tensors(data.x, data.labels).shuffle(5).batch(32);
  fit(*model, train, {.epochs = 2});
  for (const auto& [name, values] : parameters(*model)) {
    EXPECT_TRUE(same_on_every_rank(values)) << name << " differs between the workers after fit()";
  }
}

}  // namespace
}  // namespace tp::train
