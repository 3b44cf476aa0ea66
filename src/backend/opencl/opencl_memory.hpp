// SPDX-License-Identifier: Apache-2.0
#pragma once
// OpenClDeviceMemory: the source of an opencl device's memory stack. Each allocation is one region of device
// memory with a host-side address our allocators (BFC, system) sub-allocate and pass around as pointers,
// and a cl_mem that kernels and copies use: find(ptr) gives the region's buffer and ptr's byte offset in it.
//
// Why pointers over cl_mem: the memory stack, the profiler, OOM reports and the replay tool all speak
// pointers; giving device memory addresses keeps every layer above the source unchanged. Two ways to get the
// addresses, chosen by the device's capabilities:
//   - svm (coarse-grained buffer SVM, OpenCL 2.0+): the region is clSVMAlloc memory and its cl_mem is
//     created with CL_MEM_USE_HOST_PTR on the SVM pointer; the OpenCL 2.0 specification makes such a buffer
//     use the SVM allocation as its storage, so the pointer and the buffer alias (the backend tests write
//     through one and read through the other). The address is a real device address a kernel could take
//     with clSetKernelArgSVMPointer.
//   - reserved (devices without SVM): the region is a plain cl_mem, and its address a PROT_NONE range of the
//     same size reserved from the host's address space, used only as a key: host code never touches it.
// Either way the memory is not host-addressable: host code reaches it through copies on a queue.
//   - shared (fine-grained buffer SVM): as svm, with CL_MEM_SVM_FINE_GRAIN_BUFFER, so host code may read and
//     write the memory directly while no command uses it (unified memory). It is the source of an opencl
//     device's second stack, Device::shared_memory() ("opencl:N/shared"), whose buffers are host-visible.
//
// A region is at most CL_DEVICE_MAX_MEM_ALLOCATION_SIZE (a larger request, or a refusal by the driver,
// throws tp::OutOfMemoryError so that BFC backs off to a smaller region), and regions together stay within
// `capacity_bytes` (a hard wall, as a sim device's). Stats as SimDeviceMemory: bytes_in_use and
// bytes_reserved are the regions' rounded bytes. Thread-safe.

#include <CL/cl.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>

#include "backend/opencl/opencl_context.hpp"
#include "backend/opencl/opencl_launch.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::backend::opencl {

enum class RegionKind { svm, reserved, shared };

class OpenClDeviceMemory final : public memory::MemoryResource {
 public:
  // Region bases are aligned to this (BFC needs 256; CL_DEVICE_MEM_BASE_ADDR_ALIGN is at most 128 bytes on
  // the devices we know, and sub-buffers are not used).
  static constexpr std::size_t kAlignment = 4096;

  OpenClDeviceMemory(std::shared_ptr<OpenClContext> context, std::size_t capacity_bytes, RegionKind kind,
                     std::string name);
  ~OpenClDeviceMemory() override;

  std::size_t max_alignment() const noexcept override { return kAlignment; }
  std::size_t allocation_granularity() const noexcept override { return memory::kDefaultAlignment; }

  RegionKind kind() const noexcept { return kind_; }
  std::size_t capacity_bytes() const noexcept { return capacity_; }
  const OpenClContext& context() const noexcept { return *context_; }
  // The buffer holding device address `ptr` and ptr's offset in it; `bytes` from ptr must lie in the same
  // region. Throws tp::DeviceError when no live region holds them.
  [[nodiscard]] DeviceSpan find(const void* ptr, std::size_t bytes) const;
  // As find(), or nullopt when no live region holds them.
  [[nodiscard]] std::optional<DeviceSpan> lookup(const void* ptr, std::size_t bytes) const;

 private:
  struct Region {
    void* base = nullptr;        // what clSVMAlloc or mmap returned (freed with it)
    std::size_t base_bytes = 0;  // bytes at `base`
    cl_mem buffer = nullptr;     // covers [base, base + base_bytes)
    std::size_t bytes = 0;       // rounded bytes handed out, from the aligned address
  };

  void* do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  memory::MemoryStats do_stats() const override;
  void do_reset_peak() override;

  Region create_region(std::size_t rounded, std::size_t alignment, std::size_t requested,
                       const memory::AllocationTag& tag);
  void destroy_region(const Region& region) const noexcept;
  [[noreturn]] void throw_out_of_memory(std::size_t requested, std::size_t rounded, const memory::AllocationTag& tag,
                                        const std::string& what);

  const std::shared_ptr<OpenClContext> context_;
  const std::size_t capacity_;
  const RegionKind kind_;
  std::atomic<std::size_t> used_{0};         // rounded bytes of live regions, <= capacity_
  mutable std::shared_mutex regions_mutex_;  // guards regions_
  std::map<const char*, Region> regions_;    // keyed by the aligned address handed out
  mutable std::mutex stats_mutex_;           // guards stats_
  memory::MemoryStats stats_;
};

}  // namespace tp::backend::opencl
