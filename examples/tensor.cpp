// SPDX-License-Identifier: Apache-2.0
// examples/tensor.cpp: a tensor on a sim device, a view of it and copies (docs/core.md).
#include <cstdio>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/ops/init.hpp"

int main() {
  tp::device::DeviceManager::instance().set_sim_devices(1, tp::kGiB);  // or TP_SIM_DEVICES=1
  auto& device = tp::device::DeviceManager::instance().device("sim:0");
  tp::Tensor w = tp::Tensor::empty({784, 512}, tp::DType::f32, device,
                                   {.name = "dense/kernel", .kind = tp::memory::AllocationKind::parameter});
  tp::ops::glorot_uniform(w, /*seed=*/42);            // a kernel on sim:0's stream
  tp::Tensor rows = w.slice(0, 10);                   // a view: same buffer, no bytes
  std::vector<float> host = rows.to_vector<float>();  // copy to the host (waits for the stream)
  tp::Tensor on_cpu = w.to(tp::device::DeviceManager::instance().device("cpu:0"));
  std::printf("%zu values, the first %.4f\n", host.size(), static_cast<double>(host[0]));
}
