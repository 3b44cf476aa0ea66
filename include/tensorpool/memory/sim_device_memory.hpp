// SPDX-License-Identifier: Apache-2.0
#pragma once
// SimDeviceMemory: the physical memory of a simulated accelerator: `capacity_bytes` obtained from the OS,
// never more. It is both
//   - a MemoryResource: allocate maps page-rounded bytes of its own (mmap), deallocate unmaps them;
//   - a VirtualMemory: reserve/commit/decommit and shareable physical granules as HostVirtualMemory (2 MiB
//     granules; a memfd's slices mapped at several places);
// and allocations and committed pages are counted against the SAME capacity, a hard wall: a request that
// would cross it throws tp::OutOfMemoryError with a report and leaves the device usable. So a sim device's
// capacity bounds whatever allocator sits on it (BFC through allocate, the ExpandableArena through commit).
//
// Stats (MemoryResource view): bytes_in_use = page-rounded bytes of outstanding allocations,
// bytes_requested = their requested sizes, bytes_reserved = used_bytes() (allocations + committed pages),
// bytes_limit = capacity. Thread-safe: used bytes are reserved with a compare-and-swap, stats under a mutex.

#include <atomic>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/virtual_memory.hpp"

namespace tp::memory {

class SimDeviceMemory final : public MemoryResource, public VirtualMemory {
 public:
  static constexpr std::size_t kGranularity = std::size_t{2} << 20;

  explicit SimDeviceMemory(std::size_t capacity_bytes, std::string name = "sim_device_memory");
  ~SimDeviceMemory() override = default;

  // Both interfaces name the device the same way.
  const std::string& name() const noexcept override { return MemoryResource::name(); }
  std::size_t max_alignment() const noexcept override { return page_size_; }
  std::size_t allocation_granularity() const noexcept override { return page_size_; }

  // Always engaged: the device's capacity in bytes.
  std::optional<std::size_t> capacity() const noexcept override { return capacity_; }
  [[nodiscard]] std::size_t capacity_bytes() const noexcept { return capacity_; }
  // Allocated (page-rounded) plus committed bytes: what counts against the capacity.
  [[nodiscard]] std::size_t used_bytes() const noexcept { return used_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t available_bytes() const noexcept;

  std::size_t granularity() const noexcept override { return kGranularity; }
  std::size_t committed_bytes() const noexcept override { return committed_.load(std::memory_order_relaxed); }
  [[nodiscard]] void* reserve(std::size_t bytes) override;
  void unreserve(void* base, std::size_t bytes) noexcept override;
  void commit(void* ptr, std::size_t bytes) override;
  void decommit(void* ptr, std::size_t bytes) noexcept override;
  [[nodiscard]] PhysicalHandle create_physical() override;
  void release_physical(PhysicalHandle handle) noexcept override;
  void map(void* ptr, PhysicalHandle handle) override { pages_.map(ptr, handle); }
  void unmap(void* ptr) noexcept override { pages_.unmap(ptr); }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;

  // Takes `bytes` of the capacity or returns false; never crosses the wall.
  bool take(std::size_t bytes) noexcept;
  // Raises the reserved peak to the current use, once taken bytes are really mapped or committed.
  void raise_peak() noexcept;
  [[noreturn]] void throw_out_of_memory(std::size_t requested, std::size_t rounded, const AllocationTag& tag,
                                        const std::string& what);
  void give_back(std::size_t bytes) noexcept;

  const std::size_t capacity_;
  const std::size_t page_size_;
  HostVirtualMemory pages_;           // uncapped: this class does the counting
  std::atomic<std::size_t> used_{0};  // allocations + committed, <= capacity_
  std::atomic<std::size_t> peak_used_{0};
  std::atomic<std::size_t> committed_{0};  // VirtualMemory side only
  mutable std::mutex mutex_;               // guards stats_ (the allocation side)
  MemoryStats stats_;
};

}  // namespace tp::memory
