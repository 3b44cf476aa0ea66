// SPDX-License-Identifier: Apache-2.0
#pragma once
// The backends' factories (each implemented in its folder under src/backend/). The DeviceManager builds
// devices only through these.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tensorpool/device/cuda_properties.hpp"
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

// The CUDA devices the runtime reports (cudaGetDeviceCount, after CUDA_VISIBLE_DEVICES, which the driver
// applies itself): index N is physical cuda:N, CUDA ordinal N. Asked once per process (later calls return the
// same list); creates no CUDA context (free_bytes is 0 here: cuda_free_bytes asks). Empty when this build has
// no CUDA backend (TP_WITH_CUDA off, or no toolkit at configure time), when no NVIDIA driver is installed or
// no GPU is visible; then cuda_unavailable_reason() says which.
const std::vector<CudaProperties>& cuda_physical_devices();
// Why cuda_physical_devices() is empty ("" when it is not), with the fix: "no CUDA device: <cudaGetErrorName of
// cudaGetDeviceCount> ..." or "this build has no CUDA backend ...".
[[nodiscard]] std::string cuda_unavailable_reason();
// The free memory of CUDA device `ordinal` now (cudaMemGetInfo; creates the device's primary context when it
// has none). Throws tp::DeviceError for an ordinal that cuda_physical_devices() does not list, or a failed call.
[[nodiscard]] std::size_t cuda_free_bytes(int ordinal);

// A device on physical CUDA device `physical_id` (an index into cuda_physical_devices()), with
// `capacity_bytes` of its memory: its own CUDA stream per DeviceOptions::num_streams (cuda_stream.hpp) and its
// memory stack from the CUDA memory sources `config` selects. Logical devices on one GPU share its primary
// context and reach each other's memory (peer access); devices on different GPUs are peers when
// cudaDeviceCanAccessPeer says so. Throws tp::InvalidArgument for a config the device cannot serve and
// tp::DeviceError when the build has no CUDA backend or the driver refuses a stream or an event.
[[nodiscard]] std::unique_ptr<Device> make_cuda_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                                       const memory::MemoryConfig& config,
                                                       const DeviceOptions& options);

// A planning-only cuda device: what `tensorpool estimate` plans for when no GPU is present and the caller gave
// the capacity (DeviceManager::set_cuda_planning_devices). It has what a step's plan reads from a real cuda
// device (its kind with the cuda kernel table, no host access, no shared memory, the MemoryConfig's allocator
// and limit over `capacity_bytes`) and runs nothing: stream tasks and copies throw tp::DeviceError naming it.
// Device::planning_note() returns `note`. Throws tp::DeviceError when the build has no CUDA backend (its
// kernels are what a cuda plan binds).
[[nodiscard]] std::unique_ptr<Device> make_cuda_planning_device(DeviceId id, std::size_t capacity_bytes,
                                                                const memory::MemoryConfig& config,
                                                                const DeviceOptions& options, std::string note);

}  // namespace tp::device
