#pragma once
// The backends' factories (each implemented in its folder under src/backend/). The DeviceManager builds
// devices only through these.

#include <cstddef>
#include <memory>

#include "tensorpool/device/device.hpp"
#include "tensorpool/memory/memory_config.hpp"

namespace tp::device {

// Host memory with a budget of `capacity_bytes`; one inline stream per DeviceOptions::num_streams (kernels
// run in the calling thread, in each stream's order).
// `physical_id` differs from `id` for a logical device split off cpu:0.
std::unique_ptr<Device> make_cpu_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                        const memory::MemoryConfig& config, const DeviceOptions& options);

// A simulated accelerator: its own bounded memory of `capacity_bytes` (a SimDeviceMemory), one worker thread
// per stream, copies staged through pinned host memory.
std::unique_ptr<Device> make_sim_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                        const memory::MemoryConfig& config, const DeviceOptions& options);

}  // namespace tp::device
