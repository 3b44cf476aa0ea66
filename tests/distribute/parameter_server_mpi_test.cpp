// SPDX-License-Identifier: Apache-2.0
// Parameter-server training across processes: under `mpirun -np 3` (ctest: mpi.parameter_server.np3) rank 0
// serves and ranks 1 and 2 each train on their half of a synthetic dataset; rank 0 ends with a model whose
// loss fell and whose updates respect the staleness bound. Run alone (a world of one, as ctest also runs it)
// the same test trains with in-process workers.
#include <gtest/gtest.h>

#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/distribute/parameter_transport.hpp"
#include "tensorpool/train/parameter_server.hpp"
#include "train/support/synthetic_training.hpp"

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kClasses = 4, kBatch = 16;

data::Dataset synthetic(device::DeviceManager& manager, std::int64_t rows, std::uint32_t seed) {
  const testing::Data data = testing::synthetic_batch(manager, rows, kIn, kClasses, seed);
  return data::Dataset::from_tensors(data.x, data.labels).shuffle(seed).batch(kBatch).stage_on(manager.device("cpu:0"));
}

TEST(ParameterServerMpi, WorkersOnOtherRanksLowerTheLossWithinTheBound) {
  const bool across_processes = distribute::parameter_server_job();
  const int rank = across_processes ? distribute::mpi_world().rank : 0;
  const int ranks = across_processes ? distribute::mpi_world().size : 3;
  for (const std::optional<std::int64_t> bound : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{0}}) {
    device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
    const data::Dataset train = synthetic(manager, 768, 3);
    const data::Dataset test = synthetic(manager, 256, 99);
    Sequential model(
        {kIn}, {{.units = 24, .activation = Activation::relu}, {.units = kClasses, .activation = Activation::softmax}});
    model.compile({.optimizer = Adam{.learning_rate = 0.01}},
                  Strategy::parameter_server({"sim:0", "sim:1"}, "cpu:0", bound),
                  {.intra_op_threads = 1, .devices = &manager});
    const Evaluation before = evaluate(model, test);
    const ParameterServerResult result = fit_parameter_server(model, train, {.fit = {.epochs = 3}});
    if (rank != 0) {  // a worker: its own steps, 768 / (ranks - 1) examples a epoch
      ASSERT_EQ(result.worker_steps.size(), 1u);
      EXPECT_EQ(result.worker_steps[0], 3 * (768 / (ranks - 1) / kBatch));
      continue;
    }
    const Evaluation after = evaluate(model, test);
    EXPECT_LT(after.loss, 0.5 * before.loss) << "before " << before.loss << ", after " << after.loss;
    EXPECT_GE(after.accuracy, 0.8);
    const auto workers = static_cast<std::int64_t>(ranks - 1);
    EXPECT_EQ(result.fit.steps, 3 * 768 / kBatch);
    EXPECT_EQ(static_cast<std::int64_t>(result.worker_steps.size()), workers);
    if (bound) {
      EXPECT_LE(staleness_stats(result.updates).max, (workers - 1) * (2 * *bound + 1));
    }
  }
}

}  // namespace
}  // namespace tp::train
