// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a CUDA device reports about itself (cudaGetDeviceProperties, cudaDeviceGetAttribute), for `tensorpool
// devices` and the backend's choices (which memory sources the device can serve).

#include <cstddef>
#include <string>

namespace tp::device {

struct CudaProperties {
  int ordinal = 0;        // the CUDA device ordinal (after CUDA_VISIBLE_DEVICES): physical cuda:<ordinal>
  std::string name;       // cudaDeviceProp::name, e.g. "NVIDIA H200"
  int compute_major = 0;  // compute capability, e.g. 9 and 0 for sm_90
  int compute_minor = 0;
  std::size_t total_bytes = 0;  // cudaDeviceProp::totalGlobalMem
  // Free device memory (cudaMemGetInfo) when the properties were read. Discovery (cuda_physical_devices)
  // creates no CUDA context, so it leaves 0 there; DeviceManager::info() fills it for the devices it built.
  std::size_t free_bytes = 0;
  int multiprocessors = 0;                 // cudaDeviceProp::multiProcessorCount
  std::size_t l2_bytes = 0;                // cudaDeviceProp::l2CacheSize
  bool managed_memory = false;             // cudaDevAttrManagedMemory: cudaMallocManaged works
  bool concurrent_managed_access = false;  // cudaDevAttrConcurrentManagedAccess: prefetch/advise, oversubscription
  bool virtual_memory_management = false;  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: cuMemMap
  bool memory_pools = false;               // cudaDevAttrMemoryPoolsSupported: cudaMallocAsync
};

}  // namespace tp::device
