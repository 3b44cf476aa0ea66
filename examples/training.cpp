// SPDX-License-Identifier: Apache-2.0
// examples/training.cpp: fit() and evaluate() with the memory profiler recording, and a mixed-precision
// model (docs/training.md, docs/profiling.md, docs/mixed-precision.md).
#include <cstdio>
#include <iostream>

#include "tensorpool/data/dataset.hpp"
#include "tensorpool/data/fashion_mnist.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/profile/memory_profiler.hpp"
#include "tensorpool/train/fit.hpp"
#include "tensorpool/train/sequential.hpp"
using namespace tp::train;

namespace {

void train_mlp() {
  auto mnist = tp::data::load_fashion_mnist();
  auto train = tp::data::Dataset::from_arrays(mnist.train_images, mnist.train_labels)
                   .normalize()
                   .shuffle(42)
                   .batch(32)
                   .prefetch(2);
  auto test = tp::data::Dataset::from_arrays(mnist.test_images, mnist.test_labels).normalize().batch(32);

  Sequential model({784},
                   {{.units = 512, .activation = Activation::relu}, {.units = 10, .activation = Activation::softmax}});
  model.compile({.optimizer = Adam{}, .loss = Loss::sparse_categorical_crossentropy},
                Strategy::mirrored({"sim:0", "sim:1"}));
  FitResult result = fit(model, train, {.epochs = 1, .validation = &test, .checkpoint_dir = "ckpt"});
  Evaluation evaluation = evaluate(model, test);
  std::printf("%lld steps, test accuracy %.4f\n", static_cast<long long>(result.steps), evaluation.accuracy);
}

void train_mixed_float16() {
  Sequential model({784}, {{.units = 512, .activation = Activation::relu},
                           {.units = 10, .activation = Activation::softmax, .policy = DTypePolicy::float32()}});
  model.compile({.optimizer = Adam{},
                 .policy = DTypePolicy::mixed_float16(),
                 .loss_scale = {.initial_scale = 32768, .growth_interval = 2000}},  // Keras's defaults
                Strategy::mirrored({"sim:0", "sim:1"}));
  auto mnist = tp::data::load_fashion_mnist();
  auto some = tp::data::Dataset::from_arrays(mnist.train_images, mnist.train_labels).shard(60, 0).normalize().batch(32);
  FitResult result = fit(model, some, {.epochs = 1});
  std::printf("mixed_float16: loss %.4f after %lld steps\n", result.history.epochs.back().loss,
              static_cast<long long>(result.steps));
}

}  // namespace

int main() {
  tp::device::DeviceManager& manager = tp::device::DeviceManager::instance();
  manager.set_sim_devices(2, tp::kGiB);  // sim:0 and sim:1 (TP_SIM_DEVICES=2 does the same)
  tp::device::Device& device = manager.device("sim:0");

  tp::profile::MemoryProfiler profiler(manager.devices());          // recording starts (it is off by default)
  train_mlp();                                                      // fit() and evaluate() (docs/training.md)
  tp::profile::MemoryInfo info = tp::profile::memory_info(device);  // {current, peak} bytes in use
  std::cout << tp::profile::memory_summary(device);                 // the summary table below
  tp::profile::MemorySnapshot snapshot = profiler.snapshot();       // or memory_snapshot(devices)
  tp::profile::reset_memory_stats(device);                          // peaks restart from now
  std::printf("peak in use on sim:0: %zu B\n", info.peak);

  train_mixed_float16();
}
