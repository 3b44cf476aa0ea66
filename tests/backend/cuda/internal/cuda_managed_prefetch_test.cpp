// SPDX-License-Identifier: Apache-2.0
// Managed memory used as issue 20 asks, on a GPU: a cuda device whose allocator is managed gives its regions
// its GPU as preferred location, and prefetches a step's buffers to the GPU before the step's kernels
// (Device::prefetch_step, which Session::run_async calls with the step's arena and variables); a session
// training step on such a device leaves its variables last prefetched to the GPU. Every test reports SKIPPED
// ("no CUDA device") without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace tp::backend::cuda {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

device::DeviceManagerOptions managed_cuda0(std::size_t budget) {
  device::DeviceManagerOptions options;
  options.opencl_devices = 0;
  memory::MemoryConfig config = device::DeviceManagerOptions::default_device_memory_config();
  config.allocator = memory::AllocatorKind::managed;
  config.limit_bytes = budget;
  config.fraction.reset();
  options.memory_configs[device::DeviceId{device::DeviceKind::cuda, 0}] = config;
  return options;
}

// The device address of `buffer`, read inside a task of its device's stream (the only place it may be read).
void* address_of(device::Device& device, const std::shared_ptr<Buffer>& buffer) {
  void* address = nullptr;
  device.stream(0).enqueue([&address, buffer] { address = buffer->data(); });
  device.synchronize();
  return address;
}

int range_attribute(cudaMemRangeAttribute attribute, const void* ptr, std::size_t bytes) {
  int value = -2;
  EXPECT_EQ(cudaMemRangeGetAttribute(&value, sizeof(value), attribute, ptr, bytes), cudaSuccess);
  return value;
}

TEST(CudaManagedHints, RegionsPreferTheGpuAndStepsArePrefetchedToIt) {
  TP_REQUIRE_CUDA();
  int concurrent = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0), cudaSuccess);
  device::DeviceManager manager(managed_cuda0(64 * kMiB), [](const char*) -> const char* { return nullptr; });
  device::Device& gpu = manager.device("cuda:0");
  ASSERT_EQ(gpu.memory().config().allocator, memory::AllocatorKind::managed);
  EXPECT_EQ(gpu.prefetches_steps(), concurrent != 0);
  const std::size_t bytes = 4 * kMiB;
  const std::shared_ptr<Buffer> buffer = gpu.allocate(bytes);
  void* ptr = address_of(gpu, buffer);
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(range_attribute(cudaMemRangeAttributePreferredLocation, ptr, bytes), 0) << "preferred location: cuda:0";
  if (concurrent == 0) GTEST_SKIP() << "cuda:0 has no concurrent managed access: no step prefetch";
  // Moved to the host first, then the device prefetches it back as a step would.
  cudaMemLocation host{};
  host.type = cudaMemLocationTypeHost;
  ASSERT_EQ(cudaMemPrefetchAsync(ptr, bytes, host, 0, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(range_attribute(cudaMemRangeAttributeLastPrefetchLocation, ptr, bytes), cudaCpuDeviceId);
  const std::vector<std::shared_ptr<Buffer>> step{buffer};
  gpu.prefetch_step(gpu.stream(0), step);
  gpu.synchronize();
  EXPECT_EQ(range_attribute(cudaMemRangeAttributeLastPrefetchLocation, ptr, bytes), 0) << "prefetched to cuda:0";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaManagedHints, OtherAllocatorsNeitherAdviseNorPrefetch) {
  TP_REQUIRE_CUDA();
  device::DeviceManagerOptions options = managed_cuda0(64 * kMiB);
  options.memory_configs.begin()->second.allocator = memory::AllocatorKind::bfc;
  device::DeviceManager manager(options, [](const char*) -> const char* { return nullptr; });
  EXPECT_FALSE(manager.device("cuda:0").prefetches_steps());
}

}  // namespace
}  // namespace tp::backend::cuda
