// SPDX-License-Identifier: Apache-2.0
#pragma once
// The synthetic classification problem the training tests share (runtime::testing::make_batch: the label is
// the largest of the first `classes` features) as cpu:0 batches, and a loop of train steps over it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/half.hpp"
#include "tensorpool/ops/cast.hpp"
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

// Every variable the session holds, by name, as float32 (16-bit ones, the compute copies, widened exactly).
inline std::vector<std::pair<std::string, std::vector<float>>> read_variables(Sequential& model) {
  std::vector<std::pair<std::string, std::vector<float>>> variables;
  for (const std::string& name : model.session().variable_names()) {
    const Tensor value = model.session().read_variable(name);
    variables.emplace_back(name,
                           (value.dtype() == DType::f32 ? value : ops::cast(value, DType::f32)).to_vector<float>());
  }
  return variables;
}

// train_synthetic on a compiled model, then every variable read back.
inline TrainedRun record_training(Sequential& model, device::DeviceManager& manager, int steps, std::int64_t rows,
                                  std::int64_t in, std::int64_t classes) {
  TrainedRun run{.losses = train_synthetic(model, manager, steps, rows, in, classes), .variables = {}};
  run.variables = read_variables(model);
  return run;
}

// Checks that each persistent compute copy among `variables` ("<parameter>/bfloat16" or "/float16") holds its
// parameter rounded to its dtype, and returns the others.
inline std::vector<std::pair<std::string, std::vector<float>>> expect_copies_are_casts(
    const std::vector<std::pair<std::string, std::vector<float>>>& variables) {
  std::vector<std::pair<std::string, std::vector<float>>> others;
  for (const auto& [name, values] : variables) {
    const std::size_t slash = name.rfind('/');
    const std::string suffix = name.substr(slash + 1);
    if (suffix != "bfloat16" && suffix != "float16") {
      others.emplace_back(name, values);
      continue;
    }
    const std::string parameter = name.substr(0, slash);
    const auto found =
        std::find_if(variables.begin(), variables.end(), [&](const auto& entry) { return entry.first == parameter; });
    if (found == variables.end()) {
      ADD_FAILURE() << name << " has no parameter " << parameter;
      continue;
    }
    std::vector<float> rounded;
    for (float value : found->second) {
      rounded.push_back(suffix == "bfloat16" ? bfloat16_bits_to_float(float_to_bfloat16_bits(value))
                                             : half_bits_to_float(float_to_half_bits(value)));
    }
    EXPECT_EQ(values, rounded) << name << " is not the cast of " << parameter;
  }
  return others;
}

// A run without its compute copies, each checked against its parameter (expect_copies_are_casts).
inline TrainedRun without_compute_copies(const TrainedRun& run) {
  return {.losses = run.losses, .variables = expect_copies_are_casts(run.variables)};
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
