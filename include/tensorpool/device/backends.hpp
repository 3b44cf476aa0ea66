// SPDX-License-Identifier: Apache-2.0
#pragma once
// The backends' factories (each implemented in its folder under src/backend/). The DeviceManager builds
// devices only through these.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tensorpool/device/device.hpp"
#include "tensorpool/device/opencl_properties.hpp"
#include "tensorpool/memory/memory_config.hpp"

namespace tp::device {

// Host memory with a budget of `capacity_bytes`; one inline stream per DeviceOptions::num_streams (kernels
// run in the calling thread, in each stream's order).
// `physical_id` differs from `id` for a logical device split off cpu:0.
[[nodiscard]] std::unique_ptr<Device> make_cpu_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                                      const memory::MemoryConfig& config, const DeviceOptions& options);

// A simulated accelerator: its own bounded memory of `capacity_bytes` (a SimDeviceMemory), one worker thread
// per stream, copies staged through pinned host memory.
[[nodiscard]] std::unique_ptr<Device> make_sim_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                                      const memory::MemoryConfig& config, const DeviceOptions& options);

// The OpenCL devices the ICD loader reports, every platform's in order: index N is physical opencl:N. Asked
// once per process (later calls return the same list). Empty when this build has no OpenCL backend
// (TP_BACKEND_OPENCL off, or no OpenCL found at build time) or no platform or device is installed; then
// opencl_unavailable_reason() says which.
const std::vector<OpenClProperties>& opencl_physical_devices();
// Why opencl_physical_devices() is empty ("" when it is not), with the fix.
[[nodiscard]] std::string opencl_unavailable_reason();

// A device on physical OpenCL device `physical_id` (an index into opencl_physical_devices()), with
// `capacity_bytes` of its global memory: its own in-order command queue per stream and its memory stack on
// the device's memory. Logical devices on one physical device share its context (and compiled programs).
// Throws tp::InvalidArgument for allocator = expandable (OpenCL cannot map pages into a reserved range; the
// DeviceManager keeps an opencl device's configured allocator when only TP_ALLOCATOR asks for it) and
// tp::DeviceError when the build has no OpenCL backend or the driver refuses the context or a queue.
[[nodiscard]] std::unique_ptr<Device> make_opencl_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                                         const memory::MemoryConfig& config,
                                                         const DeviceOptions& options);

}  // namespace tp::device
