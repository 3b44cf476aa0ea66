// SPDX-License-Identifier: Apache-2.0
#pragma once
// The model the runtime benchmarks time: the Keras-example MLP (784-512 relu-10 softmax, Adam) on one sim
// device of its own DeviceManager, with one synthetic batch (uniform pixels, labels cycling 0..9) on cpu:0.
// The figures do not depend on the values.

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "tensorpool/core/units.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/runtime/session_options.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::bench {

inline device::DeviceManagerOptions one_sim_device(std::size_t streams = 1) {
  device::DeviceManagerOptions options;
  options.sim_devices = 1;
  options.sim_memory_bytes = 1 * kGiB;
  options.device_options.num_streams = streams;
  return options;
}

struct MlpBenchModel {
  explicit MlpBenchModel(std::size_t streams = 1)
      : manager(one_sim_device(streams), [](const char*) -> const char* { return nullptr; }) {}
  device::DeviceManager manager;
  train::Sequential sequential{
      {784},
      {{.units = 512, .activation = train::Activation::relu}, {.units = 10, .activation = train::Activation::softmax}}};
  Tensor x, labels;
  std::int64_t step = 0;
};

// Compiled on sim:0 with `session` (its `devices` is set to the model's manager) and a batch of `batch` rows.
inline std::unique_ptr<MlpBenchModel> make_mlp_bench_model(std::int64_t batch, runtime::SessionOptions session,
                                                           std::size_t streams = 1) {
  auto model = std::make_unique<MlpBenchModel>(streams);
  session.devices = &model->manager;
  model->sequential.compile({}, train::Strategy::one_device("sim:0"), std::move(session));
  std::mt19937 engine(1);
  std::uniform_real_distribution<float> pixel(0.0F, 1.0F);
  std::vector<float> x(static_cast<std::size_t>(batch * 784));
  for (float& value : x) value = pixel(engine);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 10);
  device::Device& cpu = model->manager.device("cpu:0");
  model->x = Tensor::from_vector<float>(x, Shape{batch, 784}, cpu);
  model->labels = Tensor::from_vector<std::int32_t>(labels, Shape{batch}, cpu);
  return model;
}

}  // namespace tp::bench
