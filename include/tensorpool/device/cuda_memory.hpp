// SPDX-License-Identifier: Apache-2.0
#pragma once
// A CUDA device's memory sources without a Device, for the replay tool and benchmarks (docs/cuda.md,
// "Memory"): the stack a cuda:N device is built on, and what the driver says about the GPU's memory, so a
// replay can put its own stats next to the driver's. In a build without the CUDA backend, or on a machine
// without a GPU, both throw tp::DeviceError naming the reason (cuda_unavailable_reason()) and the fix.

#include <cstddef>
#include <memory>

#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_stack.hpp"

namespace tp::device {

// make_cuda_memory_stack of the CUDA backend: `config.allocator` picks the source (bfc, system: cudaMalloc
// regions; expandable: the virtual memory API's pages; cuda_malloc_async: the driver's pool; managed:
// cudaMallocManaged), `capacity_bytes` of GPU `ordinal` (0 or above its total memory: tp::InvalidArgument).
[[nodiscard]] std::unique_ptr<memory::MemoryStack> make_cuda_device_memory_stack(const memory::MemoryConfig& config,
                                                                                 std::size_t capacity_bytes,
                                                                                 int ordinal);

struct CudaMemoryInfo {
  std::size_t free_bytes = 0;   // cudaMemGetInfo
  std::size_t total_bytes = 0;  // the GPU's memory
};
// The driver's view of GPU `ordinal` now (creates its primary context).
[[nodiscard]] CudaMemoryInfo cuda_memory_info(int ordinal);

}  // namespace tp::device
