// SPDX-License-Identifier: Apache-2.0
// examples/checkpoint.cpp: save a checkpoint, resume from it, and save from a callback (docs/checkpoints.md,
// docs/training.md).
#include <cstdio>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/ops/init.hpp"
#include "tensorpool/train/callbacks.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "tensorpool/train/host_tensor.hpp"
using namespace tp::train;
using tp::Tensor;

int main() {
  tp::device::DeviceManager::instance().set_sim_devices(1, tp::kGiB);
  tp::device::Device& device = tp::device::DeviceManager::instance().device("sim:0");
  Tensor kernel = Tensor::empty({784, 512}, tp::DType::f32, device, {.name = "dense/kernel"});
  tp::ops::glorot_uniform(kernel, /*seed=*/42);

  CheckpointState state{.step = 1200, .epoch = 0, .batch_in_epoch = 1200, .rng_seed = 42};
  state.tensors["dense/kernel"] = to_host(kernel);  // Tensor -> HostTensor (waits for the copy)
  state.metadata["optimizer"] = "adam";
  save_checkpoint("ckpt", state);                        // ckpt/checkpoint-1200.tpck, ckpt/latest
  if (auto restored = load_latest_checkpoint("ckpt")) {  // std::nullopt: nothing to resume
    Tensor restored_kernel = to_device(restored->tensors.at("dense/kernel"), device, {.name = "dense/kernel"});
    std::printf("resumed at step %lld\n", static_cast<long long>(restored->step));
  }

  auto capture_state = [&] { return state; };
  CheckpointCallback checkpoints("ckpt", [&] { return capture_state(); },
                                 {.every_steps = 500, .at_epoch_end = true, .checkpoint = {.keep = 2}});
  checkpoints.on_epoch_end({});
  std::printf("the callback saved %s\n", checkpoints.last_saved().c_str());
}
