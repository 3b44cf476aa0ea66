// SPDX-License-Identifier: Apache-2.0
#pragma once
// The synthetic classification problem the training tests share (runtime::testing::make_batch: the label is
// the largest of the first `classes` features) as cpu:0 batches, and a loop of train steps over it.

#include <cstdint>
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

}  // namespace tp::train::testing
