// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CUDA memory sources make_cuda_memory_stack builds on (docs/cuda.md, "Memory"), and the managed-memory
// hints a device gives for a step's inputs. Every call is made with the resource's device current
// (cudaSetDevice on the calling thread: allocation happens on whichever host thread asks).
//
// Out of memory (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY) is a tp::OutOfMemoryError with the usual
// report (the stack adds the largest live tensors and the advice); any other failure a tp::DeviceError naming
// the call.

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_memory_pages.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::backend::cuda {

// cudaMalloc (and cudaMallocManaged) return 256-byte aligned memory.
inline constexpr std::size_t kCudaMallocAlignment = 256;

// What the driver says about a device's memory (cudaMemGetInfo with the device current).
struct DriverMemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};
[[nodiscard]] DriverMemoryInfo driver_memory_info(int ordinal);

// Regions of device memory (cudaMalloc / cudaFree) or of managed memory (cudaMallocManaged with
// cudaMemAttachGlobal / cudaFree), counted against `capacity_bytes` (the device's share, or the managed budget),
// a hard wall as SimDeviceMemory's. Stats: in use and reserved are the requests rounded up to 256 bytes (the
// driver may round further, to its 2 MiB pages, which cudaMemGetInfo then shows), one upstream call each.
class CudaRegionResource final : public memory::MemoryResource {
 public:
  enum class Kind { device, managed };
  CudaRegionResource(Kind kind, int ordinal, std::size_t capacity_bytes, std::string name);
  ~CudaRegionResource() override = default;
  std::size_t max_alignment() const noexcept override { return kCudaMallocAlignment; }
  std::size_t allocation_granularity() const noexcept override { return kCudaMallocAlignment; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  memory::MemoryStats do_stats() const override;
  void do_reset_peak() override;
  [[noreturn]] void refuse(std::size_t bytes, std::size_t rounded, const memory::AllocationTag& tag,
                           const std::string& detail);

  const Kind kind_;
  const int ordinal_;
  const std::size_t capacity_;
  mutable std::mutex mutex_;   // guards stats_ and pending_
  memory::MemoryStats stats_;  // bytes_reserved + pending_ is what counts against capacity_
  std::size_t pending_ = 0;    // bytes of requests the driver is serving now
};

// The driver's stream-ordered pool (TensorFlow's cuda_malloc_async): a pool made with cudaMemPoolCreate for
// the device, allocations with cudaMallocFromPoolAsync and frees with cudaFreeAsync on the resource's own
// non-blocking stream. Why that is safe with no stream argument: a Device hands a buffer back to its memory
// only once the stream work using it has completed (stream-ordered reuse, every backend), so a deallocate
// always finds the memory idle and may free it on any stream; an allocation is synchronised with its stream
// before the pointer is returned, so any stream may use it at once.
// Release threshold (cudaMemPoolAttrReleaseThreshold): the budget under GrowthPolicy::preallocate (freed
// memory stays in the pool, as TensorFlow sets it), 0 under grow (freed memory goes back to the driver at the
// next synchronisation). Stats come from the pool: bytes_reserved and its peak = ReservedMemCurrent/High,
// bytes_in_use and its peak = UsedMemCurrent/High; largest_free_block = reserved - used (the pool does not
// say how its free memory is split). The budget itself is enforced by the stack's LimitingAdaptor.
class CudaAsyncPoolResource final : public memory::MemoryResource {
 public:
  // Throws tp::InvalidArgument when the device has no memory pools (cudaDevAttrMemoryPoolsSupported = 0).
  CudaAsyncPoolResource(int ordinal, std::size_t budget_bytes, memory::GrowthPolicy policy, std::string name);
  ~CudaAsyncPoolResource() override;
  std::size_t max_alignment() const noexcept override { return kCudaMallocAlignment; }

  struct PoolAttributes {
    std::uint64_t reserved_current = 0;
    std::uint64_t reserved_high = 0;
    std::uint64_t used_current = 0;
    std::uint64_t used_high = 0;
    std::uint64_t release_threshold = 0;
  };
  // The pool's attributes once the resource's stream has drained (its frees have taken effect).
  [[nodiscard]] PoolAttributes attributes() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  std::size_t do_trim() override;
  memory::MemoryStats do_stats() const override;
  void do_reset_peak() override;

  const int ordinal_;
  const std::size_t budget_;
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::atomic<std::uint64_t> allocs_{0};
  std::atomic<std::uint64_t> frees_{0};
  std::atomic<std::uint64_t> ooms_{0};
};

// Page-locked host memory (cudaHostAlloc with cudaHostAllocPortable / cudaFreeHost), page aligned; stats as
// PinnedHostResource's. Failing to get it is a tp::OutOfMemoryError.
class CudaPinnedHostResource final : public memory::MemoryResource {
 public:
  CudaPinnedHostResource();
  std::size_t max_alignment() const noexcept override { return page_size_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  memory::MemoryStats do_stats() const override;
  void do_reset_peak() override;

  const std::size_t page_size_;
  mutable std::mutex mutex_;
  memory::MemoryStats stats_;
};

// Whether the device supports the virtual memory management API (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_
// MANAGEMENT_SUPPORTED), which the expandable arena needs.
[[nodiscard]] bool virtual_memory_supported(int ordinal);
// The VMM calls for device `ordinal` (granularity: cuMemGetAllocationGranularity, RECOMMENDED), for a
// PagedVirtualMemory. Throws tp::DeviceError when the driver lacks them.
[[nodiscard]] std::unique_ptr<PageDriver> make_cuda_page_driver(int ordinal);

// Managed-memory hints, for a step's inputs in managed memory (allocator = managed). A device calls, before
// enqueueing the step on `stream`: prefetch(input, bytes, ordinal, stream) for each input it will read (the
// pages migrate ahead of the kernels instead of faulting in); advise_read_mostly once for weights several GPUs
// read (each GPU then keeps a read-only copy); advise_preferred_location(ptr, bytes, ordinal) for memory that
// should stay on the GPU under oversubscription (it is evicted last). Each throws tp::DeviceError naming the
// call when the driver refuses (e.g. on memory that is not managed).
void prefetch(const void* ptr, std::size_t bytes, int ordinal, cudaStream_t stream);
void advise_read_mostly(const void* ptr, std::size_t bytes, int ordinal);
void advise_preferred_location(const void* ptr, std::size_t bytes, int ordinal);

}  // namespace tp::backend::cuda
