// SPDX-License-Identifier: Apache-2.0
// Discovery: the CUDA devices the runtime reports, asked once per process. Nothing here creates a CUDA
// context (cudaGetDeviceCount, cudaGetDeviceProperties and cudaDeviceGetAttribute need none), so a process
// that plans devices and uses no GPU neither pays for a context nor takes GPU memory.
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "backend/cuda/cuda_driver.hpp"
#include "backend/cuda/cuda_error.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::backend::cuda {
namespace {

struct Discovery {
  std::vector<device::CudaProperties> devices;
  std::string reason;  // why `devices` is empty
};

bool attribute(cudaDeviceAttr what, int ordinal) {
  int value = 0;
  check(cudaDeviceGetAttribute(&value, what, ordinal), "cudaDeviceGetAttribute");
  return value != 0;
}

// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED has no runtime attribute: asked of the driver
// (cuDeviceGetAttribute, looked up through the runtime). A driver without the lookup cannot map pages either.
bool virtual_memory_management(int ordinal) {
  try {
    CUdevice device = 0;
    check(driver_function<decltype(&cuDeviceGet)>("cuDeviceGet")(&device, ordinal), "cuDeviceGet");
    int value = 0;
    check(driver_function<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute")(
              &value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device),
          "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
    return value != 0;
  } catch (const DeviceError&) {
    return false;
  }
}

device::CudaProperties describe(int ordinal) {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, ordinal), "cudaGetDeviceProperties(" + std::to_string(ordinal) + ")");
  device::CudaProperties described;
  described.ordinal = ordinal;
  described.name = properties.name;
  described.compute_major = properties.major;
  described.compute_minor = properties.minor;
  described.total_bytes = properties.totalGlobalMem;
  described.multiprocessors = properties.multiProcessorCount;
  described.l2_bytes = properties.l2CacheSize > 0 ? static_cast<std::size_t>(properties.l2CacheSize) : 0;
  described.managed_memory = attribute(cudaDevAttrManagedMemory, ordinal);
  described.concurrent_managed_access = attribute(cudaDevAttrConcurrentManagedAccess, ordinal);
  described.virtual_memory_management = virtual_memory_management(ordinal);
  described.memory_pools = attribute(cudaDevAttrMemoryPoolsSupported, ordinal);
  return described;
}

Discovery discover() {
  Discovery discovery;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count <= 0) {
    // A failed count leaves the runtime's sticky "last error": clear it, so a later unrelated call does not
    // report it.
    (void)cudaGetLastError();
    discovery.reason = std::string("no CUDA device: ") +
                       (status != cudaSuccess ? std::string("cudaGetDeviceCount failed with ") +
                                                    cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")"
                                              : std::string("cudaGetDeviceCount reports 0 devices")) +
                       "; install the NVIDIA driver and check that CUDA_VISIBLE_DEVICES (if set) lists a GPU";
    return discovery;
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) discovery.devices.push_back(describe(ordinal));
  return discovery;
}

const Discovery& discovery() {
  static const Discovery result = [] {
    try {
      return discover();
    } catch (const Error& error) {
      Discovery failed;
      failed.reason = std::string("no CUDA device: ") + error.what();
      return failed;
    }
  }();
  return result;
}

}  // namespace
}  // namespace tp::backend::cuda

namespace tp::device {

const std::vector<CudaProperties>& cuda_physical_devices() { return backend::cuda::discovery().devices; }

std::string cuda_unavailable_reason() { return backend::cuda::discovery().reason; }

std::size_t cuda_free_bytes(int ordinal) {
  const std::vector<CudaProperties>& devices = cuda_physical_devices();
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= devices.size()) {
    TP_THROW(DeviceError, "cuda", "CUDA device ", ordinal, " does not exist; there are ", devices.size(),
             devices.empty() ? " (" + cuda_unavailable_reason() + ")" : std::string());
  }
  // cudaSetDevice is per thread: restore the caller's device, so this query changes nothing it relies on.
  int previous = 0;
  backend::cuda::check(cudaGetDevice(&previous), "cudaGetDevice");
  backend::cuda::check(cudaSetDevice(ordinal), "cudaSetDevice(" + std::to_string(ordinal) + ")");
  std::size_t free = 0;
  std::size_t total = 0;
  const cudaError_t status = cudaMemGetInfo(&free, &total);
  (void)cudaSetDevice(previous);
  backend::cuda::check(status, "cudaMemGetInfo(device " + std::to_string(ordinal) + ")");
  return free;
}

}  // namespace tp::device
