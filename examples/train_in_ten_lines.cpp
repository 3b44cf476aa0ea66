// SPDX-License-Identifier: Apache-2.0
// examples/train_in_ten_lines.cpp: the README's Keras example, one epoch, mirrored over two sim devices.
#include <cstdio>

#include "tensorpool/data/fashion_mnist.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/train/fit.hpp"
using namespace tp::train;

int main() {
  tp::device::DeviceManager::instance().set_sim_devices(2, tp::kGiB);  // two simulated accelerators, 1 GiB each
  auto mnist = tp::data::load_fashion_mnist();
  auto train = tp::data::Dataset::from_arrays(mnist.train_images, mnist.train_labels).normalize().shuffle(42).batch(32);
  auto test = tp::data::Dataset::from_arrays(mnist.test_images, mnist.test_labels).normalize().batch(32);
  Sequential model({784},
                   {{.units = 512, .activation = Activation::relu}, {.units = 10, .activation = Activation::softmax}});
  model.compile({.optimizer = Adam{}}, Strategy::mirrored({"sim:0", "sim:1"}));
  fit(model, train, {.epochs = 1, .validation = &test, .checkpoint_dir = "ckpt"});
  std::printf("test accuracy %.4f\n", evaluate(model, test).accuracy);
}
