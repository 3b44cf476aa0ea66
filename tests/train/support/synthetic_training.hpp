// SPDX-License-Identifier: Apache-2.0
#pragma once
// The synthetic classification problem the training tests share (runtime::testing::make_batch: the label is
// the largest of the first `classes` features) as cpu:0 batches, and a loop of train steps over it.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::train::testing {

using Data = runtime::testing::HostBatch;

inline Data synthetic_batch(device::DeviceManager& manager, std::int64_t rows, std::int64_t in, std::int64_t classes,
                            std::uint32_t seed) {
  return runtime::testing::host_batch(manager, runtime::testing::make_batch(rows, in, classes, seed), in);
}

// `steps` train steps over 8 rotating batches of `rows`; the losses.
inline std::vector<double> train_synthetic(Sequential& model, device::DeviceManager& manager, int steps,
                                           std::int64_t rows, std::int64_t in, std::int64_t classes) {
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    const Data data = synthetic_batch(manager, rows, in, classes, static_cast<std::uint32_t>(step % 8));
    losses.push_back(model.train_step(data.x, data.labels, step).loss);
  }
  return losses;
}

// A training run's losses and every variable the session holds (every replica's, slots included), by name.
struct TrainedRun {
  std::vector<double> losses;
  std::vector<std::pair<std::string, std::vector<float>>> variables;
};

// train_synthetic on a compiled model, then every variable read back.
inline TrainedRun record_training(Sequential& model, device::DeviceManager& manager, int steps, std::int64_t rows,
                                  std::int64_t in, std::int64_t classes) {
  TrainedRun run{.losses = train_synthetic(model, manager, steps, rows, in, classes), .variables = {}};
  for (const std::string& name : model.session().variable_names()) {
    run.variables.emplace_back(name, model.session().read_variable(name).to_vector<float>());
  }
  return run;
}

// Two runs that must agree bit for bit: the same losses, and the same variables with the same values.
inline void expect_bitwise(const TrainedRun& actual, const TrainedRun& expected) {
  EXPECT_EQ(actual.losses, expected.losses);
  ASSERT_EQ(actual.variables.size(), expected.variables.size());
  for (std::size_t index = 0; index < actual.variables.size(); ++index) {
    EXPECT_EQ(actual.variables[index].first, expected.variables[index].first);
    EXPECT_EQ(actual.variables[index].second, expected.variables[index].second) << actual.variables[index].first;
  }
}

}  // namespace tp::train::testing
