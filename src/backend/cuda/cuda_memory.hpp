// SPDX-License-Identifier: Apache-2.0
#pragma once
// The cuda backend's memory sources and the memory stack a cuda device is built on (see docs/cuda.md):
// cudaMalloc regions under BFC (the default), the stream-ordered cudaMallocAsync pool, the expandable arena
// over the virtual memory management API (cuMemCreate/cuMemMap), and managed (unified) memory; pinned host
// memory (cudaHostAlloc) for the staging pool.

#include <cstddef>
#include <memory>

#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/memory_stack.hpp"

namespace tp::backend::cuda {

// The memory stack of a device with `capacity_bytes` of CUDA device `ordinal`'s memory, as `config` says.
// Throws tp::InvalidArgument for a config the device cannot serve (naming the field and the fix) and
// tp::DeviceError for a refused CUDA call.
[[nodiscard]] std::unique_ptr<memory::MemoryStack> make_cuda_memory_stack(const memory::MemoryConfig& config,
                                                                          std::size_t capacity_bytes, int ordinal);

// Page-locked host memory from cudaHostAlloc (portable: every device's copies may use it), for a StagingPool.
[[nodiscard]] std::unique_ptr<memory::MemoryResource> make_cuda_pinned_host_resource();

}  // namespace tp::backend::cuda
