// SPDX-License-Identifier: Apache-2.0
// tensorpool/device/cuda_memory.hpp over the backend's memory sources (cuda_memory.cpp).
#include "tensorpool/device/cuda_memory.hpp"

#include <string>

#include "backend/cuda/cuda_memory.hpp"
#include "backend/cuda/cuda_memory_sources.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::device {
namespace {

// The GPU `ordinal`, refused with the reason when there is none.
const CudaProperties& require_gpu(int ordinal, const char* what) {
  const std::vector<CudaProperties>& gpus = cuda_physical_devices();
  if (gpus.empty())
    TP_THROW(DeviceError, "cuda", "cannot ", what, " of cuda:", ordinal, ": ", cuda_unavailable_reason());
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= gpus.size()) {
    TP_THROW(InvalidArgument, "cuda", "cuda:", ordinal, " does not exist: this machine has ", gpus.size(),
             " CUDA device(s), cuda:0 to cuda:", gpus.size() - 1);
  }
  return gpus[static_cast<std::size_t>(ordinal)];
}

}  // namespace

std::unique_ptr<memory::MemoryStack> make_cuda_device_memory_stack(const memory::MemoryConfig& config,
                                                                   std::size_t capacity_bytes, int ordinal) {
  const CudaProperties& gpu = require_gpu(ordinal, "build the memory");
  if (capacity_bytes == 0 || capacity_bytes > gpu.total_bytes) {
    TP_THROW(InvalidArgument, "cuda", "capacity of ", format_bytes(capacity_bytes), " for cuda:", ordinal,
             " is outside (0, ", format_bytes(gpu.total_bytes), "], the GPU's memory; give at most that");
  }
  return backend::cuda::make_cuda_memory_stack(config, capacity_bytes, ordinal);
}

CudaMemoryInfo cuda_memory_info(int ordinal) {
  static_cast<void>(require_gpu(ordinal, "read the memory"));
  const backend::cuda::DriverMemoryInfo info = backend::cuda::driver_memory_info(ordinal);
  return CudaMemoryInfo{info.free_bytes, info.total_bytes};
}

}  // namespace tp::device
