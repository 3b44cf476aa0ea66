// SPDX-License-Identifier: Apache-2.0
// examples/device_manager.cpp: a device manager with logical devices and a per-device allocator
// (docs/devices.md).
#include <cstdio>

#include "tensorpool/device/device_manager.hpp"
using namespace tp::device;

int main() {
  DeviceManagerOptions options;
  options.sim_devices = 2;
  options.sim_memory_bytes = 8 * tp::kGiB;
  DeviceManager manager(options);
  // Two logical devices on physical sim:0, 3 GiB and 4 GiB; physical sim:1 becomes sim:2.
  manager.set_logical_devices({DeviceKind::sim, 0}, {{3 * tp::kGiB}, {4 * tp::kGiB}});
  tp::memory::MemoryConfig expandable = DeviceManagerOptions::default_device_memory_config();
  expandable.allocator = tp::memory::AllocatorKind::expandable;
  manager.set_memory_config({DeviceKind::sim, 2}, expandable);  // keyed by the final id
  Device& device = manager.device("sim:1");                     // materialises: cpu:0, sim:0, sim:1, sim:2
  for (const DeviceInfo& info : manager.info()) {
    std::printf("%s on %s: limit %zu B, allocator %s\n", info.name.c_str(), info.physical.c_str(), info.limit_bytes,
                info.allocator.c_str());
  }
  std::printf("%s\n", device.name().c_str());
}
