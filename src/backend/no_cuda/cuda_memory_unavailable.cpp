// SPDX-License-Identifier: Apache-2.0
// tensorpool/device/cuda_memory.hpp in a build without the CUDA backend: both refuse, naming the reason.
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/cuda_memory.hpp"

namespace tp::device {

std::unique_ptr<memory::MemoryStack> make_cuda_device_memory_stack(const memory::MemoryConfig& /*config*/,
                                                                   std::size_t /*capacity_bytes*/, int ordinal) {
  TP_THROW(DeviceError, "cuda", "cannot build the memory of cuda:", ordinal, ": ", cuda_unavailable_reason());
}

CudaMemoryInfo cuda_memory_info(int ordinal) {
  TP_THROW(DeviceError, "cuda", "cannot read the memory of cuda:", ordinal, ": ", cuda_unavailable_reason());
}

}  // namespace tp::device
