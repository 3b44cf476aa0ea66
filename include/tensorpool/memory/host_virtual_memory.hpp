// SPDX-License-Identifier: Apache-2.0
#pragma once
// HostVirtualMemory: VirtualMemory over the host's page tables.
//
//   reserve   = mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE), over-reserved and trimmed so
//               the base is aligned to the granularity; costs address space only.
//   commit    = mprotect(PROT_READ | PROT_WRITE); counted against the optional capacity (a hard wall:
//               tp::OutOfMemoryError naming the capacity when it would be exceeded).
//   decommit  = madvise(MADV_DONTNEED) + mprotect(PROT_NONE); the pages go back to the OS, uncounted.
//   physical granules: one memfd (memfd_create, made at construction: tp::DeviceError if the OS refuses)
//               whose granule-sized slices are the handles: create_physical takes a free slice (growing
//               the file with ftruncate), map = mmap(MAP_SHARED | MAP_FIXED) of the slice, unmap = a fresh
//               PROT_NONE reservation over the granule, release_physical = fallocate(PUNCH_HOLE) so the pages
//               go back to the OS. Created granules count as committed bytes, against the same capacity.
//
// The caller keeps track of which granules are committed: committing a committed range or decommitting an
// uncommitted one double-counts (the ExpandableArena never does). Thread-safe: the committed counter is
// atomic and the capacity check is a compare-and-swap; the memfd's free slices are guarded by a mutex.

#include <atomic>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/memory/virtual_memory.hpp"

namespace tp::memory {

class HostVirtualMemory final : public VirtualMemory {
 public:
  // `granularity` must be a power of two and a multiple of the page size (tp::InvalidArgument otherwise).
  explicit HostVirtualMemory(std::optional<std::size_t> capacity = std::nullopt,
                             std::size_t granularity = std::size_t{2} << 20, std::string name = "host_vm");
  ~HostVirtualMemory() override;
  HostVirtualMemory(const HostVirtualMemory&) = delete;
  HostVirtualMemory& operator=(const HostVirtualMemory&) = delete;

  const std::string& name() const noexcept override { return name_; }
  std::size_t granularity() const noexcept override { return granularity_; }
  std::optional<std::size_t> capacity() const noexcept override { return capacity_; }
  std::size_t committed_bytes() const noexcept override { return committed_.load(std::memory_order_relaxed); }
  std::size_t peak_committed_bytes() const noexcept { return peak_committed_.load(std::memory_order_relaxed); }

  [[nodiscard]] void* reserve(std::size_t bytes) override;
  void unreserve(void* base, std::size_t bytes) noexcept override;
  void commit(void* ptr, std::size_t bytes) override;
  void decommit(void* ptr, std::size_t bytes) noexcept override;
  [[nodiscard]] PhysicalHandle create_physical() override;
  void release_physical(PhysicalHandle handle) noexcept override;
  void map(void* ptr, PhysicalHandle handle) override;
  void unmap(void* ptr) noexcept override;
  // Bytes of the memfd that hold pages (st_blocks): what release_physical gave back shows here.
  [[nodiscard]] std::size_t physical_resident_bytes() const;

 private:
  // Counts `bytes` as committed, or throws tp::OutOfMemoryError naming the capacity.
  void take(std::size_t bytes);
  // The OS refused a request of `bytes`: gives back the `taken` bytes it counted (take()), then throws
  // tp::OutOfMemoryError with `detail` (after this source's name) and what stays committed.
  [[noreturn]] void refuse(std::size_t bytes, std::size_t taken, const std::string& detail);
  void raise_peak(std::size_t now) noexcept;

  const std::optional<std::size_t> capacity_;
  const std::size_t granularity_;
  const std::string name_;
  std::atomic<std::size_t> committed_{0};
  std::atomic<std::size_t> peak_committed_{0};
  int memfd_ = -1;                           // the physical granules' file; owned
  std::mutex slices_mutex_;                  // guards the three below
  std::vector<PhysicalHandle> free_slices_;  // released slices, reused first; capacity >= slices issued
  PhysicalHandle next_slice_ = 0;            // slices [0, next_slice_) have been issued
  std::size_t file_bytes_ = 0;               // the memfd's size
};

}  // namespace tp::memory
